"""Schema-valid AdCP sample data for the mock upstreams."""

from __future__ import annotations

import hashlib
from typing import Any

_SIZES = [(300, 250), (728, 90), (160, 600), (320, 50), (970, 250), (300, 600)]


def creative_formats(agent_url: str, agent_name: str, count: int) -> list[dict[str, Any]]:
    """``count`` display formats owned by the agent at ``agent_url``."""
    formats = []
    for i in range(count):
        width, height = _SIZES[i % len(_SIZES)]
        slug = f"{agent_name}_display_{width}x{height}_{i}"
        formats.append(
            {
                "format_id": {"agent_url": agent_url, "id": slug},
                "name": f"{agent_name} display {width}x{height} #{i}",
                "description": f"Static display banner, {width}x{height}, from {agent_name}.",
                "renders": [{"role": "primary", "dimensions": {"width": width, "height": height}}],
            }
        )
    return formats


def products(count: int, principal: str | None = None, revision: int = 0) -> list[dict[str, Any]]:
    """``count`` products; a ``principal`` gets products of its own (ids and prices vary),
    and each ``revision`` of the inventory changes every product's name and price."""
    tag = hashlib.sha256(principal.encode()).hexdigest()[:8] if principal else "public"
    edition = f", revision {revision}" if revision else ""
    items = []
    for i in range(count):
        items.append(
            {
                "product_id": f"{tag}-display-{i}",
                "name": f"Run of network display #{i} ({tag}{edition})",
                "description": "Non-guaranteed display across the Acme Outdoor network.",
                "publisher_properties": [
                    {"publisher_domain": "acme-outdoor.example", "selection_type": "all"}
                ],
                "format_ids": [
                    {"agent_url": "https://creative.adcontextprotocol.org", "id": "display_300x250"}
                ],
                # 3.2 declares formats inline; format_ids stays for 3.0 and 3.1 buyers.
                "format_options": [
                    {
                        "format_option_id": "display_300x250",
                        "format_kind": "image",
                        "params": {"width": 300, "height": 250},
                    }
                ],
                "delivery_type": "non_guaranteed",
                "pricing_options": [
                    {
                        "pricing_option_id": f"cpm-{tag}-{i}",
                        "pricing_model": "cpm",
                        "currency": "USD",
                        "fixed_price": round(2.5 + i + (len(tag) % 3) + revision / 4, 2),
                    }
                ],
                "reporting_capabilities": {
                    "available_reporting_frequencies": ["daily"],
                    "expected_delay_minutes": 240,
                    "timezone": "UTC",
                    "supports_webhooks": False,
                    "available_metrics": ["impressions", "spend", "clicks"],
                    "date_range_support": "date_range",
                },
            }
        )
    return items


def signals(count: int, principal: str | None = None, revision: int = 0) -> list[dict[str, Any]]:
    """``count`` audience signals (a signals agent's wholesale feed), varying as
    :func:`products` do by ``principal`` and ``revision``."""
    tag = hashlib.sha256(principal.encode()).hexdigest()[:8] if principal else "public"
    edition = f", revision {revision}" if revision else ""
    agent = "https://signals.acme-outdoor.example"
    return [
        {
            "signal_id": {"source": "agent", "agent_url": agent, "id": f"{tag}_outdoor_{i}"},
            "signal_agent_segment_id": f"{tag}-outdoor-{i}",
            "name": f"Outdoor enthusiasts #{i} ({tag}{edition})",
            "description": "People who bought outdoor gear in the last 90 days.",
            "signal_type": "owned",
            "data_provider": "Acme Outdoor",
            "coverage_percentage": 12.5 + i,
            "deployments": [{"type": "platform", "platform": "example-dsp", "is_live": False}],
            "pricing_options": [
                {
                    "pricing_option_id": f"cpm-{tag}-{i}",
                    "model": "cpm",
                    "currency": "USD",
                    "cpm": round(1.5 + i + revision / 4, 2),
                }
            ],
        }
        for i in range(count)
    ]
