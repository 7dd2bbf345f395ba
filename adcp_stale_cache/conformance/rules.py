"""The spec's rules for ``STALE_RESPONSE``, as checks over what a seller answered (no I/O)."""

from __future__ import annotations

import functools
import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..core.advisory import STALE_RESPONSE
from .wire import Reply

#: The payload path each AdCP tool's advisory names, when the advisory names none.
DEFAULT_FIELDS = {
    "get_products": "products",
    "list_products": "products",
    "list_creative_formats": "formats",
}

# What must never reach a buyer in an advisory's text.
_LEAKS = [
    ("a stack trace", re.compile(r"Traceback \(most recent call last\)|File \"[^\"]+\", line \d+")),
    ("an IP address", re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}\b")),
    (
        "an internal hostname",
        re.compile(
            r"\b(?:localhost|[a-z0-9-]+(?:\.[a-z0-9-]+)*\.(?:internal|local|lan|corp|svc|cluster))\b",
            re.IGNORECASE,
        ),
    ),
    (
        "a credential",
        re.compile(
            r"\b(?:bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}|"
            r"(?:api[_-]?key|token|password|secret)\s*[=:]",
            re.IGNORECASE,
        ),
    ),
]


# userinfo (user:password@), or a query or fragment at all: a public URL carries neither.
_URL_CREDENTIAL = re.compile(r"^[a-z][a-z0-9+.-]*://[^/?#]*@|[?#]", re.IGNORECASE)


@dataclass(frozen=True)
class Result:
    """One rule's verdict: ``passed`` True, False, or None when it could not apply; an
    ``advisory`` one (as the storyboards grade it) never fails the seller."""

    rule: str
    passed: bool | None
    seen: str
    severity: Literal["required", "advisory"] = "required"

    @property
    def blocking(self) -> bool:
        """True when the rule failed and its severity makes the seller fail."""
        return self.passed is False and self.severity == "required"

    def line(self) -> str:
        """``PASS rule: what was seen`` (or ``FAIL``, ``SKIP``, ``ADVISORY``)."""
        verdict = {True: "PASS", False: "FAIL", None: "SKIP"}[self.passed]
        if self.passed is False and not self.blocking:
            verdict = "ADVISORY"
        return f"{verdict} {self.rule}: {self.seen}"


