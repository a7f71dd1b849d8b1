"""An agent host traced with the official OpenTelemetry SDK: one span for its turn, inside which
the official MCP Python SDK (2.x, which starts a client span per request and carries its
context in `_meta.traceparent`) calls tools of a Writ edge. Its spans go to an OTLP/HTTP
collector.

Usage: otel_agent.py MCP_URL TOKEN OTLP_URL TOOL [TOOL …]

Prints one JSON object: the turn's trace id and span id, and each tool's error flag.
"""

import asyncio
import json
import sys

import httpx2
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from writ_mcp import session


async def main():
    url, token, otlp = sys.argv[1:4]
    tools = sys.argv[4:]
    provider = TracerProvider(resource=Resource.create({"service.name": "agent-host"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{otlp}/v1/traces")))
    trace.set_tracer_provider(provider)
    tracer = trace.get_tracer("agent-host")
    report = {"results": {}}
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    with tracer.start_as_current_span("agent turn") as turn:
        context = turn.get_span_context()
        report["trace_id"] = format(context.trace_id, "032x")
        report["span_id"] = format(context.span_id, "016x")
        async with session(url, http) as client:
            for tool in tools:
                result = await client.call_tool(tool, {"city": "Oslo"} if "." in tool else {})
                report["results"][tool] = result.is_error
    provider.shutdown()
    print(json.dumps(report))


asyncio.run(main())
