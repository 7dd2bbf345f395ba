"""Wire-format codecs: find the AdCP payload in a response body, append advisories to it.

Codecs know wire shapes, not caches: plain JSON (``json``), JSON-RPC requests and answers
(``jsonrpc``), MCP tool results (``mcp``), A2A tasks (``a2a``), server-sent events (``sse``)
and tool answers streamed as events (``stream``). Each either returns the new body or raises
:class:`Untouched` with the reason the body must go out as it came.
"""

from .json import Untouched, inject_json, inject_payload, present
from .jsonrpc import RpcCall, inject_body, parse_calls
from .stream import RpcEventStream

__all__ = [
    "RpcCall",
    "RpcEventStream",
    "Untouched",
    "inject_body",
    "inject_json",
    "inject_payload",
    "parse_calls",
    "present",
]
