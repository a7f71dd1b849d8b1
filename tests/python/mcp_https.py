"""The official MCP Python SDK (`mcp` 2.x, mode="2026-07-28") against a Writ edge over HTTPS,
verifying the edge's certificate against the given CA file only (never the system's roots).

Usage: mcp_https.py URL TOKEN CA_FILE

Prints one JSON object: the tool names the edge listed. Exits non-zero when the handshake or
any request fails (e.g. a certificate that does not chain to CA_FILE).
"""

import asyncio
import json
import ssl
import sys

import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client


async def main():
    url, token, ca_file = sys.argv[1:4]
    verify = ssl.create_default_context(cafile=ca_file)
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, verify=verify, timeout=30)
    async with Client(
        streamable_http_client(url, http_client=http, terminate_on_close=False),
        mode="2026-07-28",
        cache=None,
    ) as client:
        names, cursor = [], None
        while True:
            page = await client.list_tools(cursor=cursor)
            names += [t.name for t in page.tools]
            cursor = page.next_cursor
            if not cursor:
                break
    print(json.dumps({"tools": names}))


asyncio.run(main())
