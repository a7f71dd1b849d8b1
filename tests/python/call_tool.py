"""Lists a Writ edge's tools and calls one, with the official Python SDK's client (`mcp` 2.x,
mode="2026-07-28").

Usage: call_tool.py URL TOKEN TOOL ARGUMENTS_JSON

Prints one JSON object: every tool name, the tool's result (error flag, structured content,
texts), the tool descriptions the client was shown, and the progress notifications it received.
"""

import asyncio
import json
import sys

import httpx2

from writ_mcp import session, tool_names


async def main():
    url, token, tool, arguments = sys.argv[1:5]
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    report = {}
    async with session(url, http) as client:
        report["tools"] = await tool_names(client)
        listed = await client.list_tools()
        report["descriptions"] = {t.name: t.description for t in listed.tools}
        progress = []

        async def on_progress(value, total, message):
            progress.append({"progress": value, "total": total, "message": message})

        result = await client.call_tool(tool, json.loads(arguments), progress_callback=on_progress)
        report["progress"] = progress
        report["result"] = {
            "is_error": result.is_error,
            "structured": result.structured_content,
            "texts": [c.text for c in result.content if c.type == "text"],
        }
    print(json.dumps(report))


asyncio.run(main())
