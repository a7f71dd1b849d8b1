// A host that opens a browser, without a person: the official TypeScript SDK 1.x client's own
// OAuth flow with authorization code + PKCE. Given the MCP URL and its pre-registered client id,
// the SDK reads the 401's challenge, the protected-resource metadata and the authorization
// server's metadata, and sends the user to sign in; this script plays the user against the
// provider's sign-in and consent pages (following redirects and cookies by hand) and hands the
// code back; the SDK redeems it with its PKCE verifier and the resource, and calls tools.
// A CLIENT_ID that is an https URL is a client ID metadata document (the SDK's URL-based client
// id); a page that reloads itself (an authorization waiting for an operator) is reloaded.
//
// Usage: node oauth_code_client.mjs SDK_DIR URL CLIENT_ID REDIRECT_URI LOGIN READ_TOOL
// Prints one JSON line: the authorization request's parameters, the tools listed and
// READ_TOOL's result (`-`: none called), or {"error": ...}.

const [sdkDir, url, clientId, redirectUri, login, readTool] = process.argv.slice(2);
const { Client } = await import(`${sdkDir}/dist/esm/client/index.js`);
const { StreamableHTTPClientTransport } = await import(`${sdkDir}/dist/esm/client/streamableHttp.js`);
const { UnauthorizedError } = await import(`${sdkDir}/dist/esm/client/auth.js`);

const cookies = new Map();
const cookieHeader = () => [...cookies].map(([k, v]) => `${k}=${v}`).join("; ");
const remember = (res) => {
  for (const c of res.headers.getSetCookie()) {
    const [pair] = c.split(";");
    const at = pair.indexOf("=");
    cookies.set(pair.slice(0, at), pair.slice(at + 1));
  }
};
const step = async (target, init = {}) => {
  const headers = { ...(init.headers ?? {}), cookie: cookieHeader() };
  const res = await fetch(target, { ...init, redirect: "manual", headers }).catch((e) => {
    throw new Error(`${init.method ?? "GET"} ${target}: ${e.cause ?? e}`);
  });
  remember(res);
  return res;
};

// The user: follows the authorization request through sign-in and consent to the redirect.
let code;
async function signIn(authorizationUrl) {
  let next = authorizationUrl.toString();
  for (let i = 0; i < 120; i++) {
    if (next.startsWith(redirectUri)) {
      const back = new URL(next);
      if (back.searchParams.get("error")) throw new Error(`authorization refused: ${next}`);
      code = back.searchParams.get("code");
      return;
    }
    const res = await step(next);
    if (res.status >= 300 && res.status < 400) {
      next = new URL(res.headers.get("location"), next).toString();
      continue;
    }
    const page = await res.text();
    const reload = /http-equiv="refresh" content="(\d+)"/.exec(page);
    if (res.status === 200 && reload) {
      await new Promise((done) => setTimeout(done, Number(reload[1]) * 1000));
      continue;
    }
    const action = /action="([^"]+)"/.exec(page);
    if (!action) throw new Error(`no form at ${next} (${res.status}): ${page.slice(0, 300)}`);
    const target = new URL(action[1], next).toString();
    const fields = page.includes('name="login"') ? { prompt: "login", login, password: "any" } : { prompt: "consent" };
    const post = await step(target, {
      method: "POST",
      body: new URLSearchParams(fields),
      headers: { "content-type": "application/x-www-form-urlencoded" },
    });
    next = new URL(post.headers.get("location"), target).toString();
  }
  throw new Error("sign-in never reached the redirect URI");
}

let verifier;
let tokens;
const byMetadata = clientId.startsWith("https://");
let info = byMetadata ? undefined : { client_id: clientId };
let authorization;
const provider = {
  clientMetadataUrl: byMetadata ? clientId : undefined,
  get redirectUrl() {
    return redirectUri;
  },
  get clientMetadata() {
    return { client_name: "writ-test-host", redirect_uris: [redirectUri], grant_types: ["authorization_code"], response_types: ["code"], token_endpoint_auth_method: "none" };
  },
  clientInformation: () => info,
  saveClientInformation: (i) => {
    info = i;
  },
  tokens: () => tokens,
  saveTokens: (t) => {
    tokens = t;
  },
  redirectToAuthorization: async (authorizationUrl) => {
    authorization = Object.fromEntries(authorizationUrl.searchParams);
    await signIn(authorizationUrl);
  },
  saveCodeVerifier: (v) => {
    verifier = v;
  },
  codeVerifier: () => verifier,
};

try {
  const first = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
  try {
    await new Client({ name: "writ-test-host", version: "1.0.0" }).connect(first);
  } catch (e) {
    if (!(e instanceof UnauthorizedError)) throw e;
  }
  if (!code) throw new Error("the SDK never sent the user to sign in");
  await first.finishAuth(code);
  const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
  const client = new Client({ name: "writ-test-host", version: "1.0.0" });
  await client.connect(transport);
  const tools = (await client.listTools()).tools.map((t) => t.name);
  let read = null;
  if (readTool !== "-") {
    const result = await client.callTool({ name: readTool, arguments: {} });
    read = result.structuredContent ?? result;
  }
  console.log(JSON.stringify({ authorization, tools, read, token: tokens?.access_token, refresh_token: tokens?.refresh_token }));
  await client.close();
  process.exit(0);
} catch (e) {
  console.log(JSON.stringify({ error: String(e?.stack ?? e), authorization }));
  process.exit(1);
}
