// A real OpenID provider run by the tests as a tenant's own IdP: the certified npm package
// `oidc-provider`, issuing JWT access tokens by client credentials for the resource a client
// names (RFC 8707), signed by one ES256 key whose key id the test chooses (a restart with
// another key id is a key rotation).
//
// Usage: node oidc_provider.mjs PROVIDER_MODULES PORT KID CLIENT_ID CLIENT_SECRET SCOPES RESOURCE...
// PORT 0 picks a free one. Prints {"issuer": ...} once listening; exits when stdin closes.
// Clients: CLIENT_ID (client credentials, the secret) and `host` (authorization code + PKCE,
// public, redirect URI HOST_REDIRECT); with CONSOLE_REDIRECT in the environment also
// `writ-console` (the operations desk's sign-in: authorization code + PKCE, public, ID tokens).
// Sign-in is the package's development login form (any login is an account of that name, its
// `sub`) and consent page.

import crypto from "node:crypto";
import http from "node:http";

const [modules, port, kid, clientId, clientSecret, scopes, ...resources] = process.argv.slice(2);
const HOST_REDIRECT = "http://127.0.0.1:1/callback";
const oidc = await import(`${modules}/oidc-provider/lib/index.js`);
const Provider = oidc.default;

const { privateKey } = crypto.generateKeyPairSync("ec", { namedCurve: "P-256" });
const signing = { ...privateKey.export({ format: "jwk" }), kid, alg: "ES256", use: "sig" };

const server = http.createServer();
await new Promise((resolve) => server.listen(Number(port), "127.0.0.1", resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: clientId,
      client_secret: clientSecret,
      grant_types: ["client_credentials"],
      redirect_uris: [],
      response_types: [],
      scope: scopes,
      token_endpoint_auth_method: "client_secret_basic",
      id_token_signed_response_alg: "ES256",
    },
    {
      // A host that opens a browser: authorization code with PKCE, no secret.
      client_id: "host",
      grant_types: ["authorization_code"],
      redirect_uris: [HOST_REDIRECT],
      response_types: ["code"],
      scope: scopes,
      token_endpoint_auth_method: "none",
      id_token_signed_response_alg: "ES256",
    },
    ...(process.env.CONSOLE_REDIRECT
      ? [
          {
            client_id: "writ-console",
            grant_types: ["authorization_code"],
            redirect_uris: [process.env.CONSOLE_REDIRECT],
            response_types: ["code"],
            scope: "openid",
            token_endpoint_auth_method: "none",
            id_token_signed_response_alg: "ES256",
          },
        ]
      : []),
  ],
  jwks: { keys: [signing] },
  scopes: scopes.split(" "),
  ttl: { ClientCredentials: 600 },
  features: {
    devInteractions: { enabled: true },
    clientCredentials: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: async () => resources[0],
      useGrantedResource: async () => true,
      getResourceServerInfo: async (_ctx, indicator) => {
        if (!resources.includes(indicator)) throw new oidc.errors.InvalidTarget();
        return {
          scope: scopes,
          audience: indicator,
          accessTokenTTL: 600,
          accessTokenFormat: "jwt",
          jwt: { sign: { alg: "ES256", kid } },
        };
      },
    },
  },
});
provider.proxy = false;
server.on("request", provider.callback());

console.log(JSON.stringify({ issuer }));
// Nothing more on stdout (the test reads one line and closes it): the development pages'
// debug output goes to stderr.
console.log = console.info = console.debug = console.error;
process.stdin.on("end", () => process.exit(0));
process.stdin.resume();
