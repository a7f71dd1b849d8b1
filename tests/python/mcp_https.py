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

from writ_mcp import session, tool_names


async def main():
    url, token, ca_file = sys.argv[1:4]
    verify = ssl.create_default_context(cafile=ca_file)
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, verify=verify, timeout=30)
    async with session(url, http) as client:
        names = await tool_names(client)
    print(json.dumps({"tools": names}))


asyncio.run(main())
