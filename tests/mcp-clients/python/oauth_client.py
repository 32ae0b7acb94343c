"""Connects with the SDK's OAuth client, as an MCP host does for a person.

    python oauth_client.py URL TOOL ARGUMENTS_JSON [--mode auto|legacy|2026-07-28] [--user NAME] [--deny] [--refresh]
                           [--metadata-document] [--then URL]

The SDK's `OAuthClientProvider` does discovery (the 401's resource metadata,
then the authorization server's), dynamic registration, PKCE and the token
exchange; this script plays the person's browser: it opens the authorization
URL, follows redirects and posts each form on the way (Plinth's sign-in and
consent page, or an identity provider's login and consent pages) as the end
user (password from the PLINTH_END_USER_PASSWORD environment variable),
allowing or (--deny) denying, and hands the code it is sent back with to
the SDK. With --metadata-document the client identifies itself by a Client
ID Metadata Document it serves (and prints {"clientId": its URL}) instead
of registering.

Prints {"listed": [names]}, {"result": …} (a CallToolResult) or
{"error": …}, with --refresh {"refreshed": …} after a second connection whose
access token is treated as expired (`pages`: true when no page was shown for
it), with --then {"then": {"status", "body"}}: what another MCP URL answered
a `tools/list` sent with the same access token, and at the end {"oauth":
[the OAuth requests the SDK made, as "METHOD host path status"]}.
"""

import argparse
import html
import http.server
import json
import os
import re
import threading
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
    """The person's browser: follows redirects and fills in the forms on the
    way (Plinth's sign-in and consent page, or an identity provider's login
    and consent pages) until it is sent back to the client."""

    def __init__(self, user: str, password: str, allow: bool) -> None:
        self.user, self.password, self.allow = user, password, allow
        self.result: AuthorizationCodeResult | None = None
        self.pages = 0

    def form(self, page: str) -> tuple[str, dict[str, str]]:
        """The page's first form: its action and what to post."""
        form = re.search(r"<form\b[^>]*>(.*?)</form>", page, re.S)
        assert form, f"no form on the page: {page[:500]}"
        attributes = lambda tag: {k: html.unescape(v) for k, v in re.findall(r'([\w-]+)="([^"]*)"', tag)}
        action = attributes(form[0][: form[0].index(">")])["action"]
        fields: dict[str, str] = {}
        for tag in re.findall(r"<input\b[^>]*>", form[1]):
            a = attributes(tag)
            name = a.get("name")
            if name in ("user", "login"):
                fields[name] = self.user
            elif name == "password":
                fields[name] = self.password
            elif name:
                fields[name] = a.get("value", "")
        buttons = [attributes(tag) for tag in re.findall(r"<button\b[^>]*>", form[1])]
        choice = "allow" if self.allow else "deny"
        for b in buttons:
            if b.get("name") and b.get("value") == choice:
                fields[b["name"]] = choice
        return action, fields

    async def open(self, url: str) -> None:
        # A person's browser waits far longer than httpx's default 5 s for a
        # page; the server may be slow on a loaded test machine.
        async with httpx2.AsyncClient(timeout=30) as browser:
            response = await browser.get(url)
            for _ in range(12):
                if response.status_code in (301, 302, 303, 307, 308):
                    location = urljoin(str(response.url), response.headers["location"])
                    if location.startswith(REDIRECT):
                        query = {k: v[0] for k, v in parse_qs(urlparse(location).query).items()}
                        if "code" not in query:
                            raise RuntimeError(f"sent back without a code: {query}")
                        self.result = AuthorizationCodeResult(
                            code=query["code"], state=query.get("state"), iss=query.get("iss")
                        )
                        return
                    response = await browser.get(location)
                    continue
                assert response.status_code == 200, f"{response.url} answered {response.status_code}: {response.text[:500]}"
                self.pages += 1
                action, fields = self.form(response.text)
                response = await browser.post(urljoin(str(response.url), action), data=fields)
            raise RuntimeError("never sent back to the client")

    async def callback(self) -> AuthorizationCodeResult:
        assert self.result is not None
        return self.result


async def session(url: str, mode: str, provider: OAuthClientProvider, seen: list[str], tool: str, arguments: dict) -> dict:
    async def record(response: httpx2.Response) -> None:
        url = response.request.url
        if url.path != urlparse(provider.context.server_url).path:
            seen.append(f"{response.request.method} {url.port} {url.path} {response.status_code}")

    http = create_mcp_http_client(auth=provider)
    http.event_hooks["response"].append(record)
    async with http, Client(streamable_http_client(url, http_client=http), mode=mode, cache=None) as client:
        listed = [t.name for t in (await client.list_tools()).tools]
        result = await client.call_tool(tool, arguments)
        return {"listed": listed, "result": dump(result)}


def serve_metadata_document(metadata: OAuthClientMetadata) -> str:
    """Serves the client's metadata document on a loopback port (as a host
    publishes it at its https URL) → its URL, which is its client id."""
    document: dict = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps(document).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    url = f"http://127.0.0.1:{server.server_address[1]}/client.json"
    document.update(metadata.model_dump(mode="json", exclude_none=True), client_id=url)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return url


async def elsewhere(url: str, token: str) -> dict:
    """What `url` answers a `tools/list` sent with `token`."""
    async with httpx2.AsyncClient(timeout=30) as http:
        response = await http.post(
            url,
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
            headers={
                "Authorization": f"Bearer {token}",
                "Accept": "application/json, text/event-stream",
                "MCP-Protocol-Version": "2026-07-28",
            },
        )
        try:
            body = response.json()
        except ValueError:
            body = response.text
        return {"status": response.status_code, "body": body}


async def main(
    url: str, tool: str, arguments: dict, mode: str, user: str, allow: bool, refresh: bool, document: bool,
    then: str | None = None,
) -> None:
    browser = Browser(user, os.environ.get("PLINTH_END_USER_PASSWORD", ""), allow)
    storage = Memory()
    metadata = OAuthClientMetadata(
        client_name="Plinth test host",
        redirect_uris=[REDIRECT],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
    )
    # The SDK takes only https metadata URLs (as hosts publish them); the
    # test's document is served over loopback http, which the server accepts
    # with --oauth-allow-http, so the URL is set after the SDK checked a
    # stand-in.
    provider = OAuthClientProvider(
        url, metadata, storage, browser.open, browser.callback,
        client_metadata_url="https://host.example/client.json" if document else None,
    )
    if document:
        provider.context.client_metadata_url = serve_metadata_document(metadata)
        emit(clientId=provider.context.client_metadata_url)
    seen: list[str] = []
    try:
        first_session = await session(url, mode, provider, seen, tool, arguments)
        emit(listed=first_session["listed"])
        emit(result=first_session["result"])
        if then is not None and storage.tokens is not None:
            emit(then=await elsewhere(then, storage.tokens.access_token))
        if refresh:
            before = storage.tokens.access_token if storage.tokens else None
            pages_before_refresh = browser.pages
            # The access token counts as expired: the SDK refreshes it.
            provider.context.token_expiry_time = time.time() - 1
            again = await session(url, mode, provider, seen, tool, arguments)
            emit(refreshed={
                "newToken": storage.tokens is not None and storage.tokens.access_token != before,
                "result": again["result"],
                "pages": pages_before_refresh == browser.pages,
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
    parser.add_argument("--metadata-document", action="store_true")
    parser.add_argument("--then")
    args = parser.parse_args()
    anyio.run(
        main, args.url, args.tool, args.arguments, args.mode, args.user, not args.deny, args.refresh,
        args.metadata_document, args.then,
    )
