"""Typed calls from the sidecar to one agent's control API (httpx, bearer token).

Each call returns the agent's typed answer, or an :class:`AgentCallError` saying why there is
none and whether the agent itself is at fault (unreachable, 5xx) rather than the command.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel

from kvcast.serving.agent.api_models import (
    BlockRefs,
    EvictResult,
    HoldRequest,
    HoldResult,
    ReleaseRequest,
    ReleaseResult,
    Removals,
    ReplicateRequest,
    ReplicateResult,
)
from kvcast.serving.messages import BlockHash

M = TypeVar("M", bound=BaseModel)


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

    async def _call(
        self, method: str, url: str, answer: type[M], timeout: float, **kwargs: Any
    ) -> M | AgentCallError:
        """One request to an agent; its typed answer, or why there is none."""
        try:
            resp = await self.client.request(
                method, url, headers=self.headers, timeout=timeout, **kwargs
            )
        except httpx.HTTPError as err:
            return AgentCallError(f"agent unreachable: {type(err).__name__}", True)
        if resp.status_code != 200:
            detail = f"agent answered {resp.status_code}: {resp.text[:200]}"
            return AgentCallError(detail, resp.status_code >= 500)
        return answer.model_validate_json(resp.content)

    async def removals(self, base: str, since: int) -> Removals | AgentCallError:
        """The blocks the agent at ``base`` removed without the sidecar's command (on its own,
        or on a tenant token's), from number ``since`` on."""
        url = f"{base}/v1/removals"
        return await self._call("GET", url, Removals, self.timeout_s, params={"since": since})

    async def replicate(self, base: str, req: ReplicateRequest) -> ReplicateResult | AgentCallError:
        """Ask the agent at ``base`` to pull; waits until the pull is over (or its deadline)."""
        timeout = req.deadline_s + self.timeout_s
        url, body = f"{base}/v1/replicate", req.model_dump_json()
        return await self._call("POST", url, ReplicateResult, timeout, content=body)

    async def evict(self, base: str, req: BlockRefs) -> EvictResult | AgentCallError:
        url, body = f"{base}/v1/evict", req.model_dump_json()
        return await self._call("POST", url, EvictResult, self.timeout_s, content=body)

    async def hold(self, base: str, req: HoldRequest) -> HoldResult | AgentCallError:
        """Ask the agent at ``base`` to hold replicas for a routed request."""
        url, body = f"{base}/v1/hold", req.model_dump_json()
        return await self._call("POST", url, HoldResult, self.timeout_s, content=body)

    async def release(self, base: str, req: ReleaseRequest) -> ReleaseResult | AgentCallError:
        url, body = f"{base}/v1/release", req.model_dump_json()
        return await self._call("POST", url, ReleaseResult, self.timeout_s, content=body)
