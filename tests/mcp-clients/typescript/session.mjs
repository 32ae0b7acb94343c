// A session of the official TypeScript SDK v2 (@modelcontextprotocol/client,
// as installed in target/mcp-clients/ by tests/mcp-clients/install), pinned
// to the 2026-07-28 revision: list the tools, call echo, open a
// subscriptions/listen stream and close it (the SDK aborts the stream and
// posts notifications/cancelled for it), then close the client. Every HTTP
// exchange is recorded: a JSON line {"exchanges": [...], "tools": [...],
// "echo": ...} on stdout.
//
//     node session.mjs CLIENTS_DIR MCP_URL KEY

import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [clients, url, key] = process.argv.slice(2);
const sdk = await import(pathToFileURL(join(clients, "node_modules/@modelcontextprotocol/client/dist/index.mjs")).href);

const exchanges = [];
const recording = async (input, init = {}) => {
  const headers = new Headers(init.headers);
  const body = typeof init.body === "string" ? JSON.parse(init.body) : undefined;
  const response = await fetch(input, init);
  exchanges.push({
    method: init.method ?? "GET",
    rpc: body?.method ?? null,
    notification: body !== undefined && body.id === undefined,
    mcpMethod: headers.get("mcp-method"),
    status: response.status,
  });
  return response;
};

const transport = new sdk.StreamableHTTPClientTransport(new URL(url), {
  fetch: recording,
  requestInit: { headers: { authorization: `Bearer ${key}` } },
});
const client = new sdk.Client(
  { name: "plinth-e2e-ts-v2", version: "1.0.0" },
  { versionNegotiation: { mode: { pin: "2026-07-28" } } },
);
await client.connect(transport);
const tools = (await client.listTools()).tools.map((t) => t.name);
const echo = await client.callTool({ name: "echo", arguments: { text: "hi from v2" } });
const subscription = await client.listen({ toolsListChanged: true });
await subscription.close();
// The cancellation is posted after the stream is aborted; give it time to land.
await new Promise((done) => setTimeout(done, 500));
await client.close();
console.log(JSON.stringify({ exchanges, tools, echo }));
