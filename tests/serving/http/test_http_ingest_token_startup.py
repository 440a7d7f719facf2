"""The ingest token at start-up: ``kvcast serve sidecar`` and ``kvcast serve agent`` read it
from ``KVCAST_INGEST_TOKEN`` (or the variable ``--ingest-token-env`` names) and refuse, before
anything starts, one set but blank, one without a shared token, one equal to the shared token,
and a tenant token equal to it: exit status 2, one line naming the variable, never the secret,
no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from serve_commands import serve_command
from typer.testing import CliRunner

from kvcast.cli.app import app

SHARED, REPORTS = "shared-s3cret", "ingest-s3cret"
TENANTS = [{"tenants": ["acme"], "token_env": "KT_ACME"}]


@pytest.mark.parametrize("kind", ["sidecar", "agent"])
@pytest.mark.parametrize(
    ("env", "flags", "message"),
    [
        ({"KVCAST_TOKEN": SHARED, "KVCAST_INGEST_TOKEN": "  "}, [],
         "KVCAST_INGEST_TOKEN is set but empty"),
        ({"KVCAST_INGEST_TOKEN": REPORTS, "KT_ACME": "acme-s3cret"}, [],
         "KVCAST_INGEST_TOKEN is set but KVCAST_TOKEN is not"),
        ({"KVCAST_TOKEN": SHARED, "KVCAST_INGEST_TOKEN": SHARED}, [],
         "KVCAST_INGEST_TOKEN is the same as KVCAST_TOKEN"),
        ({"KVCAST_TOKEN": SHARED, "REPORTS_TOKEN": SHARED}, ["--ingest-token-env", "REPORTS_TOKEN"],
         "REPORTS_TOKEN is the same as KVCAST_TOKEN"),
        ({"KVCAST_TOKEN": SHARED, "KVCAST_INGEST_TOKEN": REPORTS, "KT_ACME": REPORTS}, [],
         "tenant_tokens[0] (KT_ACME): its token is the ingest token"),
    ],
)  # fmt: skip
def test_a_bad_ingest_token_stops_the_service_in_one_line_naming_its_variable(
    tmp_path: Path, kind: str, env: dict[str, str], flags: list[str], message: str
) -> None:
    full = {"KVCAST_TOKEN": None, "KVCAST_INGEST_TOKEN": None, "KT_ACME": None} | env
    args = [*serve_command(kind, tmp_path, TENANTS), *flags]
    r = CliRunner().invoke(app, args, env=full)  # type: ignore[arg-type]
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.output
    assert "s3cret" not in r.output and "Traceback" not in r.output
