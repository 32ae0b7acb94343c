"""Schemathesis hooks for Plinth's document (tests/e2e/openapi.rs loads this
file through SCHEMATHESIS_HOOKS).

Serialisers for the media types the document declares that schemathesis has
none for: a deploy's body is a packed component (`application/wasm`), and a
confirmation server may post a compact JWS (`application/jose`). Both go on
the wire as the bytes generated, unchanged.
"""

import json
import os

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


@schemathesis.hook
def before_call(context, case, kwargs):
    """A deploy by reference names a registry, which the server then
    reaches: the document's example (ghcr.io) and whatever the fuzzer makes
    up. Tests talk to 127.0.0.1 only, so every reference is sent to the
    test's own registry (PLINTH_TEST_REGISTRY, holding the example's
    artifact), its repository and tag kept: the server's real pull path
    answers, without a lookup on the internet."""
    registry = os.environ.get("PLINTH_TEST_REGISTRY")
    if not registry or case.operation.method.upper() != "POST" or case.operation.path != "/admin/tools":
        return
    body = case.body
    if isinstance(body, dict) and isinstance(body.get("reference"), str) and "/" in body["reference"]:
        body["reference"] = registry + "/" + body["reference"].split("/", 1)[1]
