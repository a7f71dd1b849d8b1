"""Lists a Writ edge's tools and calls one, with the official Python SDK's client (`mcp` 2.x,
mode="2026-07-28").

Usage: call_tool.py URL TOKEN TOOL ARGUMENTS_JSON [LOG_LEVEL]

Prints one JSON object: every tool name, the tool's result (error flag, structured content,
texts), the tool descriptions the client was shown, the progress notifications it received,
and — when LOG_LEVEL is given (the call then asks for log messages at that level) — the log
messages it received.
"""

import asyncio
import json
import sys

import httpx2

from writ_mcp import session, tool_names


async def main():
    url, token, tool, arguments = sys.argv[1:5]
    log_level = sys.argv[5] if len(sys.argv) > 5 else None
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    report = {}
    logs = []

    async def on_log(params):
        logs.append({"level": params.level, "logger": params.logger, "data": params.data})

    callbacks = {"log_level": log_level, "logging_callback": on_log} if log_level else {}
    async with session(url, http, **callbacks) as client:
        report["tools"] = await tool_names(client)
        listed = await client.list_tools()
        report["descriptions"] = {t.name: t.description for t in listed.tools}
        progress = []

        async def on_progress(value, total, message):
            progress.append({"progress": value, "total": total, "message": message})

        result = await client.call_tool(tool, json.loads(arguments), progress_callback=on_progress)
        report["progress"] = progress
        report["logs"] = logs
        report["result"] = {
            "is_error": result.is_error,
            "structured": result.structured_content,
            "texts": [c.text for c in result.content if c.type == "text"],
        }
    print(json.dumps(report))


asyncio.run(main())
