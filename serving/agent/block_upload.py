"""``PUT /v1/blocks``: the local engine stores one KV block's bytes into its agent.

Two body forms: JSON (``tenant``, ``block_hash``, ``checksum``, ``data`` as base64, optional
``state``), or the raw bytes as ``application/octet-stream`` with the same fields in headers
(``X-Kvcast-Tenant``, ``X-Kvcast-Block-Hash``: decimal for a u64 hash, ``0x`` then hex for a
bytes hash, ``X-Kvcast-Checksum``, ``X-Kvcast-State``).
The checksum (xxh3-64 of the bytes) is verified before the block becomes visible; a mismatch
is a 422 naming ``checksum``, no room a 409. The route writes and never reads: no block's
contents are ever returned. It is guarded by the shared token like every data command.
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any, Literal

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import Field, TypeAdapter, ValidationError

from kvcast.serving.agent.api_models import BlockEntry
from kvcast.serving.agent.api_models import Request as Body
from kvcast.serving.agent.blocks import (
    BlockState,
    ChecksumMismatch,
    OverTenantCap,
    StoreError,
    StoreFull,
)
from kvcast.serving.agent.control import AgentControl, CommandConflict
from kvcast.serving.agent.tenant_scope import check_upload, over_cap, upload_cap
from kvcast.serving.http.auth import ADMIN, Identity
from kvcast.serving.http.block_hash import (
    JsonBlockHash,
    decimal_u64,
    hash_from_header,
    hash_from_json,
)
from kvcast.serving.http.tenant_tokens import Tenant

HEADER = "x-kvcast-"
Checksum = Annotated[int, Field(ge=0, lt=1 << 64, description="xxh3-64 of the bytes")]
State = Literal["cached", "active"]


class BlockUpload(Body):
    tenant: Tenant
    block_hash: JsonBlockHash
    checksum: Checksum
    data: str = Field(description="the block's bytes, base64")
    state: State = "cached"


OPENAPI: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": BlockUpload.model_json_schema()},
            "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
        },
        "description": "JSON with base64 data, or raw bytes with X-Kvcast-* headers",
    }
}


def upload_limit(max_block_bytes: int) -> int:
    """Largest body accepted: a base64 block of ``max_block_bytes`` plus the JSON around it."""
    return 4 * (max_block_bytes // 3 + 1) + (64 << 10)


def _invalid(field: str, msg: str, where: str = "body") -> RequestValidationError:
    return RequestValidationError([{"loc": (where, field), "msg": msg, "type": "value_error"}])


def _field(adapter: TypeAdapter[Any], value: Any, field: str, where: str) -> Any:
    try:
        return adapter.validate_python(value)
    except ValidationError as err:
        raise _invalid(field, err.errors()[0]["msg"], where) from None


_TENANT, _CHECKSUM, _STATE = TypeAdapter(Tenant), TypeAdapter(Checksum), TypeAdapter(State)


def _header_checksum(text: str) -> int:
    """``X-Kvcast-Checksum``: the xxh3-64 as decimal ASCII digits, below 2**64; 422 otherwise
    (checked before ``int()``, which refuses more than 4300 digits with a ValueError)."""
    field = HEADER + "checksum"
    if not (text.isascii() and text.isdigit()):
        raise _invalid(field, f"must be decimal digits, got {text[:40]!r}", "header")
    try:
        value = decimal_u64(text)
    except ValueError as err:
        raise _invalid(field, str(err), "header") from None
    checksum: int = _field(_CHECKSUM, value, field, "header")
    return checksum


async def parse_upload(request: Request, who: Identity = ADMIN) -> tuple[BlockUpload, bytes]:
    """The upload and its bytes, from either body form; 422 naming the bad field, 403 for an
    upload ``who`` may not make (:mod:`.tenant_scope`: read from the headers, before the
    bytes, where they carry it)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "application/octet-stream":
        h = request.headers
        for name in ("tenant", "block-hash", "checksum"):
            if HEADER + name not in h:
                raise _invalid(HEADER + name, "header required", "header")
        try:
            block_hash = hash_from_header(h[HEADER + "block-hash"])
        except ValueError as err:
            raise _invalid(HEADER + "block-hash", str(err), "header") from None
        meta = BlockUpload.model_construct(
            tenant=_field(_TENANT, h[HEADER + "tenant"], HEADER + "tenant", "header"),
            block_hash=block_hash, data="",
            checksum=_header_checksum(h[HEADER + "checksum"]),
            state=_field(_STATE, h.get(HEADER + "state", "cached"), HEADER + "state", "header"),
        )  # fmt: skip
        check_upload(meta.tenant, meta.state, who, f"header.{HEADER}tenant")
        return meta, await request.body()
    try:
        upload = BlockUpload.model_validate_json(await request.body())
    except ValidationError as err:
        raise RequestValidationError(
            [{**e, "loc": ("body", *e["loc"])} for e in err.errors(include_input=False)]
        ) from None
    try:
        data = base64.b64decode(upload.data, validate=True)
    except (binascii.Error, ValueError):
        raise _invalid("data", "not valid base64") from None
    check_upload(upload.tenant, upload.state, who)
    return upload, data


async def put_block(control: AgentControl, request: Request, who: Identity = ADMIN) -> BlockEntry:
    """Store the uploaded block; ``who``: the caller (a tenant token uploads cached blocks of
    its tenants only: :mod:`.tenant_scope`)."""
    upload, data = await parse_upload(request, who)
    if not data:
        raise _invalid("data", "a block has at least one byte")
    max_bytes = control.agent.config.max_block_bytes
    if len(data) > max_bytes:
        raise _invalid("data", f"a block has at most {max_bytes} bytes")
    block_hash = hash_from_json(upload.block_hash)
    agent = control.agent
    try:
        info = agent.store.put(
            upload.tenant, block_hash, agent.buffer_for(data), upload.checksum,
            BlockState(upload.state), cap=upload_cap(who, agent.config.tenant_tokens),
        )  # fmt: skip
    except OverTenantCap as err:
        raise over_cap(err) from None
    except ChecksumMismatch:
        raise _invalid("checksum", "does not match the bytes (xxh3-64)") from None
    except StoreFull as err:
        raise CommandConflict(f"no room for the block: {err}") from None
    except StoreError as err:  # e.g. the device is out of memory
        raise CommandConflict(str(err)) from None
    return control.entry(info)