def stale_advisories(payload: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The ``STALE_RESPONSE`` entries of a payload's ``errors[]``."""
    errors = payload.get("errors") if isinstance(payload, dict) else None
    if not isinstance(errors, list):  # absent, null, or a seller's odd shape: none here
        return []
    return [e for e in errors if isinstance(e, dict) and e.get("code") == STALE_RESPONSE]


def healthy(reply: Reply, when: str, no_errors_in: str | None = None) -> list[Result]:
    """A call with every upstream healthy: transport success, a payload, no advisory (and
    no ``errors`` member at all for ``no_errors_in``)."""
    advisories = stale_advisories(reply.payload)
    results = [
        Result(
            f"healthy_call ({when})",
            reply.transport_ok and reply.payload is not None,
            reply.transport + ("" if reply.payload is not None else ", no payload"),
        ),
        Result(
            f"no_advisory_when_healthy ({when})",
            not advisories,
            f"{len(advisories)} STALE_RESPONSE in errors[]",
        ),
    ]
    if no_errors_in is not None:
        results.append(no_errors_member(reply, no_errors_in, when))
    return results


def stale_without_errors(reply: Reply, tool: str) -> list[Result]:
    """The answer served while the upstream was forced down, for a tool whose
    response has no ``errors`` member: a success with its payload and no ``STALE_RESPONSE``."""
    payload = reply.payload if isinstance(reply.payload, dict) else {}
    field = DEFAULT_FIELDS.get(tool)
    items = payload.get(field) if field else payload
    return [
        Result("transport_success", reply.transport_ok, reply.transport),
        Result(
            "payload_present",
            bool(items) and payload.get("adcp_error") is None,
            f"{field or 'payload'}: {_count(items)}",
        ),
        no_errors_member(reply, tool, "stale"),
    ]


def stale(
    reply: Reply,
    *,
    tool: str,
    upstreams: list[str],
    cache_age: int,
    secrets: list[str],
    validators: Any,
) -> list[Result]:
    """The answer served while ``upstreams`` were forced down with ``cache_age``."""
    payload = reply.payload or {}
    advisories = stale_advisories(payload)
    results = [Result("transport_success", reply.transport_ok, reply.transport)]
    field = next((a.get("field") for a in advisories if a.get("field")), None)
    field = field or DEFAULT_FIELDS.get(tool)
    items = payload.get(str(field).split(".")[0].split("[")[0]) if field else None
    results.append(
        Result(
            "payload_present",
            bool(items) and payload.get("adcp_error") is None,
            f"{field or 'payload'}: {_count(items)}",
        )
    )
    names = [_upstream_name(a) for a in advisories]
    counts = Counter(names)
    expected = upstreams or None
    if expected:
        ok = all(counts.get(name) == 1 for name in expected) and len(advisories) == len(expected)
        wanted = ", ".join(f"one for {name}" for name in expected)
    else:
        ok, wanted = len(advisories) == 1, "exactly one"
    seen = f"{len(advisories)} STALE_RESPONSE ({dict(counts)}); wanted {wanted}"
    results.append(Result("one_advisory_per_upstream", ok, seen))
    envelope = payload.get("adcp_error")
    seen = "no adcp_error" if envelope is None else f"adcp_error: {envelope}"
    results.append(Result("not_in_adcp_error", envelope is None, seen))
    if not advisories:
        return [*results, Result("advisory_shape", False, "no STALE_RESPONSE to check")]
    recoveries = [a.get("recovery") for a in advisories]
    results.append(
        Result(
            "recovery_transient",
            all(r == "transient" for r in recoveries),
            f"recovery: {recoveries}",
        )
    )
    fields = [a.get("field") for a in advisories]
    results.append(
        Result(
            "field_named",
            all(isinstance(f, str) and f for f in fields) and bool(items),
            f"field: {fields}",
        )
    )
    ages = [_details(a).get("cache_age_seconds") for a in advisories]
    results.append(
        Result(
            "exact_age",
            all(age == cache_age and _whole(age) for age in ages),
            f"cache_age_seconds: {ages}, forced {cache_age}",
        )
    )
    targets = [_details(a).get("freshness_target_seconds") for a in advisories]
    past = all(
        t is None or (_whole(a) and _whole(t) and a >= t)
        for a, t in zip(ages, targets, strict=True)
    )
    seen = f"cache_age_seconds {ages}, freshness_target_seconds {targets}"
    results.append(Result("age_past_target", past, seen))
    named = all(name not in ("None", "") for name in names)
    if expected:
        named = named and set(names) == set(expected)
    results.append(Result("upstream_named", named, f"details.upstream.name: {names}"))
    results.append(_schema(advisories, validators))
    results.append(_leaks(advisories, secrets))
    return results


def official_validators() -> tuple[str, Any, Any] | str:
    """Validators of ``core/error.json`` and ``error-details/stale-response.json``
    from the newest schemas the installed ``adcp`` bundles; or why there are none."""
    try:
        import adcp
        import jsonschema  # type: ignore[import-untyped]
    except ImportError as exc:
        return f"needs {exc.name}: pip install 'adcp-stale-cache[check]'"
    newest = _newest_schemas("error-details/stale-response.json")
    if newest is None:
        return "the installed adcp package bundles no stale-response schema"
    checker = jsonschema.FormatChecker()

    def load(path: str) -> Any:
        schema = json.loads((newest / path).read_text())
        return jsonschema.Draft7Validator(schema, format_checker=checker)

    return (
        f"AdCP {newest.name} (adcp {getattr(adcp, '__version__', '?')})",
        load("core/error.json"),
        load("error-details/stale-response.json"),
    )


def _newest_schemas(pattern: str) -> Path | None:
    """The newest release the ``adcp`` package bundles with a file matching ``pattern``."""
    try:
        import adcp
    except ImportError:
        return None
    root = Path(adcp.__file__).parent / "_schemas"
    found = [d for d in root.glob("*") if next(d.glob(pattern), None) is not None]
    if not found:
        return None
    return max(found, key=lambda d: tuple(int(p) for p in re.findall(r"\d+", d.name)))


@functools.cache
def response_schema(tool: str) -> dict[str, Any] | None:
    """The response schema of ``tool`` in the newest release ``adcp`` bundles, or None."""
    pattern = f"bundled/*/{tool.replace('_', '-')}-response.json"
    newest = _newest_schemas(pattern)
    if newest is None:
        return None
    schema: dict[str, Any] = json.loads(next(newest.glob(pattern)).read_text())
    return schema


def has_errors_member(tool: str) -> bool:
    """Whether ``tool``'s answer may carry ``errors`` (its schema names it or allows
    extra members; an unbundled schema may)."""
    schema = response_schema(tool)
    if schema is None:
        return True
    named = "errors" in schema.get("properties", {})
    return named or schema.get("additionalProperties") is not False


def no_errors_member(reply: Reply, tool: str, when: str) -> Result:
    """An answer of a tool whose response has no ``errors`` member carries none,
    not even an empty one (it would not be schema-valid)."""
    payload = reply.payload if isinstance(reply.payload, dict) else {}
    seen = f"{tool}'s response has no errors member and allows no extra one; "
    if "errors" in payload:
        seen += f"errors: {json.dumps(payload['errors'], default=str)[:200]}"
    else:
        seen += "this answer has none"
    return Result(f"no_errors_member ({when})", "errors" not in payload, seen)


def failure_stays_failure(reply: Reply, upstreams: list[str]) -> Result:
    """With nothing cached and ``upstreams`` down, the failure stays a failure:
    no ``STALE_RESPONSE``, and a transport failure or ``SERVICE_UNAVAILABLE`` for each upstream."""
    payload = reply.payload if isinstance(reply.payload, dict) else {}
    advisories = stale_advisories(payload)
    envelope = payload.get("adcp_error")
    code = envelope.get("code") if isinstance(envelope, dict) else None
    raw = payload.get("errors")
    errors = raw if isinstance(raw, list) else []
    unavailable = {
        _upstream_name(e)
        for e in errors
        if isinstance(e, dict) and e.get("code") == "SERVICE_UNAVAILABLE"
    }
    said = (
        not reply.transport_ok
        or code == "SERVICE_UNAVAILABLE"
        or bool(errors and unavailable and (not upstreams or set(upstreams) <= unavailable))
    )
    seen = (
        f"{reply.transport}, adcp_error: {code}, SERVICE_UNAVAILABLE for "
        f"{sorted(unavailable)}, {len(advisories)} STALE_RESPONSE"
    )
    return Result("nothing_when_nothing_cached", not advisories and said, seen)


def _details(error: dict[str, Any]) -> dict[str, Any]:
    details = error.get("details")
    return details if isinstance(details, dict) else {}


def _upstream_name(error: dict[str, Any]) -> str:
    upstream = _details(error).get("upstream")
    return str(upstream.get("name")) if isinstance(upstream, dict) else "None"


def _schema(advisories: list[dict[str, Any]], validators: Any) -> Result:
    if isinstance(validators, str):
        return Result("schema_valid", False, f"cannot validate: {validators}")
    source, error, details = validators
    problems = []
    for advisory in advisories:
        problems += [e.message for e in error.iter_errors(advisory)]
        problems += [e.message for e in details.iter_errors(advisory.get("details"))]
    seen = f"valid against {source}" if not problems else f"{source}: {problems[:3]}"
    return Result("schema_valid", not problems, seen)


def _leaks(advisories: list[dict[str, Any]], secrets: list[str]) -> Result:
    found = []
    for advisory in advisories:
        # The upstream's own URL is public (its host may be an address): read for credentials.
        upstream = _details(advisory).get("upstream")
        url = upstream.get("url") if isinstance(upstream, dict) else None
        rest = json.loads(json.dumps(advisory, default=str))
        if isinstance(url, str):
            rest["details"]["upstream"]["url"] = ""
        text = json.dumps(rest, ensure_ascii=False)
        found += [what for what, pattern in _LEAKS if pattern.search(text)]
        found += [f"a credential under {key!r}" for key in _credential_keys(rest)]
        if isinstance(url, str) and _URL_CREDENTIAL.search(url):
            found.append("a credential in details.upstream.url")
        found += [
            "the credential sent"
            for secret in secrets
            if secret and secret in json.dumps(advisory, default=str, ensure_ascii=False)
        ]
    return Result(
        "no_leaks",
        not found,
        "no credential, hostname or stack trace in the text"
        if not found
        else f"found {sorted(set(found))}",
    )


_CREDENTIAL_KEY = re.compile(
    r"pass(word|wd)?|secret|token|api[_-]?key|authorization|credential", re.IGNORECASE
)


def _credential_keys(value: Any) -> list[str]:
    """Keys anywhere in ``value`` that name a credential and hold one (the text
    patterns never see JSON keys: a quote sits between key and colon)."""
    if isinstance(value, dict):
        return [
            *(str(k) for k, v in value.items() if _CREDENTIAL_KEY.search(str(k)) and v),
            *(found for v in value.values() for found in _credential_keys(v)),
        ]
    if isinstance(value, list):
        return [found for v in value for found in _credential_keys(v)]
    return []


def _whole(value: Any) -> bool:
    """A whole number of seconds as JSON Schema reads it (120.0 is; true is not): A2A may
    send doubles."""
    if isinstance(value, float):
        return value.is_integer()
    return isinstance(value, int) and not isinstance(value, bool)


def _count(items: Any) -> str:
    if isinstance(items, list):
        return f"{len(items)} items"
    return "missing" if items is None else "present"
