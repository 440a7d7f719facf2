"""422 answers that name the bad field: ``{"error": "body.tenant: Field required", "detail":
[...]}``, ``detail`` being pydantic's list (``loc``, ``msg``, ``type``) without echoing input.

A body that cannot be parsed at all (not UTF-8, not JSON) is a 422 of the field ``body`` in
the same shape, not FastAPI's bare 400 ("There was an error parsing the body"), so that every
refusal of a request's content is documented once and names what was wrong."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from kvcast.serving.http.auth import path_pattern

BODY_PARSE_ERROR = "There was an error parsing the body"  # FastAPI's 400 for such a body
METHODS = {"GET", "PUT", "POST", "DELETE", "OPTIONS", "HEAD", "PATCH", "TRACE"}


class FieldError(BaseModel):
    field: str
    loc: list[str]
    msg: str
    type: str


class ValidationErrorBody(BaseModel):
    """A 422 answer: ``error`` names every bad field in one line; ``detail`` lists them."""

    error: str
    detail: list[FieldError]


class ErrorBody(BaseModel):
    """Any other refusal (401, 404, 409): the reason in one line."""

    detail: str


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` documenting these refusals with the bodies actually sent."""
    return {
        s: {"model": ValidationErrorBody if s == 422 else ErrorBody, "description": "refused"}
        for s in statuses
    }


def field_errors(err: RequestValidationError) -> list[dict[str, Any]]:
    """Each problem as ``{"field": "body.block_hashes.3", "loc": [...], "msg": ..., "type":
    ...}``; the offending input is left out (it may be large, or a secret)."""
    out = []
    for e in err.errors():
        loc = [str(p) for p in e.get("loc", ())]
        out.append({"field": ".".join(loc), "loc": loc, "msg": e["msg"], "type": e["type"]})
    return out


async def validation_error_handler(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = field_errors(exc)
    summary = "; ".join(f"{e['field']}: {e['msg']}" for e in errors) or "invalid request"
    return JSONResponse(status_code=422, content={"error": summary, "detail": errors})


async def http_error_handler(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400 and exc.detail == BODY_PARSE_ERROR:
        msg = "not parseable as JSON (bad encoding or syntax)"
        error = {"field": "body", "loc": ["body"], "msg": msg, "type": "json_invalid"}
        return JSONResponse(status_code=422, content={"error": f"body: {msg}", "detail": [error]})
    if exc.status_code == 405:  # Allow: every method of the path, across all routers
        allow = ", ".join(sorted(allowed_methods(request)))
        return JSONResponse({"detail": exc.detail}, status_code=405, headers={"Allow": allow})
    return await http_exception_handler(request, exc)


def allowed_methods(request: Request) -> set[str]:
    """Methods of every documented operation whose path matches the request's (Starlette's
    own 405 names only the first matching route's, when GET and POST of a path sit in
    different routers); read from the app's OpenAPI schema, HEAD going with GET."""
    out: set[str] = set()
    app = request.app
    paths = app.openapi().get("paths", {}) if isinstance(app, FastAPI) else {}
    for template, item in paths.items():
        if path_pattern(template).fullmatch(request.url.path):
            out |= {m.upper() for m in item if m.upper() in METHODS}
    return out | ({"HEAD"} if "GET" in out else set())


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, validation_error_handler)
    app.add_exception_handler(StarletteHTTPException, http_error_handler)
