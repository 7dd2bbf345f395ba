"""Serve stale on upstream error, and tell AdCP buyers so with ``STALE_RESPONSE``."""

from ._version import __version__
from .asgi.middleware import StaleAdvisoryMiddleware
from .asgi.peek import ToolCall
from .core.advisory import AdcpError, StaleResponseDetails, service_unavailable, stale_response
from .core.failures import (
    Failure,
    InvalidPayload,
    UpstreamError,
    UpstreamHTTPError,
    UpstreamUnavailable,
    classify,
    http_status_failure,
)
from .core.policy import DEFAULT_STALE_ON, FailureKind, SurfacePolicy, Surfaces, Upstream
from .core.values import JSON, Codec, JsonCodec, PydanticCodec, SharedJsonCodec
from .integrations.httpx_transport import CachingTransport
from .ops.control import CacheControl
from .pipeline.cache import UpstreamCache
from .pipeline.collector import (
    AdvisoryCollector,
    AdvisoryLost,
    carry_context,
    collect_advisories,
    current_collector,
    use_collector,
)
from .stores import MemoryStore, Store

__all__ = [
    "DEFAULT_STALE_ON",
    "JSON",
    "AdcpError",
    "AdvisoryCollector",
    "AdvisoryLost",
    "CacheControl",
    "CachingTransport",
    "Codec",
    "Failure",
    "FailureKind",
    "InvalidPayload",
    "JsonCodec",
    "MemoryStore",
    "PydanticCodec",
    "SharedJsonCodec",
    "StaleAdvisoryMiddleware",
    "StaleResponseDetails",
    "Store",
    "SurfacePolicy",
    "Surfaces",
    "ToolCall",
    "Upstream",
    "UpstreamCache",
    "UpstreamError",
    "UpstreamHTTPError",
    "UpstreamUnavailable",
    "__version__",
    "carry_context",
    "classify",
    "collect_advisories",
    "current_collector",
    "http_status_failure",
    "service_unavailable",
    "stale_response",
    "use_collector",
]
