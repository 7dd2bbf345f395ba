"""A sub-agent's wholesale-feed webhooks, verified (AdCP's RFC 9421 profile) and applied to
the cache as soft purges: the same whatever the order or repeats, seen by every process
sharing the store (docs: Federation).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from starlette.types import Receive, Scope, Send

from ..codecs.json import loads
from ..core.policy import Upstream
from ..ops.control import CacheControl
from .adcp_agent import account_tag

logger = logging.getLogger("adcp_stale_cache")

#: The largest event body read; a bigger one is refused unread.
MAX_BODY = 256 * 1024


class FeedWebhooks:
    """Wholesale-feed events of ``upstream`` (an AdCP agent behind ``control``'s cache).

    ``verify`` is ``adcp``'s ``WebhookVerifyOptions`` naming this agent's keys only (one for
    the receiver's life: it holds the replay store); ``url`` is the public URL the agent
    signs, never read from the request (its ``Host`` is the sender's to choose).
    """

    def __init__(self, control: CacheControl, upstream: Upstream, *, verify: Any, url: str) -> None:
        self.control, self.upstream, self.verify, self.url = control, upstream, verify, url

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Verify the event, apply it, answer (202 applied, 401 unverified, 4xx otherwise)."""
        if scope["type"] != "http":
            return
        if scope["method"] != "POST":
            await _answer(send, 405, {"error": "POST an event"})
            return
        body = await _body(receive)
        if body is None:
            await _answer(send, 413, {"error": "event too large"})
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        refused = self._unverified(headers, body)
        if refused is not None:
            await _answer(send, 401, {"error": "signature not verified", "code": refused})
            return
        try:
            event = loads(body)  # NotJson (a ValueError) for a body nested past any parser
            applied = await self.apply(event)
        except (ValueError, TypeError) as exc:
            await _answer(send, 400, {"error": f"not a wholesale feed event: {exc}"})
            return
        await _answer(send, 202, applied)

    def _unverified(self, headers: Mapping[str, str], body: bytes) -> str | None:
        """Why the event is not verified (its ``webhook_signature_*`` code), or None."""
        from adcp.signing import SignatureVerificationError
        from adcp.webhooks import verify_webhook_signature

        try:
            verify_webhook_signature(
                method="POST", url=self.url, headers=headers, body=body, options=self.verify
            )
        except SignatureVerificationError as exc:
            logger.warning("feed_webhook_refused upstream=%s code=%s", self.upstream.name, exc.code)
            return str(exc.code)
        return None

    async def apply(self, event: object) -> dict[str, Any]:
        """Soft-purge what a verified event's ``applies_to`` names (a bulk change re-reads);
        returns what was done, raises ``ValueError`` for what is no event."""
        if not isinstance(event, Mapping):
            raise ValueError("the body is no JSON object")
        inner = event.get("event")
        payload = inner.get("payload") if isinstance(inner, Mapping) else None
        applies = payload.get("applies_to") if isinstance(payload, Mapping) else None
        kind = event.get("notification_type")
        if not isinstance(applies, Mapping) or not isinstance(kind, str):
            raise ValueError("no notification_type or event.payload.applies_to")
        count = 0
        for tags in _selections(applies, event.get("account_id")):
            if kind == "wholesale_feed.bulk_change":
                count += await self.control.refresh(upstream=self.upstream, tags=tags)
            else:
                count += await self.control.invalidate(upstream=self.upstream, tags=tags)
        done = {"applied": kind, "scope": applies.get("scope"), "entries": count}
        logger.info(
            "feed_webhook_applied upstream=%s kind=%s entries=%d", self.upstream.name, kind, count
        )
        return done


def _selections(applies: Mapping[str, Any], receiving: object) -> list[list[str]]:
    """The tags of each selection: none (every entry of the agent) for ``public``, else one
    per account."""
    scope = applies.get("scope")
    if scope == "public":
        return [[]]
    if scope != "account":
        raise ValueError(f"applies_to.scope is {scope!r}, not public or account")
    ids = applies.get("account_ids")
    if ids is None:
        ids = [receiving] if isinstance(receiving, str) and receiving else None
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) and i for i in ids):
        raise ValueError("an account-scoped event names no account")
    return [[account_tag(account)] for account in dict.fromkeys(ids)]


async def _body(receive: Receive) -> bytes | None:
    """The request body, or None past :data:`MAX_BODY`."""
    chunks, size = [], 0
    while True:
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


async def _answer(send: Send, status: int, body: Mapping[str, Any]) -> None:
    data = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
