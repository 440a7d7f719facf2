"""Typed calls from the sidecar to one agent's control API (httpx, bearer token).

Each call returns the agent's typed answer, or an :class:`AgentCallError` saying why there is
none and whether the agent itself is at fault (unreachable, 5xx) rather than the command.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from kvcast.serving.agent.api_models import (
    BlockRefs,
    EvictResult,
    Removals,
    ReplicateRequest,
    ReplicateResult,
)
from kvcast.serving.messages import BlockHash


@dataclass(frozen=True, slots=True)
class AgentCallError:
    detail: str
    agent_down: bool  # the agent did not answer, or failed itself (5xx)


def ints(*hashes: BlockHash) -> list[int]:
    """The sidecar sends u64 hashes only, so the agents answer with those."""
    return [h for h in hashes if isinstance(h, int)]


class AgentClient:
    def __init__(self, client: httpx.AsyncClient, token: str | None, timeout_s: float) -> None:
        self.client, self.timeout_s = client, timeout_s
        self.headers = {"Content-Type": "application/json"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"

    async def _send(
        self, method: str, url: str, timeout: float, **kwargs: Any
    ) -> httpx.Response | AgentCallError:
        try:
            resp = await self.client.request(
                method, url, headers=self.headers, timeout=timeout, **kwargs
            )
        except httpx.HTTPError as err:
            return AgentCallError(f"agent unreachable: {type(err).__name__}", True)
        if resp.status_code != 200:
            detail = f"agent answered {resp.status_code}: {resp.text[:200]}"
            return AgentCallError(detail, resp.status_code >= 500)
        return resp

    async def _post(self, url: str, body: str, timeout: float) -> httpx.Response | AgentCallError:
        return await self._send("POST", url, timeout, content=body)

    async def removals(self, base: str, since: int) -> Removals | AgentCallError:
        """The blocks the agent at ``base`` removed on its own, from number ``since`` on."""
        url = f"{base}/v1/removals"
        resp = await self._send("GET", url, self.timeout_s, params={"since": since})
        if isinstance(resp, AgentCallError):
            return resp
        return Removals.model_validate_json(resp.content)

    async def replicate(self, base: str, req: ReplicateRequest) -> ReplicateResult | AgentCallError:
        """Ask the agent at ``base`` to pull; waits until the pull is over (or its deadline)."""
        timeout = req.deadline_s + self.timeout_s
        resp = await self._post(f"{base}/v1/replicate", req.model_dump_json(), timeout)
        if isinstance(resp, AgentCallError):
            return resp
        return ReplicateResult.model_validate_json(resp.content)

    async def evict(self, base: str, req: BlockRefs) -> EvictResult | AgentCallError:
        resp = await self._post(f"{base}/v1/evict", req.model_dump_json(), self.timeout_s)
        if isinstance(resp, AgentCallError):
            return resp
        return EvictResult.model_validate_json(resp.content)
