"""Connects with the SDK's OAuth client, as an MCP host does for a person.

    python oauth_client.py URL TOOL ARGUMENTS_JSON [--mode auto|legacy|2026-07-28] [--user NAME] [--deny] [--refresh]

The SDK's `OAuthClientProvider` does discovery (the 401's resource metadata,
then the authorization server's), dynamic registration, PKCE and the token
exchange; this script plays the person's browser: it opens the authorization
URL, reads the sign-in form and posts it as the end user (password from the
PLINTH_END_USER_PASSWORD environment variable), allowing or (--deny)
denying, and hands the code it is sent back with to the SDK.

Prints {"listed": [names]}, {"result": …} (a CallToolResult) or
{"error": …}, with --refresh {"refreshed": …} after a second connection whose
access token is treated as expired, and at the end {"oauth": [the OAuth
requests the SDK made, as "METHOD path status"]}.
"""

import argparse
import html
import json
import os
import re
import time
from urllib.parse import parse_qs, urljoin, urlparse

import anyio
import httpx2
from mcp import Client, MCPError
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from plinth_mcp import dump, emit, error, first

REDIRECT = "http://127.0.0.1:33418/callback"


class Memory:
    """The SDK's token storage, in memory."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


class Browser:
    """The person's browser: signs in on the authorization page."""

    def __init__(self, user: str, password: str, allow: bool) -> None:
        self.user, self.password, self.allow = user, password, allow
        self.result: AuthorizationCodeResult | None = None
        self.pages = 0

    async def open(self, url: str) -> None:
        async with httpx2.AsyncClient() as browser:
            page = await browser.get(url)
            assert page.status_code == 200, f"the authorization page answered {page.status_code}: {page.text[:500]}"
            self.pages += 1
            action = html.unescape(re.search(r'<form class="panel" method="post" action="([^"]+)"', page.text)[1])
            fields = {
                html.unescape(name): html.unescape(value)
                for name, value in re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', page.text)
            }
            fields.update(user=self.user, password=self.password, decision="allow" if self.allow else "deny")
            answer = await browser.post(urljoin(url, action), data=fields)
            assert answer.status_code == 303, f"the sign-in answered {answer.status_code}: {answer.text[:500]}"
            back = urlparse(answer.headers["location"])
            query = {k: v[0] for k, v in parse_qs(back.query).items()}
            if "code" not in query:
                raise RuntimeError(f"sent back without a code: {query}")
            self.result = AuthorizationCodeResult(code=query["code"], state=query.get("state"), iss=query.get("iss"))

    async def callback(self) -> AuthorizationCodeResult:
        assert self.result is not None
        return self.result


async def session(url: str, mode: str, provider: OAuthClientProvider, seen: list[str], tool: str, arguments: dict) -> dict:
    async def record(response: httpx2.Response) -> None:
        path = response.request.url.path
        if "oauth" in path or ".well-known" in path:
            seen.append(f"{response.request.method} {path} {response.status_code}")

    http = create_mcp_http_client(auth=provider)
    http.event_hooks["response"].append(record)
    async with http, Client(streamable_http_client(url, http_client=http), mode=mode, cache=None) as client:
        listed = [t.name for t in (await client.list_tools()).tools]
        result = await client.call_tool(tool, arguments)
        return {"listed": listed, "result": dump(result)}


async def main(url: str, tool: str, arguments: dict, mode: str, user: str, allow: bool, refresh: bool) -> None:
    browser = Browser(user, os.environ.get("PLINTH_END_USER_PASSWORD", ""), allow)
    storage = Memory()
    metadata = OAuthClientMetadata(
        client_name="Plinth test host",
        redirect_uris=[REDIRECT],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
    )
    provider = OAuthClientProvider(url, metadata, storage, browser.open, browser.callback)
    seen: list[str] = []
    try:
        first_session = await session(url, mode, provider, seen, tool, arguments)
        emit(listed=first_session["listed"])
        emit(result=first_session["result"])
        if refresh:
            before = storage.tokens.access_token if storage.tokens else None
            # The access token counts as expired: the SDK refreshes it.
            provider.context.token_expiry_time = time.time() - 1
            again = await session(url, mode, provider, seen, tool, arguments)
            emit(refreshed={
                "newToken": storage.tokens is not None and storage.tokens.access_token != before,
                "result": again["result"],
                "pages": browser.pages,
            })
    except* MCPError as e:
        emit(error=error(e))
    except* Exception as e:
        emit(clientError=repr(first(e)))
    emit(oauth=seen)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("tool")
    parser.add_argument("arguments", type=json.loads)
    parser.add_argument("--mode", default="auto")
    parser.add_argument("--user", default="alice")
    parser.add_argument("--deny", action="store_true")
    parser.add_argument("--refresh", action="store_true")
    args = parser.parse_args()
    anyio.run(main, args.url, args.tool, args.arguments, args.mode, args.user, not args.deny, args.refresh)
