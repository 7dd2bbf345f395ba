"""MCP ``tools/call`` results: the payload is ``structuredContent``, often mirrored as text."""

from __future__ import annotations

from typing import Any

from .json import (
    KEEP,
    Delivery,
    Untouched,
    compares,
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
    though its context is mended, as is any other JSON text's."""
    if not isinstance(result, dict):
        raise Untouched("tools/call result is not an object", "not_json")
    if errors and result.get("isError"):  # (its context is still mended)
        raise Untouched("tool result has isError: true", "is_error")
    structured = result.get("structuredContent")
    mirrors: list[tuple[dict[str, Any], Any]] = []
    others: list[tuple[dict[str, Any], Any]] = []
    bare = _without_nulls(structured)
    for block, payload in _json_texts(result, compares(errors)):
        mirror = structured is None or same_json(_without_nulls(payload), bare)
        (mirrors if mirror else others).append((block, payload))
    context = errors.context if isinstance(errors, Delivery) else KEEP
    mended = mends(errors)
    try:
        if structured is None and len(mirrors) > 1:
            raise Untouched("several JSON text blocks and no structuredContent: which is it?")
        if not isinstance(structured, dict) and not mirrors:
            raise Untouched("tool result holds no JSON payload", "not_json")
        # Mirrors written first: one that cannot be leaves the result untouched.
        texts = [(block, _rewritten(block["text"], errors)) for block, _ in mirrors]
        own = Delivery([], context)  # a JSON text not the payload: its context alone
        for block, payload in others:
            text = _mended(block, own) if foreign_context(payload, context) else None
            if text is not None:
                texts.append((block, text))
        if isinstance(structured, dict):
            inject_payload(structured, errors)
        for block, text in texts:
            block["text"] = text
        if isinstance(errors, Delivery):
            errors.replaced += own.replaced
    except Untouched as exc:
        payloads = [structured, *(payload for _, payload in mirrors + others)]
        foreign = any(foreign_context(payload, context) for payload in payloads)
        raise unwritten(exc, errors, mended, lambda: foreign) from exc


def _mended(block: dict[str, Any], own: Delivery) -> str | None:
    """A JSON text that is not the payload with its own context, or None (as it came) if it
    cannot be written: the payload is written all the same."""
    mended = own.replaced
    try:
        return _rewritten(block["text"], own)
    except Untouched:
        own.replaced = mended
        return None


def _rewritten(text: str, errors: list[dict[str, Any]]) -> str:
    """The JSON ``text`` with ``errors`` delivered, written as it was (pretty or compact)."""
    payload = parse(text, shadows=compares(errors))  # exactly, since it is rewritten
    inject_payload(payload, errors)
    return dumps_text(payload, indent=2 if "\n" in text else None, ensure_ascii=False)


def _json_texts(result: dict[str, Any], shadows: bool) -> list[tuple[dict[str, Any], Any]]:
    """The text blocks holding a JSON object, each with its object read leniently."""
    content = result.get("content")
    found = []
    for block in content if isinstance(content, list) else []:
        if not (isinstance(block, dict) and block.get("type") == "text"):
            continue
        text = block.get("text")
        if not isinstance(text, str) or not text.lstrip(" \t\r\n\ufeff").startswith("{"):
            continue
        try:
            found.append((block, loads(text, shadows=shadows)))
        except Untouched:
            continue
    return found


def _without_nulls(payload: Any) -> Any:
    """A payload less its null members (a mirror may have them or not)."""
    if isinstance(payload, dict):
        return {key: value for key, value in payload.items() if value is not None}
    return payload
