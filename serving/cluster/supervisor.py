"""A local cluster: N ``kvcast serve agent`` processes and one ``kvcast serve sidecar``, on
loopback, started in order and stopped in order.

Start: the model is checked against the sidecar's feature spec (:mod:`.model_choice`) before
any process starts. The agents start at once, each binding port 0 for HTTP and transfer and
reporting what it got in its ready line (ports reserved for them and released before they bound
could go to another process meanwhile, the sidecar included); then loopback ports outside the
kernel's ephemeral range are reserved for every engine (ZMQ PUB, replay: :mod:`.ports`), the
sidecar's config is written into the workdir with the agents' addresses (:mod:`.config_gen`)
and the sidecar starts; once its ready line is in, the addresses go to
``<workdir>/cluster.json`` (:mod:`.layout`). Every process is told the variables of the
shared token and of the ingest token (``--token-env``, ``--ingest-token-env``) that are set,
and reads them from the environment it inherits; a variable unset is named to none (a process
refuses an option naming an unset variable), and its default variable is kept from them: no
process has that token. An ingest token without a shared token, or equal to it, stops the
start before any process runs. With ``tls``, a new cluster CA and a certificate
per process (and one for the replay client) are written to ``<workdir>/tls/`` first
(:mod:`.certs`), every process gets its own through ``KVCAST_TLS_*``, the sidecar's config
serves its API over mutual TLS with its own, the sidecar's and the agents' URLs are
``https://`` and ``cluster.json`` names the CA and the client's files. Any failure stops what
was started and raises :class:`ServiceFailed` with the failing process's last lines, or
:class:`StartAborted` when the ``abort`` event was set meanwhile (a signal handler sets it: no
exception is ever raised between a fork and the bookkeeping of its child). Stop: the sidecar
first (it commands the agents), then every agent at once; each gets SIGTERM, then SIGKILL after
the grace period, and is reaped. Logs: ``<workdir>/logs/<name>.log``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kvcast.serving.agent.config import check_hello_fits
from kvcast.serving.cluster.config_gen import (
    decider_data,
    feature_spec,
    node_name,
    sidecar_data,
    write_configs,
)
from kvcast.serving.cluster.layout import (
    CLUSTER_FILE,
    ClusterLayout,
    NodeAddresses,
    TlsPaths,
    read_layout,
)
from kvcast.serving.cluster.model_choice import check_model
from kvcast.serving.cluster.ports import LOOPBACK, free_ports, tcp_endpoint
from kvcast.serving.cluster.process import (
    AGENT_READY,
    SIDECAR_READY,
    ServiceFailed,
    ServiceProcess,
    StartAborted,
    kvcast_command,
)
from kvcast.serving.http.auth import tokens_from_env
from kvcast.serving.http.token_env import INGEST_TOKEN_ENV, SHARED_TOKEN_ENV
from kvcast.serving.tls import ENV as TLS_ENV
from kvcast.serving.tls import TlsFiles

__all__ = ["REPLAY_CLIENT", "TLS_DIR", "ClusterSpec", "LocalCluster", "ServiceFailed",
           "StartAborted"]  # fmt: skip
MiB = 1 << 20
TLS_DIR, REPLAY_CLIENT = "tls", "replay-client"  # <workdir>/tls/, the replay's certificate


@dataclass(frozen=True)
class ClusterSpec:
    """What ``kvcast cluster up`` starts. Sizes in bytes, times in seconds."""

    model: str  # ONNX path or models:/name@alias
    agents: int = 3
    workdir: Path = field(default_factory=lambda: Path("kvcast-out/cluster"))
    mode: str = "shadow"
    token_env: str = SHARED_TOKEN_ENV  # the variable holding the shared token (unset: no auth)
    # the variable holding the ingest token (unset: none; the replay then reports with the
    # shared token)
    ingest_token_env: str = INGEST_TOKEN_ENV
    capacity_bytes: int = 512 * MiB  # per agent
    speculative_quota_bytes: int = 128 * MiB  # per agent
    block_bytes: int = 64 << 10  # KV bytes of one block, as the sidecar prices them
    tick_ms: float = 250.0
    tls: bool = False  # mutual TLS between every process (certificates made at start)
    ready_timeout_s: float = 60.0
    stop_grace_s: float = 10.0

    def __post_init__(self) -> None:
        if not 1 <= self.agents <= 64:
            raise ValueError(f"--agents must be between 1 and 64, got {self.agents}")
        if self.mode not in ("shadow", "active"):
            raise ValueError(f"--mode must be shadow or active, got {self.mode!r}")
        if self.capacity_bytes <= 0:
            raise ValueError(f"--capacity must be > 0, got {self.capacity_bytes}")
        if not 0 < self.speculative_quota_bytes <= self.capacity_bytes:
            raise ValueError(
                f"the speculative quota (--speculative-quota {self.speculative_quota_bytes}) "
                f"must be > 0 and at most the capacity (--capacity {self.capacity_bytes})"
            )
        if self.block_bytes <= 0:
            raise ValueError(f"--block-bytes must be > 0, got {self.block_bytes}")


LOCK_FILE = ".cluster.lock"  # held by the supervisor of the workdir's cluster


def _refuse_if_running(workdir: Path) -> None:
    """A ValueError when ``workdir``'s cluster.json names processes that still run."""
    try:
        pids = read_layout(workdir).pids
    except ValueError:
        return  # none, or unreadable: nothing to protect
    alive = []
    for name, pid in pids.items():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, 0)
            alive.append(f"{name} ({pid})")
    if alive:
        raise ValueError(f"a cluster runs in {workdir} already: {', '.join(alive)}; stop it "
                         "(Ctrl-C) or use another --workdir")  # fmt: skip


