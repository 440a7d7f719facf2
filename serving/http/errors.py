"""422 answers that name the bad field: ``{"error": "body.tenant: Field required", "detail":
[...]}``, ``detail`` being pydantic's list (``loc``, ``msg``, ``type``) without echoing input."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel


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


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, validation_error_handler)
