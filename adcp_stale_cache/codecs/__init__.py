"""Wire shapes, not caches: find the AdCP payload in a body and append advisories to it, or
raise :class:`Untouched` saying why the body goes out as it came."""

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
