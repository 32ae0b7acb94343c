"""Schemathesis hooks for Plinth's document (tests/e2e/openapi.rs loads this
file through SCHEMATHESIS_HOOKS).

Serialisers for the media types the document declares that schemathesis has
none for: a deploy's body is a packed component (`application/wasm`), and a
confirmation server may post a compact JWS (`application/jose`). Both go on
the wire as the bytes generated, unchanged.
"""

import json

import schemathesis


@schemathesis.serializer("application/wasm", "application/jose")
def as_bytes(ctx, value):
    if isinstance(value, bytes):
        return {"data": value}
    # Schemathesis wraps generated `format: binary` data in an object with `data`.
    data = getattr(value, "data", None)
    if isinstance(data, bytes):
        return {"data": data}
    text = value if isinstance(value, str) else json.dumps(value)
    return {"data": text.encode("utf-8")}
