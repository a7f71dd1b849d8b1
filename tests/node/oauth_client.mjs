// A headless agent that gets its token by itself: the official TypeScript SDK 1.x client with
// its client-credentials OAuth provider, given only the MCP URL and its client id and secret.
// The SDK does the rest: the 401's challenge → the protected-resource metadata (RFC 9728) →
// the authorization server's metadata (RFC 8414 / OpenID discovery) → a token for the resource
// (RFC 8707) → the request again.
//
// A CLIENT_SECRET of `key:<file>` authenticates with private_key_jwt instead (the SDK's
// PrivateKeyJwtProvider, ES256, the PKCS#8 key in <file>).
//
// Usage: node oauth_client.mjs SDK_DIR URL CLIENT_ID CLIENT_SECRET SCOPE READ_TOOL
// Prints one JSON line: the tools listed and READ_TOOL's structured result, or {"error": ...}.

const [sdkDir, url, clientId, clientSecret, scope, readTool] = process.argv.slice(2);
const { Client } = await import(`${sdkDir}/dist/esm/client/index.js`);
const { StreamableHTTPClientTransport } = await import(`${sdkDir}/dist/esm/client/streamableHttp.js`);
const { ClientCredentialsProvider, PrivateKeyJwtProvider } = await import(
  `${sdkDir}/dist/esm/client/auth-extensions.js`
);
const { readFileSync } = await import("node:fs");

const requests = [];
const recording = async (input, init) => {
  const target = input instanceof Request ? input.url : String(input);
  const response = await fetch(input, init);
  requests.push({ url: target, status: response.status });
  return response;
};

const authProvider = clientSecret.startsWith("key:")
  ? new PrivateKeyJwtProvider({
      clientId,
      privateKey: readFileSync(clientSecret.slice(4), "utf8"),
      algorithm: "ES256",
      scope,
    })
  : new ClientCredentialsProvider({ clientId, clientSecret, scope });
const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider, fetch: recording });
const client = new Client({ name: "writ-oauth-test", version: "1.0.0" });
try {
  await client.connect(transport);
  const tools = (await client.listTools()).tools.map((t) => t.name);
  const read = await client.callTool({ name: readTool, arguments: {} });
  const token = authProvider.tokens()?.access_token ?? null;
  console.log(JSON.stringify({ tools, read: read.structuredContent ?? read, token, requests }));
  await client.close();
  process.exit(0);
} catch (e) {
  console.log(JSON.stringify({ error: String(e?.message ?? e), requests }));
  process.exit(1);
}
