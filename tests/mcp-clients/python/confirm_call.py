"""Calls a tool that needs its end user's confirmation, as an agent would,
with a person (the test) in the loop on stdin.

    python confirm_call.py URL NAME ARGUMENTS_JSON --meta JSON --mode 2026-07-28|legacy

2026-07-28: the server answers input_required with a URL-mode elicitation.
The elicitation callback prints {"elicitation": …, "key": …} and returns the action the
test writes on stdin ("accept", "decline" or "cancel"); the SDK then retries
the call itself, and the script prints {"result": …} or {"error": …}.

legacy (2025-11-25): the call raises a JSON-RPC error (-32042, URL elicitation
required); the script prints {"error": …}, and repeats the same call for each
"again" the test writes on stdin, printing each outcome, until stdin ends.
"""

import argparse
import json

import anyio
from mcp import MCPError, types
from mcp.client.session import ClientRequestContext

from plinth_mcp import connect, dump, emit, error, read_line


async def on_elicit(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
    # The SDK hands the input request's key in inputRequests over as the request id.
    emit(elicitation=dump(params), key=context.request_id)
    return types.ElicitResult(action=await read_line())


async def call(client, name: str, arguments: dict, meta: dict) -> None:
    try:
        emit(result=dump(await client.call_tool(name, arguments, meta=meta)))
    except MCPError as e:
        emit(error=error(e))


async def main(url: str, name: str, arguments: dict, meta: dict, mode: str) -> None:
    async with connect(url, mode, elicitation_callback=on_elicit) as client:
        emit(protocolVersion=client.protocol_version)
        await call(client, name, arguments, meta)
        if mode == "legacy":
            while await read_line() == "again":
                await call(client, name, arguments, meta)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("name")
    parser.add_argument("arguments", type=json.loads)
    parser.add_argument("--meta", type=json.loads, required=True)
    parser.add_argument("--mode", required=True)
    args = parser.parse_args()
    anyio.run(main, args.url, args.name, args.arguments, args.meta, args.mode)
