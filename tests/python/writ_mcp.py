"""What the tests' MCP clients share: a 2026-07-28 session over an httpx2 client, and every tool
name across the pages of tools/list."""

from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client


def session(url, http, **callbacks):
    """An MCP client of the edge at `url` (stateless: no session to terminate, no cache)."""
    return Client(
        streamable_http_client(url, http_client=http, terminate_on_close=False),
        mode="2026-07-28",
        cache=None,
        **callbacks,
    )


async def tool_names(client):
    """Every tool the client may see, following tools/list's cursor."""
    names, cursor = [], None
    while True:
        page = await client.list_tools(cursor=cursor)
        names += [t.name for t in page.tools]
        cursor = page.next_cursor
        if not cursor:
            return names
