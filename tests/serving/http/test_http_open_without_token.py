"""A service that listens beyond loopback without a token warns that anyone who can reach it can
move and delete KV data (a real ``kvcast serve agent``, bound to every address, port 0); on
loopback, or with a token, it does not."""

from __future__ import annotations

import os
import signal

import pytest
from serve_processes import AGENT_READY, start_agent

from kvcast.serving.http.auth import reachable_without_token
from kvcast.serving.tls import ENV

WARNING = "no token (KVCAST_TOKEN) and listening on"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "KVCAST_TOKEN" and k not in ENV.values()}
    return env | extra


@pytest.mark.parametrize(
    ("listen", "env", "warned"),
    [
        ("0.0.0.0:0", {}, True),
        ("127.0.0.1:0", {}, False),
        ("0.0.0.0:0", {"KVCAST_TOKEN": "s3cret-token"}, False),
    ],
)
def test_an_agent_open_beyond_loopback_without_a_token_warns(
    listen: str, env: dict[str, str], warned: bool
) -> None:
    agent = start_agent("n0", _env(**env), "--listen", listen, "--transfer-listen", listen)
    try:
        agent.wait_ready(AGENT_READY)
        assert agent.stop(signal.SIGTERM) == 0
    finally:
        agent.kill()
    lines = [line for line in agent.log if WARNING in line]
    assert bool(lines) is warned, "".join(agent.log)
    if warned:  # both its ports, named
        assert lines[0].count("0.0.0.0:") == 2 and "move and delete KV data" in lines[0]


def test_reachable_addresses_are_those_off_loopback_when_no_token_is_set() -> None:
    addresses = ["127.0.0.1:1", "[::1]:2", "localhost:3", "0.0.0.0:4", "[::]:5",
                 "10.0.0.7:6", "gpu-0.cluster:7"]  # fmt: skip
    assert reachable_without_token(None, addresses) == addresses[3:]
    assert reachable_without_token("token", addresses) == []
    assert reachable_without_token(None, addresses, mutual_tls=True) == []  # certificates
