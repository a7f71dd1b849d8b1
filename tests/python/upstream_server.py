"""An upstream MCP server for Writ's federation tests: the official Python SDK's `MCPServer`
(mcp 2.x), over Streamable HTTP, serving both protocol eras (2026-07-28 stateless and
2025-11-25 with `initialize` and a session) on one endpoint.

Usage: upstream_server.py [--variant v1|v2] [--token TOKEN] [--oauth CLIENT_ID:SECRET [--token-ttl S]] [--otlp URL]

Binds 127.0.0.1 port 0 and prints `{"port": N}` on its first line; then one line
`CALL <tool> <json arguments>` per tool call it runs (what the tests count), and
`AUTH <header>` when a request carries an Authorization header. With `--oauth` it is its own
OAuth 2.0 authorization server too: `POST /token` grants `client_credentials` to that client
(HTTP Basic) with tokens living `--token-ttl` seconds (one line `TOKEN <scope>` per grant, `DENIED`
per refusal), and the MCP endpoint takes only its live tokens.

With `--otlp` its spans (the MCP SDK's server spans, which continue the trace a request's
`_meta.traceparent` names) go to that OTLP/HTTP collector as service `upstream`.

Tools: `forecast` (read-only and idempotent; structured output), `place_order` (an effect:
echoes the idempotency key and operation id Writ sent in `_meta`; `out-of-stock` fails), `slow` (sleeps as long as
asked), `steps` (reports progress n times), `chatty` (logs n messages), `huge` (a result of N bytes), `bad_output` (structured output that breaks its own
output schema). Variant v2 changes `forecast`'s description and adds a required argument.
"""

import argparse
import asyncio
import base64
import json
import secrets
import socket
import sys
import time
import urllib.parse

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel


class Forecast(BaseModel):
    city: str
    temp_c: int


class Level(BaseModel):
    level: int


class Order(BaseModel):
    order_id: str
    sku: str
    key: str | None
    operation: str | None


def writ_meta(ctx):
    """The request's `_meta` as a dict (whatever shape the SDK gives it)."""
    meta = ctx.request_context.meta
    if meta is None:
        return {}
    if isinstance(meta, dict):
        return meta
    return {**(getattr(meta, "model_extra", None) or {}), **meta.model_dump(by_alias=True)}


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def build(variant):
    server = MCPServer("writ-test-upstream")
    read_only = ToolAnnotations(readOnlyHint=True, idempotentHint=True)

    if variant == "v1":

        @server.tool(description="Today's forecast for a city.", annotations=read_only)
        def forecast(city: str) -> Forecast:
            say("CALL forecast " + json.dumps({"city": city}))
            return Forecast(city=city, temp_c=21)

    else:

        @server.tool(description="The forecast for a city, in the unit asked for.", annotations=read_only)
        def forecast(city: str, unit: str) -> Forecast:
            say("CALL forecast " + json.dumps({"city": city, "unit": unit}))
            return Forecast(city=city, temp_c=21 if unit == "c" else 70)

    @server.tool(description="Places an order (an effect): answers its number, and the Writ idempotency key and operation it came with.")
    def place_order(sku: str, ctx: Context) -> Order:
        meta = writ_meta(ctx)
        key, operation = meta.get("io.writ/idempotencyKey"), meta.get("io.writ/operationId")
        say("CALL place_order " + json.dumps({"sku": sku, "key": key, "operation": operation}))
        if sku == "out-of-stock":
            raise ValueError("out of stock")
        return Order(order_id=f"order-{sku}", sku=sku, key=key, operation=operation)

    @server.tool(description="Sleeps for the given seconds, then answers.")
    async def slow(seconds: float) -> str:
        say("CALL slow " + json.dumps({"seconds": seconds}))
        await asyncio.sleep(seconds)
        return "done"

    @server.tool(description="Reports progress n times, then answers.")
    async def steps(n: int, ctx: Context) -> str:
        say("CALL steps " + json.dumps({"n": n}))
        for i in range(1, n + 1):
            await ctx.report_progress(i, n, f"step {i} of {n}")
            await asyncio.sleep(0.05)
        return f"{n} steps"

    @server.tool(description="Logs n messages (info), then answers.")
    async def chatty(n: int, ctx: Context) -> str:
        say("CALL chatty " + json.dumps({"n": n}))
        for i in range(1, n + 1):
            await ctx.info(f"message {i} of {n}", logger_name="chatty")
        return f"{n} messages"

    @server.tool(description="Answers with a text of the given size.")
    def huge(size: int) -> str:
        say("CALL huge " + json.dumps({"size": size}))
        return "x" * size

    @server.tool(description="Claims a level, returns a word.")
    def bad_output() -> CallToolResult:
        say("CALL bad_output {}")
        return CallToolResult(content=[TextContent(type="text", text="high")], structured_content={"level": "high"})

    # An output schema the tool advertises but breaks (hand-set metadata: the SDK publishes it
    # without checking results against it), as a faulty or malicious upstream would.
    server._tool_manager._tools["bad_output"].fn_metadata.output_schema = Level.model_json_schema()
    return server


def traced(otlp):
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "upstream"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{otlp}/v1/traces")))
    trace.set_tracer_provider(provider)


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--variant", default="v1")
    parser.add_argument("--token", default=None)
    parser.add_argument("--oauth", default=None)
    parser.add_argument("--token-ttl", type=float, default=3600)
    parser.add_argument("--otlp", default=None)
    args = parser.parse_args()
    if args.otlp:
        traced(args.otlp)
    issued = {}  # token -> expiry (monotonic seconds)
    server = build(args.variant)
    app = server.streamable_http_app(host="127.0.0.1")
    inner = app

    async def answer(send, status, body, content_type=b"application/json"):
        await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", content_type)]})
        await send({"type": "http.response.body", "body": body})

    async def grant(scope, receive, send):
        headers = dict(scope.get("headers") or [])
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        form = urllib.parse.parse_qs(body.decode())
        client_id, secret = args.oauth.split(":", 1)
        basic = b"Basic " + base64.b64encode(f"{client_id}:{secret}".encode())
        if headers.get(b"authorization") != basic or form.get("grant_type") != ["client_credentials"]:
            say("DENIED")
            await answer(send, 401, json.dumps({"error": "invalid_client"}).encode())
            return
        token = "tok-" + secrets.token_hex(8)
        issued[token] = time.monotonic() + args.token_ttl
        say("TOKEN " + (form.get("scope") or [""])[0])
        await answer(send, 200, json.dumps({"access_token": token, "token_type": "Bearer", "expires_in": args.token_ttl}).encode())

    async def guarded(scope, receive, send):
        if scope["type"] == "http" and args.oauth is not None and scope["path"] == "/token":
            return await grant(scope, receive, send)
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            auth = headers.get(b"authorization")
            if auth is not None:
                say("AUTH " + auth.decode())
            if args.oauth is not None:
                token = (auth or b"").decode().removeprefix("Bearer ")
                if issued.get(token, 0) < time.monotonic():
                    await answer(send, 401, b"unauthorized", b"text/plain")
                    return
            if args.token is not None and auth != f"Bearer {args.token}".encode():
                await send({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]})
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await inner(scope, receive, send)

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    say(json.dumps({"port": sock.getsockname()[1]}))
    config = uvicorn.Config(guarded, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve(sockets=[sock])


asyncio.run(main())
