"""Serve stale on upstream error, and tell AdCP buyers so with ``STALE_RESPONSE``."""

from ._version import __version__
from .advisory import AdcpError, StaleResponseDetails, service_unavailable, stale_response
from .cache import UpstreamCache
from .collector import (
    AdvisoryCollector,
    AdvisoryLost,
    carry_context,
    collect_advisories,
    current_collector,
    use_collector,
)
from .control import CacheControl
from .failures import (
    Failure,
    InvalidPayload,
    UpstreamError,
    UpstreamHTTPError,
    UpstreamUnavailable,
    classify,
    http_status_failure,
)
from .httpx_transport import CachingTransport
from .middleware import StaleAdvisoryMiddleware
from .peek import ToolCall
from .policy import DEFAULT_STALE_ON, FailureKind, SurfacePolicy, Surfaces, Upstream
from .stores import MemoryStore, Store
from .values import JSON, Codec, JsonCodec, PydanticCodec, SharedJsonCodec

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
