// A real OpenID provider for the external-issuer OAuth tests: panva's
// oidc-provider (OpenID Certified), as installed in target/mcp-clients/ by
// tests/mcp-clients/install. Configured as an MCP host's identity provider
// would be: dynamic registration, PKCE, resource indicators (RFC 8707)
// issuing JWT access tokens for the MCP URL, refresh tokens, and its
// development login pages (any user name; the password is not checked).
//
//     node provider.mjs CLIENTS_DIR PORT
//
// Prints {"issuer": …} once it listens.

import { generateKeyPairSync } from "node:crypto";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [clients, port] = process.argv.slice(2);
const { default: Provider } = await import(
  pathToFileURL(join(clients, "node_modules/oidc-provider/lib/index.js")).href
);

const issuer = `http://127.0.0.1:${port}`;
const key = generateKeyPairSync("ec", { namedCurve: "P-256" }).privateKey.export({ format: "jwk" });

const provider = new Provider(issuer, {
  jwks: { keys: [{ ...key, kid: "test-es256", use: "sig", alg: "ES256" }] },
  scopes: ["openid", "offline_access", "tools:read", "tools:call"],
  clientDefaults: {
    grant_types: ["authorization_code", "refresh_token"],
    response_types: ["code"],
    token_endpoint_auth_method: "none",
    id_token_signed_response_alg: "ES256",
  },
  features: {
    registration: { enabled: true },
    devInteractions: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => undefined,
      useGrantedResource: () => true,
      getResourceServerInfo: (ctx, resource) => ({
        scope: "tools:read tools:call",
        audience: resource,
        accessTokenTTL: 3600,
        accessTokenFormat: "jwt",
        jwt: { sign: { alg: "ES256" } },
      }),
    },
  },
  // Refresh tokens without asking for offline_access (MCP hosts refresh).
  issueRefreshToken: async (ctx, client, code) => client.grantTypeAllowed("refresh_token"),
  findAccount: async (ctx, id) => ({ accountId: id, claims: async () => ({ sub: id }) }),
  // Consent is given on the dev pages; grant what the client asked for.
  loadExistingGrant: undefined,
});
provider.proxy = false;

const server = provider.listen(Number(port), "127.0.0.1", () => {
  console.log(JSON.stringify({ issuer }));
});
process.stdin.on("end", () => server.close(() => process.exit(0)));
process.stdin.resume();
