"""Schemathesis over the sidecar's and the agent's own OpenAPI schemas (in-process ASGI apps,
a token configured, valid and invalid requests, 50 per operation): no request gets a 5xx
(but ``/readyz``'s documented 503 while not ready), every answer has a documented status code
and body, and every 422 names each bad field (``error`` lists them as ``location.field:
reason``, ``detail`` gives each one's location); any other 4xx gives its reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

schemathesis = pytest.importorskip("schemathesis")

from schemathesis import GenerationMode  # noqa: E402

from kvcast.serving.agent import Agent, AgentConfig  # noqa: E402
from kvcast.serving.agent.api import build_app as agent_app  # noqa: E402
from kvcast.serving.agent.control import AgentControl  # noqa: E402
from kvcast.serving.sidecar.api import build_app as sidecar_app  # noqa: E402
from kvcast.serving.sidecar.config import SidecarConfig  # noqa: E402
from kvcast.serving.sidecar.core import Sidecar  # noqa: E402

EXAMPLES = 50
TOKEN = "schemathesis-token"  # the safe configuration: every data route needs it
AUTH = {"Authorization": f"Bearer {TOKEN}"}
CLOSED_PEER = "127.0.0.1:9"  # discard port, nothing listens: a pull fails at once, locally
MODES = [GenerationMode.POSITIVE, GenerationMode.NEGATIVE]


def _schema(app: Any) -> Any:
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    schema.config.generation.update(modes=MODES, max_examples=EXAMPLES)
    return schema


@pytest.fixture
def sidecar_schema(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A sidecar whose parts are built but not started: handlers queue and answer, the
    consumer answers lookups inline. A ``models:/`` URI resolves in an empty local store."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    cfg = SidecarConfig.model_validate({
        "nodes": [{"name": "node-a"}, {"name": "node-b"}], "decision_log": {"path": None},
        "queue_events": 10_000, "token": TOKEN,
    })  # fmt: skip
    return _schema(sidecar_app(Sidecar(cfg)))


@pytest.fixture
def agent_schema() -> Any:
    """An agent (not listening: no peer can pull from it) with fast failing pulls."""
    cfg = AgentConfig(capacity_bytes=64 << 20, speculative_quota_bytes=16 << 20, max_retries=0,
                      connect_timeout_s=0.5, max_block_bytes=1 << 20, token=TOKEN)  # fmt: skip
    return _schema(agent_app(AgentControl(Agent(cfg)), TOKEN))


def check_answer(case: Any) -> None:
    if case.path == "/v1/replicate" and isinstance(case.body, dict) and "source" in case.body:
        case.body["source"] = CLOSED_PEER  # pulls stay on this machine, whatever was drawn
    response = case.call(headers=AUTH)
    not_ready = case.path == "/readyz" and response.status_code == 503  # documented: not ready
    assert response.status_code < 500 or not_ready, (response.status_code, response.text)
    excluded = LAX + ([schemathesis.checks.not_a_server_error] if not_ready else [])
    case.validate_response(response, excluded_checks=excluded)
    if response.status_code == 422:
        body = response.json()
        assert body["detail"], body
        for item in body["detail"]:
            assert item["field"] and item["field"] in body["error"], body
            assert item["loc"][0] in ("body", "query", "path", "header"), body
    elif 400 <= response.status_code < 500:
        assert response.json()["detail"], response.text  # a reason in one line


# Two checks hold the APIs to more than their schemas can say. Rejection of every
# schema-violating request: pydantic's lax mode serves ``true`` as 1 and ``"1"`` as 1, the
# value the field documents. Acceptance of every schema-valid request: what is valid also
# depends on the running config and state (a node name must be one of the configured nodes,
# a hash at most 2**64 - 1, which the generator draws through floats), and those requests
# get a 422 naming the field, which the checks below hold them to.
LAX = [schemathesis.checks.negative_data_rejection, schemathesis.checks.positive_data_acceptance]

sidecar = schemathesis.pytest.from_fixture("sidecar_schema")
agent = schemathesis.pytest.from_fixture("agent_schema")


@sidecar.parametrize()
def test_the_sidecar_api_answers_every_request_as_documented(case: Any) -> None:
    check_answer(case)


@agent.parametrize()
def test_the_agent_api_answers_every_request_as_documented(case: Any) -> None:
    check_answer(case)
