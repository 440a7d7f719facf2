"""What a bearer token's text must be for a client to send it and a service to match it.

A service reads the token of ``Authorization: Bearer <token>`` stripped, and an HTTP header
carries printable ASCII only (httpx refuses anything else, and so does the cluster's own
client). So a token that is blank, padded with whitespace, or holds another character can
never be presented: a shared token like that would lock every holder out (or, padded, pass
for another token equal to its stripped text). :func:`token_problem` says why a token is
refused, never showing it.
"""

from __future__ import annotations


def token_problem(value: str) -> str | None:
    """Why ``value`` cannot serve as a bearer token (None: it can), in words that follow the
    token's name and never show it."""
    if not value.strip():
        return "is set but empty; unset it or give it a secret"
    if value != value.strip():
        return "has leading or trailing whitespace, which a bearer header drops; remove it"
    if not all(" " <= c <= "~" for c in value):
        return (
            "holds a character an HTTP header cannot carry: use printable ASCII only (letters, "
            "digits, punctuation, inner spaces)"
        )
    return None