def tls_mismatch(ready_line: str, tls: bool) -> str:
    """Why a process's ready line does not match the cluster's TLS ("" when it does): with
    ``tls`` every ``tls=`` of the line (an agent's; the sidecar's ``api_tls=`` and
    ``agent_tls=``) must say ``mutual``, without it none may."""
    modes = re.findall(r"tls=(\S+)", ready_line)
    if tls and (not modes or any(m != "mutual" for m in modes)):
        return "started without mutual TLS"
    if not tls and "mutual" in modes:
        return "started with mutual TLS (KVCAST_TLS_* is set): use --tls or unset them"
    return ""


def token_options(spec: ClusterSpec, env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """The options naming the token variables a process is started with, and its environment
    (``env``'s): a variable set in ``env`` is named (``--token-env NAME``); one unset is not,
    since a process refuses an option naming an unset variable, and the process's default
    variable for that token is left out of its environment instead, so that it has no such
    token, as the cluster."""
    options, child = [], dict(env)
    for flag, name, default in (
        ("--token-env", spec.token_env, SHARED_TOKEN_ENV),
        ("--ingest-token-env", spec.ingest_token_env, INGEST_TOKEN_ENV),
    ):
        if name in env:
            options += [flag, name]
        elif default not in (spec.token_env, spec.ingest_token_env):  # (the other's variable)
            child.pop(default, None)
    return options, child


class LocalCluster:
    """``start()`` -> :class:`ClusterLayout`; ``stop()`` -> exit status per process."""

    def __init__(
        self, spec: ClusterSpec, env: Mapping[str, str] | None = None,
        abort: threading.Event | None = None,
    ) -> None:  # fmt: skip
        self.spec, self.abort = spec, abort  # abort: set it to make start() give up and stop
        self.env = dict(os.environ if env is None else env)
        self.workdir = spec.workdir.resolve()
        self.agents: list[ServiceProcess] = []
        self.sidecar: ServiceProcess | None = None
        self.layout: ClusterLayout | None = None
        self._lock: int | None = None  # the workdir's lock file, held from start to stop

    @property
    def services(self) -> list[ServiceProcess]:
        return [*([self.sidecar] if self.sidecar else []), *self.agents]

    def start(self) -> ClusterLayout:
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _service(
        self, name: str, args: list[str], ready: re.Pattern[str], tls: TlsFiles | None
    ) -> ServiceProcess:
        options, env = token_options(self.spec, self.env)
        if tls is not None:  # this process's own certificate and key, the cluster CA
            env = env | {TLS_ENV[k]: str(getattr(tls, k)) for k in TLS_ENV}
        proc = ServiceProcess(
            name, [*kvcast_command(), "serve", *args, *options, "--log-level", "info"],
            env=env, log_path=self.workdir / "logs" / f"{name}.log", ready=ready,
        )  # fmt: skip
        proc.start()
        return proc

    def _wait_ready(self, proc: ServiceProcess) -> re.Match[str]:
        """``proc``'s ready line; a ServiceFailed unless it has mutual TLS on exactly when the
        spec asks for it (without ``tls``, KVCAST_TLS_* set in our environment would): every
        ``tls=`` of the line (an agent's; the sidecar's ``api_tls=`` and ``agent_tls=``) says
        ``mutual`` with ``tls``, none does without."""
        match = proc.wait_ready(self.spec.ready_timeout_s, self.abort)
        wrong = tls_mismatch(match.string, self.spec.tls)
        if wrong:
            raise proc.failure(wrong)
        return match

    def _start(self) -> ClusterLayout:
        s = self.spec
        # both tokens checked before any start, the shared one against an agent's Hello too
        token, ingest = tokens_from_env(self.env, s.token_env, s.ingest_token_env)
        if token is not None:
            check_hello_fits(token, s.token_env)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.lock_workdir()
        _refuse_if_running(self.workdir)
        (self.workdir / CLUSTER_FILE).unlink(missing_ok=True)  # left by a killed supervisor
        names = [node_name(i) for i in range(s.agents)]
        certs: dict[str, TlsFiles] = {}
        if s.tls:
            from kvcast.serving.cluster.certs import make_cluster_certs

            certs = make_cluster_certs(self.workdir / TLS_DIR, ["sidecar", *names, REPLAY_CLIENT])
        scheme = "https" if s.tls else "http"
        port0 = f"{LOOPBACK}:0"  # each agent binds what the kernel gives and reports it
        # placeholders (distinct, as the config requires), rewritten once the agents are up
        unbound = [(tcp_endpoint(2 * i + 1), tcp_endpoint(2 * i + 2)) for i in range(s.agents)]
        placeholders = [f"{scheme}://{LOOPBACK}:{i + 1}" for i in range(s.agents)]
        provisional = self._write_config(placeholders, unbound, certs.get("sidecar"))
        check_model(s.model, feature_spec(provisional))  # before any process starts
        for name in names:
            args = ["agent", "--node-id", name, "--listen", port0, "--transfer-listen", port0,
                    "--capacity", str(s.capacity_bytes),
                    "--speculative-quota", str(s.speculative_quota_bytes)]  # fmt: skip
            self.agents.append(self._service(name, args, AGENT_READY, certs.get(name)))
        found = [self._wait_ready(a) for a in self.agents]
        ports = iter(free_ports(2 * s.agents, outside_ephemeral=True))  # engine PUB, replay
        engines = [(tcp_endpoint(next(ports)), tcp_endpoint(next(ports))) for _ in names]
        config = self._write_config(
            [f"{scheme}://{m.group(2)}" for m in found], engines, certs.get("sidecar")
        )
        self.sidecar = self._service(
            "sidecar", ["sidecar", "--config", str(config)], SIDECAR_READY, certs.get("sidecar")
        )
        ready = self._wait_ready(self.sidecar)
        nodes = tuple(
            NodeAddresses(name, f"{scheme}://{m.group(2)}", m.group(3), pub, replay)
            for name, m, (pub, replay) in zip(names, found, engines, strict=True)
        )
        client = certs.get(REPLAY_CLIENT)
        self.layout = ClusterLayout(
            sidecar=f"{scheme}://{ready.group(2)}", nodes=nodes, mode=s.mode, model=s.model,
            block_bytes=s.block_bytes, token_env=s.token_env if token else None,
            ingest_token_env=s.ingest_token_env if ingest else None,
            workdir=str(self.workdir), pids={p.name: p.pid for p in self.services},
            tls=None if client is None else TlsPaths.of(client),
        )  # fmt: skip
        self.layout.write(self.workdir)
        return self.layout

    def _write_config(
        self, agents: list[str], engines: list[tuple[str, str]], tls: TlsFiles | None
    ) -> Path:
        s = self.spec
        return write_configs(
            self.workdir,
            sidecar_data(agents=agents, engines=engines, mode=s.mode, model=s.model,
                         block_bytes=s.block_bytes, workdir=self.workdir, tick_ms=s.tick_ms,
                         tls=tls),
            decider_data(s.speculative_quota_bytes / s.capacity_bytes),
        )  # fmt: skip

    def exited(self) -> ServiceProcess | None:
        """A process that ended on its own (the cluster is then broken), if any."""
        return next((p for p in self.services if p.returncode() is not None), None)

    def lock_workdir(self) -> None:
        """Hold ``workdir``'s lock until :meth:`stop` (a ValueError if another supervisor
        holds it: one cluster per workdir, even while it is still starting)."""
        fd = os.open(self.workdir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ValueError(f"a cluster is starting or runs in {self.workdir} already; stop it "
                             "(Ctrl-C) or use another --workdir") from None  # fmt: skip
        self._lock = fd

    def stop(self) -> dict[str, int | None]:
        """Stop and reap every process; their exit statuses (0: a clean stop)."""
        try:
            return self._stop()
        finally:
            if self._lock is not None:
                os.close(self._lock)  # (closing the file releases its lock)
                self._lock = None

    def _stop(self) -> dict[str, int | None]:
        if self.layout is not None:
            with contextlib.suppress(OSError):
                (self.workdir / CLUSTER_FILE).unlink(missing_ok=True)
        grace = self.spec.stop_grace_s
        codes: dict[str, int | None] = {}
        if self.sidecar is not None:
            codes[self.sidecar.name] = self.sidecar.stop(grace)
        for agent in self.agents:
            agent.terminate()
        deadline = time.monotonic() + grace
        for agent in self.agents:
            codes[agent.name] = agent.stop(grace, deadline)
        return codes

    def __enter__(self) -> ClusterLayout:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
