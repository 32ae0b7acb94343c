// A real OAuth provider for end-user authorization's tests (issue 65): the
// provider of the API behind a tool (tests/fake-inbox), whose tokens Plinth
// holds for a person and attaches to the tool's requests. panva's
// oidc-provider (OpenID Certified), as installed in target/mcp-clients/ by
// tests/mcp-clients/install, configured as such an API's provider is:
//
// - one confidential client (id, secret and redirect URIs from the
//   arguments: Plinth's callback), authenticating at the token and
//   revocation endpoints by client_secret_basic (or client_secret_post);
// - authorization code with PKCE (S256, required), RFC 9207 `iss` in the
//   authorization response (oidc-provider always sends it);
// - resource indicators (RFC 8707): access tokens are JWTs (RFC 9068,
//   typ at+jwt) for the inbox API's URL (`aud`), with the scopes granted
//   of inbox.read and inbox.write, living --access-token-ttl seconds (short,
//   so that a test sees a refresh); the resource is the API's when the
//   request names none;
// - refresh tokens without asking for offline_access, rotated at every use
//   (one used twice revokes its grant);
// - revocation (RFC 7009) of refresh tokens (a JWT access token cannot be
//   revoked: oidc-provider answers unsupported_token_type);
// - its development login and consent pages (any user name; the password
//   is not checked), plain forms a browser or HTTP form posts fill in.
//
// Its keys are made at start: an RSA key (RS256, what access tokens are
// signed with unless --alg ES256) and a P-256 key (ES256).
//
//     node inbox-provider.mjs CLIENTS_DIR PORT --client-id ID --client-secret SECRET
//         --redirect-uri URI [--redirect-uri URI…] --resource URL
//         [--access-token-ttl SECONDS (300)] [--auth-method client_secret_basic|client_secret_post]
//         [--alg RS256|ES256]
//
// Prints {"issuer": …} once it listens; ends when its stdin closes.

import { generateKeyPairSync } from "node:crypto";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";

const { values: args, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    "client-id": { type: "string" },
    "client-secret": { type: "string" },
    "redirect-uri": { type: "string", multiple: true },
    resource: { type: "string" },
    "access-token-ttl": { type: "string", default: "300" },
    "auth-method": { type: "string", default: "client_secret_basic" },
    alg: { type: "string", default: "RS256" },
  },
});
const [clients, port] = positionals;
const ttl = Number(args["access-token-ttl"]);
const missing = ["client-id", "client-secret", "redirect-uri", "resource"].filter((name) => !args[name]);
if (!clients || !port || missing.length || !(ttl > 0) || !["RS256", "ES256"].includes(args.alg)) {
  console.error(`usage: inbox-provider.mjs CLIENTS_DIR PORT (missing or wrong: ${missing.join(", ") || "ttl or alg"})`);
  process.exit(2);
}
const { default: Provider, errors } = await import(
  pathToFileURL(join(clients, "node_modules/oidc-provider/lib/index.js")).href
);

const issuer = `http://127.0.0.1:${port}`;
const resource = args.resource;
const rsa = generateKeyPairSync("rsa", { modulusLength: 2048 }).privateKey.export({ format: "jwk" });
const ec = generateKeyPairSync("ec", { namedCurve: "P-256" }).privateKey.export({ format: "jwk" });

const provider = new Provider(issuer, {
  jwks: {
    keys: [
      { ...rsa, kid: "inbox-rs256", use: "sig", alg: "RS256" },
      { ...ec, kid: "inbox-es256", use: "sig", alg: "ES256" },
    ],
  },
  clients: [
    {
      client_id: args["client-id"],
      client_secret: args["client-secret"],
      redirect_uris: args["redirect-uri"],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: args["auth-method"],
    },
  ],
  responseTypes: ["code"],
  // Discovery's scopes_supported names the API's scopes too; what a token
  // carries for the API is decided by getResourceServerInfo below.
  scopes: ["openid", "offline_access", "inbox.read", "inbox.write"],
  pkce: { required: () => true },
  features: {
    devInteractions: { enabled: true },
    revocation: { enabled: true },
    resourceIndicators: {
      enabled: true,
      // The inbox API is this provider's only resource.
      defaultResource: () => resource,
      useGrantedResource: () => true,
      getResourceServerInfo: (ctx, indicator) => {
        if (indicator !== resource) throw new errors.InvalidTarget();
        return {
          scope: "inbox.read inbox.write",
          audience: resource,
          accessTokenTTL: ttl,
          accessTokenFormat: "jwt",
          jwt: { sign: { alg: args.alg } },
        };
      },
    },
  },
  issueRefreshToken: async (ctx, client) => client.grantTypeAllowed("refresh_token"),
  rotateRefreshToken: true,
  // A grant outlives the browser session it was made in.
  expiresWithSession: async () => false,
  findAccount: async (ctx, id) => ({ accountId: id, claims: async () => ({ sub: id }) }),
});
provider.proxy = false;

const server = provider.listen(Number(port), "127.0.0.1", () => {
  console.log(JSON.stringify({ issuer }));
});
process.stdin.on("end", () => server.close(() => process.exit(0)));
process.stdin.resume();
