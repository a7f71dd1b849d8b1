"""A real MCP client of the 2025 era: the official Python SDK 1.x (`mcp<2`, `streamablehttp_client`:
initialize, Mcp-Session-Id, the GET stream, server requests on the call's stream) against Writ
edges. Run with the interpreter of a virtual environment holding `mcp` 1.x (`make pydeps`).

Usage: legacy_client.py URL TOKEN PORT_A PORT_B READ_TOOL ASK_TOOL (TOKEN `-`: none)

Every HTTP request goes to the next port in turn (a round-robin load balancer in front of
stateless replicas); the URL (and token audience) stays URL. Phase 1 prints one JSON line and
waits for a line on stdin with the ports to use next (after an edge restarted on a new port);
phase 2 continues the same session there and prints a second line.
"""

import asyncio
import json
import sys

import httpx
from mcp import ClientSession, types
from mcp.client.streamable_http import streamablehttp_client


class RoundRobin(httpx.AsyncBaseTransport):
    def __init__(self, ports):
        self.inner = httpx.AsyncHTTPTransport()
        self.ports = ports
        self.served = []

    async def handle_async_request(self, request):
        port = self.ports[len(self.served) % len(self.ports)]
        request.url = request.url.copy_with(port=port)
        method = request.method
        if request.method == "POST":
            body = json.loads(request.content or b"{}")
            method = body.get("method") or ("response" if "result" in body else "error")
        self.served.append({"port": port, "method": method})
        return await self.inner.handle_async_request(request)

    async def aclose(self):
        await self.inner.aclose()


async def names(client):
    out, cursor = [], None
    while True:
        page = await client.list_tools(cursor=cursor)
        out += [t.name for t in page.tools]
        cursor = page.nextCursor
        if not cursor:
            return out


async def main():
    url, token, port_a, port_b, read_tool, ask_tool = sys.argv[1:7]
    balancer = RoundRobin([int(port_a), int(port_b)])

    def factory(headers=None, timeout=None, auth=None):
        return httpx.AsyncClient(headers=headers, timeout=timeout, auth=auth, transport=balancer)

    asked = []

    async def elicit(context, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    headers = {} if token == "-" else {"Authorization": f"Bearer {token}"}
    async with streamablehttp_client(url, headers=headers, httpx_client_factory=factory) as (read, write, session_id):
        me = types.Implementation(name="writ-legacy-probe", version="1.0.7")
        async with ClientSession(read, write, elicitation_callback=elicit, client_info=me) as client:
            init = await client.initialize()
            read_result = await client.call_tool(read_tool, {})
            ask_result = await client.call_tool(ask_tool, {})
            phase1 = {
                "phase": 1,
                "sessionId": session_id(),
                "protocolVersion": init.protocolVersion,
                "tools": await names(client),
                "read": read_result.structuredContent,
                "ask": [c.text for c in ask_result.content if c.type == "text"],
                "asked": asked,
                "served": balancer.served[:],
            }
            balancer.served.clear()
            print(json.dumps(phase1), flush=True)
            ports = json.loads(await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline))
            balancer.ports[:] = ports
            again = await client.call_tool(ask_tool, {})
            phase2 = {
                "phase": 2,
                "sessionId": session_id(),
                "tools": len(await names(client)),
                "ask": [c.text for c in again.content if c.type == "text"],
                "served": balancer.served[:],
            }
            print(json.dumps(phase2), flush=True)


asyncio.run(main())
