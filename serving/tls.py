"""Mutual TLS between the sidecar and the agents, and between agents (optional).

Every process holds a certificate and key signed by one cluster CA and accepts only peers
that present one too: the agents' HTTP control API and transfer server require a client
certificate signed by the CA; the sidecar's calls to the agents and an agent's pulls from its
peers present theirs and verify the server's against the CA (host name included: give each
certificate the names or IPs the peers dial). With mTLS on, agent URLs are ``https://``.

Set by three environment variables (all or none) that ``kvcast serve agent`` and ``kvcast
serve sidecar`` read at start: ``KVCAST_TLS_CERT``, ``KVCAST_TLS_KEY``, ``KVCAST_TLS_CA``
(PEM files). The shared token still applies on top: TLS says who may connect, the token what
may be commanded.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ENV = {"cert": "KVCAST_TLS_CERT", "key": "KVCAST_TLS_KEY", "ca": "KVCAST_TLS_CA"}


@dataclass(frozen=True, slots=True)
class TlsFiles:
    cert: Path  # this process's certificate chain (PEM), signed by ``ca``
    key: Path  # its private key (PEM)
    ca: Path  # the CA certificate(s) peers must be signed by (PEM)

    def server_context(self) -> ssl.SSLContext:
        """Serves TLS and requires a client certificate signed by the CA."""
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(self.ca))
        ctx.load_cert_chain(str(self.cert), str(self.key))
        ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx

    def client_context(self) -> ssl.SSLContext:
        """Presents this certificate and verifies the server's (chain and host name)."""
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(self.ca))
        ctx.load_cert_chain(str(self.cert), str(self.key))
        return ctx


def tls_from_env(environ: Mapping[str, str] | None = None) -> TlsFiles | None:
    """The files named by ``KVCAST_TLS_*`` (None when none is set); ValueError naming the
    variable when only some are set, a file is missing, or the files do not load."""
    env = os.environ if environ is None else environ
    given = {k: env.get(v, "") for k, v in ENV.items()}
    if not any(given.values()):
        return None
    missing = [ENV[k] for k, v in given.items() if not v]
    if missing:
        raise ValueError(f"mTLS needs {', '.join(ENV.values())}; {', '.join(missing)} unset")
    for k, v in given.items():
        if not Path(v).is_file():
            raise ValueError(f"{ENV[k]}={v}: no such file")
    files = TlsFiles(Path(given["cert"]), Path(given["key"]), Path(given["ca"]))
    try:
        files.server_context()
    except (ssl.SSLError, OSError) as err:
        raise ValueError(f"{ENV['cert']}/{ENV['key']}/{ENV['ca']}: cannot load: {err}") from None
    return files
