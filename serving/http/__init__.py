"""HTTP pieces shared by kvcast's services (the transfer agent now, the router sidecar next):
bearer-token auth, field-named 422 errors, Prometheus exposition, JSON block hashes, and
uvicorn run on the caller's event loop with clean SIGINT/SIGTERM shutdown."""
