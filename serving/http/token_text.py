"""What a bearer token's text must be for a client to send it and a service to match it.

A service reads the token of ``Authorization: Bearer <token>`` stripped, and printable ASCII is
what every client sends as it is (httpx refuses non-ASCII header values; the cluster's own
client refuses any control character, a tab included). So a token that is blank, padded with
whitespace, or holds another character is refused: one that cannot be presented would lock
every holder out (or, padded, pass for another token equal to its stripped text), and one that
only some clients can send would work for some callers only. :func:`token_problem` says why a
token is refused, never showing it.
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
            "holds a character an HTTP header cannot carry (from every client): use printable "
            "ASCII only (letters, digits, punctuation, inner spaces)"
        )
    return None
