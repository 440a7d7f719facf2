"""A bearer token's text: what a client can send in a header and a service can match (read
stripped) is accepted, inner spaces included; anything else is refused, never shown."""

from __future__ import annotations

import pytest

from kvcast.serving.http.auth import Token, token_from_env
from kvcast.serving.http.token_text import token_problem


@pytest.mark.parametrize("value", ["s3cret", "correct horse battery", "a-b_c.d~e!#$%&'*+/=?^`|"])
def test_what_a_header_carries_and_a_service_matches_is_a_token(value: str) -> None:
    assert token_problem(value) is None
    assert token_from_env(value, "KVCAST_TOKEN") == value


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("", "is set but empty"),
        ("  ", "is set but empty"),
        ("s3cret\n", "leading or trailing whitespace"),  # a secret file's newline
        (" s3cret", "leading or trailing whitespace"),
        ("s3cret-é", "a character an HTTP header cannot carry"),
        ("s3cret\tx", "a character an HTTP header cannot carry"),
        ("s3cret\x7f", "a character an HTTP header cannot carry"),
    ],
)
def test_a_token_no_header_can_present_is_refused_naming_where_never_what(
    value: str, why: str
) -> None:
    problem = token_problem(value)
    assert problem is not None and why in problem
    with pytest.raises(ValueError) as err:
        token_from_env(value, "KVCAST_TOKEN")
    assert str(err.value).startswith("KVCAST_TOKEN ") and why in str(err.value)
    assert "s3cret" not in str(err.value)
    from pydantic import TypeAdapter, ValidationError

    with pytest.raises(ValidationError) as bad:
        TypeAdapter(Token).validate_python(value)
    assert why in str(bad.value)
