"""Lists an endpoint's tools, every page.

    python list_tools.py URL [--mode auto|legacy|2026-07-28]

Prints {"protocolVersion": …}, then {"tool": …} per tool; or {"error": …,
"refusals": […]} when the server refuses.
"""

import argparse

import anyio
from mcp import MCPError

from plinth_mcp import Refusals, connect, dump, emit, error


async def main(url: str, mode: str) -> None:
    refusals = Refusals()
    try:
        async with connect(url, mode, refusals) as client:
            emit(protocolVersion=client.protocol_version)
            cursor = None
            while True:
                page = await client.list_tools(cursor=cursor)
                for tool in page.tools:
                    emit(tool=dump(tool))
                cursor = page.next_cursor
                if cursor is None:
                    break
    except* MCPError as e:
        emit(error=error(e), refusals=refusals.seen)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--mode", default="auto")
    args = parser.parse_args()
    anyio.run(main, args.url, args.mode)
