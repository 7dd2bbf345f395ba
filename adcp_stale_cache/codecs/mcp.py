"""MCP ``tools/call`` results: the payload is ``structuredContent``, often mirrored as text."""

from __future__ import annotations

from typing import Any

from .json import (
    KEEP,
    Delivery,
    Untouched,
    dumps_text,
    foreign_context,
    inject_payload,
    loads,
    mends,
    parse,
    same_json,
    unwritten,
)


def inject_tool_result(result: Any, errors: list[dict[str, Any]]) -> None:
    """Append ``errors`` to a ``CallToolResult``'s payload and its JSON text mirrors, in place
    (no ``structuredContent``: the one JSON text block); an ``isError`` result takes none,
    though its context is mended."""
    if not isinstance(result, dict):
        raise Untouched("tools/call result is not an object", "not_json")
    if errors and result.get("isError"):  # (its context is still mended)
        raise Untouched("tool result has isError: true", "is_error")
    structured = result.get("structuredContent")
    mirrors = _payload_texts(result, structured)
    mended = mends(errors)
    try:
        if structured is None and len(mirrors) > 1:
            raise Untouched("several JSON text blocks and no structuredContent: which is it?")
        if not isinstance(structured, dict) and not mirrors:
            raise Untouched("tool result holds no JSON payload", "not_json")
        texts = []  # the mirrors written first: a mirror that cannot be leaves all untouched
        for block, _ in mirrors:
            payload = parse(block["text"])  # exactly, since it is rewritten
            inject_payload(payload, errors)
            pretty = "\n" in block["text"]
            texts.append(dumps_text(payload, indent=2 if pretty else None, ensure_ascii=False))
        if isinstance(structured, dict):
            inject_payload(structured, errors)
        for (block, _), text in zip(mirrors, texts, strict=True):
            block["text"] = text
    except Untouched as exc:
        context = errors.context if isinstance(errors, Delivery) else KEEP
        payloads = [structured, *(payload for _, payload in mirrors)]
        foreign = any(foreign_context(payload, context) for payload in payloads)
        raise unwritten(exc, errors, mended, lambda: foreign) from exc


def _payload_texts(result: dict[str, Any], structured: Any) -> list[tuple[dict[str, Any], Any]]:
    """The text blocks that are the payload as JSON, each with its payload read leniently."""
    content = result.get("content")
    found = []
    for block in content if isinstance(content, list) else []:
        if not (isinstance(block, dict) and block.get("type") == "text"):
            continue
        text = block.get("text")
        if not isinstance(text, str) or not text.lstrip().startswith("{"):
            continue
        try:
            payload = loads(text)
        except Untouched:
            continue
        if structured is None or same_json(_without_nulls(payload), _without_nulls(structured)):
            found.append((block, payload))
    return found


def _without_nulls(payload: Any) -> Any:
    """A payload less its null members (a mirror may have them or not)."""
    if isinstance(payload, dict):
        return {key: value for key, value in payload.items() if value is not None}
    return payload
