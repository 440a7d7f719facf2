"""HTTP pieces shared by kvcast's services (the transfer agent and the router sidecar):
bearer-token auth, field-named 422 errors, Prometheus exposition, JSON block hashes, body size
limits, and uvicorn run on the caller's event loop with clean SIGINT/SIGTERM shutdown, bounds
on slow or too many clients (:mod:`.server_config`, :mod:`.protocol`) and TLS."""
