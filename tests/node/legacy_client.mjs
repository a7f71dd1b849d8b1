// A real MCP client of the 2025 era: the official TypeScript SDK 1.x (`@modelcontextprotocol/sdk`,
// default transport settings: initialize, Mcp-Session-Id, the GET stream, server requests on the
// call's stream) against Writ edges.
//
// Usage: node legacy_client.mjs SDK_DIR URL TOKEN PORT_A PORT_B READ_TOOL ASK_TOOL OP_ACTION DEVICE
// (TOKEN `-`: none, for a loopback edge's anonymous access)
//
// Every HTTP request goes to the next port in turn, as a round-robin load balancer in front of
// stateless replicas would send it; the URL (and token audience) stays URL. Phase 1 prints one
// JSON line and waits for a line on stdin with the ports to use next (e.g. after an edge
// restarted on a new port); phase 2 continues the same session there, then ends it.

import readline from "node:readline";

const [sdkDir, url, token, portA, portB, readTool, askTool, opAction, device] = process.argv.slice(2);
const { Client } = await import(`${sdkDir}/dist/esm/client/index.js`);
const { StreamableHTTPClientTransport } = await import(`${sdkDir}/dist/esm/client/streamableHttp.js`);
const { ElicitRequestSchema } = await import(`${sdkDir}/dist/esm/types.js`);

let ports = [Number(portA), Number(portB)];
const served = [];
const roundRobin = async (input, init) => {
  const target = new URL(input instanceof Request ? input.url : String(input));
  const port = ports[served.length % ports.length];
  target.port = String(port);
  let method = init?.method ?? "GET";
  if (typeof init?.body === "string") {
    const body = JSON.parse(init.body);
    method = body.method ?? (body.result !== undefined ? "response" : "error");
  }
  served.push({ port, method });
  return fetch(target, init);
};

const asked = [];
const client = new Client({ name: "writ-legacy-test", version: "1.0.0" }, { capabilities: { elicitation: {} } });
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  asked.push(request.params.message);
  return { action: "accept", content: { name: "Ada" } };
});
const transport = new StreamableHTTPClientTransport(new URL(url), {
  fetch: roundRobin,
  requestInit: { headers: token === "-" ? {} : { Authorization: `Bearer ${token}` } },
});
await client.connect(transport);

const listAll = async () => {
  const names = [];
  let cursor;
  do {
    const page = await client.listTools(cursor ? { cursor } : {});
    names.push(...page.tools.map((t) => t.name));
    cursor = page.nextCursor;
  } while (cursor);
  return names;
};
const texts = (result) => result.content.filter((c) => c.type === "text").map((c) => c.text);

const phase1 = {
  phase: 1,
  sessionId: transport.sessionId,
  protocolVersion: transport.protocolVersion,
  tools: await listAll(),
  read: (await client.callTool({ name: readTool, arguments: {} })).structuredContent,
  ask: texts(await client.callTool({ name: askTool, arguments: {} })),
  asked,
  served: served.splice(0),
};
console.log(JSON.stringify(phase1));

const lines = readline.createInterface({ input: process.stdin });
const next = await new Promise((resolve) => lines.once("line", resolve));
ports = JSON.parse(next);

const execute = async () => {
  const args = { action: opAction, input: { force_kn: 5 }, idempotency_key: "legacy-retry-1", device };
  const result = await client.callTool({ name: "operation.execute", arguments: args });
  return result.structuredContent ?? JSON.parse(texts(result)[0]);
};
const first = await execute();
const retry = await execute();
const phase2 = {
  phase: 2,
  sessionId: transport.sessionId,
  tools: (await listAll()).length,
  ask: texts(await client.callTool({ name: askTool, arguments: {} })),
  first,
  retry,
};
await transport.terminateSession();
phase2.served = served.splice(0);
console.log(JSON.stringify(phase2));
await client.close();
lines.close();
