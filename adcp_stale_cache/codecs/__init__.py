"""Wire-format codecs: find the AdCP payload in a response body, append advisories to it.

Codecs know wire shapes, not caches. Each one either returns the new body or raises
:class:`Untouched` with the reason the body must go out as it came.
"""

from .json import Untouched, inject_json, inject_payload

__all__ = ["Untouched", "inject_json", "inject_payload"]
