"""A hand-written stdio MCP server (no SDK) for what the SDK's own server will not send: ``tools`` lists tools
whose names are not ASCII and a schema with ``required: []``; ``garbage`` writes lines to stdout that are not
JSON-RPC (a server printing a banner or its logs there, which the MCP stdio transport forbids) and never answers;
``late_garbage`` answers the handshake and the listing, then logs to stdout when a tool is called.

``python mcp_raw_server.py tools|garbage|late_garbage [--tag T]`` (the tag only marks the process for the tests)."""

from __future__ import annotations

import json
import sys

TOOLS = [
    {"name": "commande.état", "description": "État d'une commande.",
     "inputSchema": {"type": "object", "properties": {"numéro": {"type": "string"}}, "required": ["numéro"]}},
    {"name": "注文照会", "description": "Look up an order (Japanese name).",
     "inputSchema": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": []}},
]


def _send(message: dict) -> None:
    sys.stdout.write(json.dumps(message, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def serve_tools(garbage_on_call: bool = False) -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        if "id" not in message:
            continue  # a notification (initialized)
        method = message.get("method")
        if method == "initialize":
            result = {"protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}},
                      "serverInfo": {"name": "raw", "version": "1"}}
        elif method == "tools/list":
            result = {"tools": TOOLS}
        elif method == "tools/call" and garbage_on_call:
            print(f"DEBUG calling {message['params']['name']}", flush=True)
            continue
        else:
            _send({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "no such method"}})
            continue
        _send({"jsonrpc": "2.0", "id": message["id"], "result": result})


def serve_garbage() -> None:
    print("raw MCP server 1.0 starting up...", flush=True)
    for _line in sys.stdin:
        print("INFO got a request, thinking about it", flush=True)


if __name__ == "__main__":
    {"tools": serve_tools, "garbage": serve_garbage,
     "late_garbage": lambda: serve_tools(garbage_on_call=True)}[sys.argv[1]]()
