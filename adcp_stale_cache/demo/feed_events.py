"""The example seller's own wholesale-feed webhooks: subscribers registered with
``sync_accounts`` get one signed POST per event when the public feed changes (never the
account layer), sent in the background and bounded; none blocks or fails an answer.
The example accepts ``active: true`` as sent: a real seller runs the activation challenge."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import httpx

logger = logging.getLogger("adcp_stale_cache")

#: What this seller emits: advertised in ``wholesale_feed_webhooks.event_types``.
EVENT_TYPES = ("product.priced", "signal.priced", "wholesale_feed.bulk_change")

#: Each watched feed: its entity type and the member naming a row.
FEEDS = {"products": ("product", "product_id"), "signals": ("signal", "signal_agent_segment_id")}


class Subscriptions:
    """Each account's ``notification_configs[]``, as ``sync_accounts`` last replaced them."""

    def __init__(self) -> None:
        self._configs: dict[str, list[dict[str, Any]]] = {}

    def sync(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """The ``sync_accounts`` answer to ``request`` (declarative replace: an account
        without ``notification_configs`` keeps its subscribers)."""
        accounts = request.get("accounts")
        results = (
            [self._sync_one(a) for a in accounts if isinstance(a, dict)]
            if isinstance(accounts, list)
            else []
        )
        return {"accounts": results}

    def _sync_one(self, account: Mapping[str, Any]) -> dict[str, Any]:
        brand = account.get("brand")
        brand = brand if isinstance(brand, dict) else {}
        operator = str(account.get("operator") or "")
        account_id = f"{brand.get('domain', '')}~{operator}"
        known = account_id in self._configs
        configs = account.get("notification_configs")
        if isinstance(configs, list):
            self._configs[account_id] = [_config(c) for c in configs if isinstance(c, dict)]
        else:
            self._configs.setdefault(account_id, [])
        result: dict[str, Any] = {
            "account_id": account_id,
            "brand": brand,
            "operator": operator,
            "action": "updated" if known else "created",
            "status": "active",
            "notification_configs": self._configs[account_id],
        }
        if isinstance(account.get("sandbox"), bool):
            result["sandbox"] = account["sandbox"]
        return result

    def subscribers(self, event_type: str) -> list[tuple[str, dict[str, Any]]]:
        """``(account_id, config)`` of every active subscriber of ``event_type``."""
        return [
            (account_id, c)
            for account_id, configs in self._configs.items()
            for c in configs
            if c["active"] and event_type in c["event_types"]
        ]


def _config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A subscriber as kept and echoed (``authentication`` is write-only: never echoed)."""
    types = config.get("event_types")
    return {
        "subscriber_id": str(config.get("subscriber_id") or ""),
        "url": str(config.get("url") or ""),
        "event_types": [t for t in types if isinstance(t, str)] if isinstance(types, list) else [],
        "active": config.get("active") is not False,
    }


@dataclass(frozen=True)
class Signer:
    """The seller's webhook-signing key: an ``adcp.signing`` private key and its ``kid``."""

    private_key: Any
    key_id: str
    alg: str = "ed25519"

    @classmethod
    def from_pem(cls, key_id: str, pem: bytes) -> Signer:
        """The signer of a PEM private key (Ed25519 or P-256)."""
        from adcp.signing import load_private_key_pem
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        key = load_private_key_pem(pem)
        return cls(key, key_id, "ed25519" if isinstance(key, Ed25519PrivateKey) else "es256")


class FeedEvents:
    """Signed feed events to ``subscriptions``' subscribers when the public feed changes."""

    def __init__(
        self,
        subscriptions: Subscriptions,
        signer: Signer,
        *,
        timeout: float = 5.0,
        max_pending: int = 64,
    ) -> None:
        # Imported at start: on the loop (4 to 13 s) it stalled every answer in flight.
        from adcp.webhooks import sign_webhook

        self._sign_webhook = sign_webhook
        self.subscriptions, self.signer, self.max_pending = subscriptions, signer, max_pending
        self._client = httpx.AsyncClient(timeout=timeout, follow_redirects=False)
        self._last: dict[str, tuple[str, dict[str, Any]]] = {}  # feed -> (version, rows by id)
        self._pending: set[asyncio.Task[None]] = set()

    def observe(self, feed: str, answer: Mapping[str, Any]) -> None:
        """Note a full public answer of ``feed``; if its rows changed, send the events
        in the background."""
        rows, version = answer.get(feed), answer.get("wholesale_feed_version")
        if answer.get("cache_scope") != "public" or not isinstance(rows, list):
            return
        entity, key = FEEDS[feed]
        now = {str(r.get(key)): r for r in rows if isinstance(r, dict)}
        last = self._last.get(feed)
        self._last[feed] = (str(version), now)
        if last is None or last[0] == str(version):
            return
        for event in _events(entity, last[1], now):
            for account_id, config in self.subscriptions.subscribers(event["event_type"]):
                body = _envelope(event, account_id, config, str(version), last[0])
                self._send(config["url"], body)

    def _send(self, url: str, body: dict[str, Any]) -> None:
        if len(self._pending) >= self.max_pending:
            logger.warning("feed_event_dropped url=%s pending=%d", url, len(self._pending))
            return
        task = asyncio.get_running_loop().create_task(self._post(url, body))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _post(self, url: str, event: dict[str, Any]) -> None:
        body = json.dumps(event).encode()
        headers = {"content-type": "application/json"}
        signer = self.signer
        headers |= self._sign_webhook(
            method="POST",
            url=url,
            headers=headers,
            body=body,
            private_key=signer.private_key,
            key_id=signer.key_id,
            alg=signer.alg,
        ).as_dict()
        try:
            response = await self._client.post(url, content=body, headers=headers)
        except httpx.HTTPError as exc:  # at least once is the subscriber's repair: no retry
            logger.warning("feed_event_failed url=%s error=%r", url, exc)
            return
        logger.info("feed_event_sent url=%s status=%d", url, response.status_code)

    async def aclose(self) -> None:
        """Cancel what is still being sent; close the client."""
        for task in list(self._pending):
            task.cancel()
        await asyncio.gather(*self._pending, return_exceptions=True)
        await self._client.aclose()


def _events(
    entity: str, before: Mapping[str, Any], after: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The events from ``before`` to ``after``: one bulk change when rows appeared or went,
    else one ``*.priced`` per row whose pricing changed."""
    public = {"scope": "public"}
    if before.keys() != after.keys():
        changed = len(before.keys() ^ after.keys())
        payload = {
            "summary": f"{changed} {entity}s added or removed",
            "affected_entity_type": entity,
            "affected_count": changed,
            "recommendation": "wholesale_resync",
            "applies_to": public,
        }
        return [_event("wholesale_feed.bulk_change", "feed", str(uuid.uuid4()), payload)]
    events = []
    for row_id, row in after.items():
        old = before[row_id].get("pricing_options")
        if row.get("pricing_options") == old:
            continue
        _, key = FEEDS[f"{entity}s"]
        previous = [p.get("pricing_option_id") for p in old or [] if isinstance(p, dict)]
        payload = {
            key: row_id,
            "pricing_options": row.get("pricing_options") or [],
            "previous_pricing_option_ids": [p for p in previous if isinstance(p, str)],
            "applies_to": public,
        }
        events.append(_event(f"{entity}.priced", entity, row_id, payload))
    return events


def _event(kind: str, entity: str, entity_id: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "event_id": str(uuid.uuid4()),
        "event_type": kind,
        "entity_type": entity,
        "entity_id": entity_id,
        "created_at": _now(),
        "payload": payload,
    }


def _envelope(
    event: dict[str, Any],
    account_id: str,
    config: Mapping[str, Any],
    version: str,
    previous: str,
) -> dict[str, Any]:
    """The webhook body carrying ``event`` to one subscriber."""
    body: dict[str, Any] = {
        "idempotency_key": f"whk_{uuid.uuid4().hex}",
        "notification_id": event["event_id"],
        "notification_type": event["event_type"],
        "fired_at": _now(),
        "subscriber_id": config["subscriber_id"],
        "account_id": account_id,
        "wholesale_feed_version": version,
        "previous_wholesale_feed_version": previous,
        "cache_scope": "public",
        "event": event,
    }
    if event["entity_type"] == "product":  # the view every subscriber gets here (no canonical)
        body["product_payload_view"] = "legacy"
    return body


def _now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")
