"""What the scripts share: a client of the official `mcp` SDK connected to a
Plinth MCP endpoint, and one JSON object per line on stdout for each result,
which the Rust end-to-end tests (tests/e2e/mcp_python.rs) read and check.

The API key comes from the PLINTH_KEY environment variable (not argv, where
other users of the machine could read it); none means no Authorization.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def emit(**fields: Any) -> None:
    """One result: a JSON object on its own line."""
    print(json.dumps(fields), flush=True)


async def read_line() -> str:
    """The next line the test writes on stdin ("" at its end)."""
    return (await anyio.to_thread.run_sync(sys.stdin.readline)).strip()


class Refusals:
    """The HTTP answers of 400 and above the client saw, with their bodies:
    the SDK turns them into JSON-RPC errors, and the tests check both."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    async def __call__(self, response: httpx2.Response) -> None:
        if response.status_code < 400:
            return
        body = (await response.aread()).decode(errors="replace")
        try:
            parsed: Any = json.loads(body)
        except ValueError:
            parsed = body
        self.seen.append({"status": response.status_code, "body": parsed})


@asynccontextmanager
async def connect(url: str, mode: str, refusals: Refusals | None = None, **options: Any) -> AsyncIterator[Client]:
    """A client of `url`; `mode` is "auto", "legacy" or a 2026 revision.
    No response cache: the tests redeploy tools between calls."""
    key = os.environ.get("PLINTH_KEY")
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"} if key else None)
    if refusals is not None:
        http.event_hooks["response"].append(refusals)
    async with http, Client(streamable_http_client(url, http_client=http), mode=mode, cache=None, **options) as client:
        yield client


def dump(model: Any) -> Any:
    """A result as it was on the wire (camelCase, `_meta`)."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def first(e: BaseException) -> BaseException:
    """The exception itself, or the first in the groups the SDK's task groups
    wrapped it in."""
    while isinstance(e, BaseExceptionGroup):
        e = e.exceptions[0]
    return e


def error(e: BaseException) -> dict[str, Any]:
    """A JSON-RPC error the SDK raised (an MCPError, perhaps in a group)."""
    e = first(e)
    assert isinstance(e, MCPError), e
    return {"code": e.code, "message": e.message, "data": e.data}
