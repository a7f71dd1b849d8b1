"""An OTLP/HTTP trace receiver for Writ's trace test: what a collector would be, decoding each
export with the official `opentelemetry-proto` definitions (no hand-written protobuf).

Usage: otlp_receiver.py

Binds 127.0.0.1 port 0 and prints `{"port": N}` on its first line; then one JSON line per span
received at `POST /v1/traces`: its service, trace and span ids, parent span id, name, kind and
attributes (values as text).
"""

import gzip
import json
import socket
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

BODY_MAX = 16 * 1024 * 1024


def value(v):
    kind = v.WhichOneof("value")
    return str(getattr(v, kind)) if kind else ""


def spans_of(request):
    for rs in request.resource_spans:
        resource = {a.key: value(a.value) for a in rs.resource.attributes}
        for ss in rs.scope_spans:
            for s in ss.spans:
                yield {
                    "service": resource.get("service.name", ""),
                    "role": resource.get("writ.role", ""),
                    "trace_id": s.trace_id.hex(),
                    "span_id": s.span_id.hex(),
                    "parent_span_id": s.parent_span_id.hex(),
                    "name": s.name,
                    "kind": Span.SpanKind.Name(s.kind),
                    "attributes": {a.key: value(a.value) for a in s.attributes},
                    "events": [e.name for e in s.events],
                    "status": s.status.code,
                }


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        if self.path != "/v1/traces" or length > BODY_MAX:
            self.send_response(404)
            self.end_headers()
            return
        body = self.rfile.read(length)
        if self.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for span in spans_of(request):
            print(json.dumps(span), flush=True)
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(json.dumps({"port": server.server_address[1]}), flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
