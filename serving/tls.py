"""TLS for kvcast's servers: mutual TLS between the sidecar and the agents, and between agents
(optional), and TLS on the sidecar's own HTTP API.

Every process holds a certificate and key signed by one cluster CA and accepts only peers
that present one too: the agents' HTTP control API and transfer server require a client
certificate signed by the CA; the sidecar's calls to the agents and an agent's pulls from its
peers present theirs and verify the server's against the CA (host name included: give each
certificate the names or IPs the peers dial). With mTLS on, agent URLs are ``https://``.

Set by three environment variables (all or none) that ``kvcast serve agent`` and ``kvcast
serve sidecar`` read at start: ``KVCAST_TLS_CERT``, ``KVCAST_TLS_KEY``, ``KVCAST_TLS_CA``
(PEM files). The shared token still applies on top: TLS says who may connect, the token what
may be commanded.

:class:`ServerTls` is what one server presents and requires: its certificate and key, and, for
mutual TLS, the CA its clients' certificates must be signed by (``TlsFiles.server()`` is the
agents' mutual one; the sidecar's own API takes one from the ``tls:`` section of its config).

Every TLS listener bounds the handshake (:data:`HANDSHAKE_TIMEOUT_S` unless configured: the
HTTP APIs' ``http.tls_handshake_timeout_s``, the agents' transfer server's
``transfer_tls_handshake_timeout_s``): a peer that opens a connection and does not finish its
handshake in that time, whether it sends nothing or dribbles its ClientHello, is cut off.
asyncio's own default is 60 s, during which such a connection holds a file descriptor and
asyncio's TLS state without ever reaching the servers' connection caps (which count
connections once their handshake is done): enough of them would use up the process's open
files, and ``accept`` would then fail for legitimate clients too. kvcast's TLS clients bound
their handshakes by the timeouts around their connects: an agent's pulls by
``connect_timeout_s``, an engine's calls to its agent by the request's ``timeout_s``, the
sidecar's calls to the agents by their httpx timeout (whose connect part covers the handshake).
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ENV = {"cert": "KVCAST_TLS_CERT", "key": "KVCAST_TLS_KEY", "ca": "KVCAST_TLS_CA"}
# Seconds a peer gets to complete a TLS handshake with a kvcast server. A handshake takes a few
# round trips and a signature or two (milliseconds within a datacenter, well under a second
# across zones), so this leaves ample room for a loaded peer while cutting off one that stalls
# it long before asyncio's default (60 s) would.
HANDSHAKE_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class ServerTls:
    """TLS on a server: its certificate chain and key (PEM), and ``client_ca``: the CA whose
    client certificates it requires (mutual TLS; None: any client may connect, and verifies
    the server's certificate against a CA of its own)."""

    cert: Path
    key: Path
    client_ca: Path | None = None

    @property
    def mutual(self) -> bool:
        return self.client_ca is not None

    def context(self) -> ssl.SSLContext:
        """Serves TLS; with ``client_ca``, requires a client certificate signed by it."""
        cafile = None if self.client_ca is None else str(self.client_ca)
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=cafile)
        ctx.load_cert_chain(str(self.cert), str(self.key))
        ctx.verify_mode = ssl.CERT_REQUIRED if self.mutual else ssl.CERT_NONE
        return ctx

    def checked(self, names: str) -> ServerTls:
        """This, once its files load; else a ValueError naming ``names`` (where they were set)."""
        try:
            self.context()
        except (ssl.SSLError, OSError) as err:
            raise ValueError(f"{names}: cannot load: {err}") from None
        return self


@dataclass(frozen=True, slots=True)
class TlsFiles:
    cert: Path  # this process's certificate chain (PEM), signed by ``ca``
    key: Path  # its private key (PEM)
    ca: Path  # the CA certificate(s) peers must be signed by (PEM)

    def server(self) -> ServerTls:
        """Serving with these files: mutual TLS, clients' certificates signed by the CA."""
        return ServerTls(self.cert, self.key, client_ca=self.ca)

    def server_context(self) -> ssl.SSLContext:
        """Serves TLS and requires a client certificate signed by the CA."""
        return self.server().context()

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
    files.server().checked(f"{ENV['cert']}/{ENV['key']}/{ENV['ca']}")
    return files
