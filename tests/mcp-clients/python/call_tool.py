"""Calls one tool once.

    python call_tool.py URL NAME ARGUMENTS_JSON [--meta JSON] [--mode auto|legacy|2026-07-28] [--list-first]

With --list-first the client lists the tools first (as an agent does when it
starts), prints {"listed": [names]} and waits for a line on stdin before the call.

Prints {"protocolVersion": …} and then {"result": …} (a CallToolResult, tool
errors included), {"error": …, "refusals": […]} for a JSON-RPC error, or
{"clientError": …} when the SDK itself refuses the result (a structuredContent
that does not match the tool's listed outputSchema).
"""

import argparse
import json

import anyio
from mcp import MCPError

from plinth_mcp import Refusals, connect, dump, emit, error, first, read_line


async def main(url: str, name: str, arguments: dict, meta: dict | None, mode: str, list_first: bool) -> None:
    refusals = Refusals()
    try:
        async with connect(url, mode, refusals) as client:
            emit(protocolVersion=client.protocol_version)
            if list_first:
                emit(listed=[tool.name for tool in (await client.list_tools()).tools])
                await read_line()
            result = await client.call_tool(name, arguments, meta=meta)
            emit(result=dump(result))
    except* MCPError as e:
        emit(error=error(e), refusals=refusals.seen)
    except* RuntimeError as e:
        emit(clientError=str(first(e)))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("name")
    parser.add_argument("arguments", type=json.loads)
    parser.add_argument("--meta", type=json.loads)
    parser.add_argument("--mode", default="auto")
    parser.add_argument("--list-first", action="store_true")
    args = parser.parse_args()
    anyio.run(main, args.url, args.name, args.arguments, args.meta, args.mode, args.list_first)
