"""A real MCP client (the official Python SDK, `mcp` 2.x, mode="2026-07-28") against Writ edges.

Usage: mcp_client.py URL TOKEN PORT_A PORT_B READ_TOOL MRTR_TOOL

Every HTTP request of the session goes to the next edge in turn (PORT_A, PORT_B, PORT_A, ...),
as a round-robin load balancer in front of stateless replicas would send it; the canonical URL
(and token audience) stays URL. Prints one JSON object: what the client saw and which edge
served each request.
"""

import asyncio
import json
import sys

import httpx2
from mcp import types

from writ_mcp import session, tool_names


class RoundRobin(httpx2.AsyncBaseTransport):
    def __init__(self, ports):
        self.inner = httpx2.AsyncHTTPTransport()
        self.ports = ports
        self.served = []

    async def handle_async_request(self, request):
        port = self.ports[len(self.served) % len(self.ports)]
        request.url = request.url.copy_with(port=port)
        body = json.loads(request.content or b"{}") if request.method == "POST" else {}
        self.served.append({"port": port, "method": body.get("method"), "round": "inputResponses" in body.get("params", {})})
        return await self.inner.handle_async_request(request)

    async def aclose(self):
        await self.inner.aclose()


async def main():
    url, token, port_a, port_b, read_tool, mrtr_tool = sys.argv[1:7]
    balancer = RoundRobin([int(port_a), int(port_b)])
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, transport=balancer, timeout=30)
    asked = []

    async def elicit(context, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    report = {}
    async with session(url, http, elicitation_callback=elicit) as client:
        report["tools"] = await tool_names(client)
        read = await client.call_tool(read_tool, {})
        report["read"] = {"is_error": read.is_error, "structured": read.structured_content}
        greeted = await client.call_tool(mrtr_tool, {})
        report["mrtr"] = {"is_error": greeted.is_error, "text": [c.text for c in greeted.content if c.type == "text"], "asked": asked}
    report["served"] = balancer.served
    print(json.dumps(report))


asyncio.run(main())
