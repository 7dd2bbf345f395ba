"""The conformance kit (issue 16): ``check_seller`` and ``adcp-stale-cache check`` pass the
example seller and fail deliberately broken sellers on the right rule; the buyer reader."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from adcp_stale_cache.conformance import check_seller
from adcp_stale_cache.demo.processes import App, free_port
from adcp_stale_cache.demo.seller import create_seller_app

from ..servers import START_SECONDS, serve

pytestmark = pytest.mark.e2e
pytest.importorskip("jsonschema", reason="the check extra is needed")


@pytest.fixture(scope="module")
def upstreams() -> Iterator[dict[str, App]]:
    apps = {
        "inventory": App("inventory-service", free_port(), quiet=True),
        "a": App("creative-agent", free_port(), "--name", "a", quiet=True),
        "b": App("creative-agent", free_port(), "--name", "b", quiet=True),
    }
    try:
        for app in apps.values():
            app.start()
        for app in apps.values():
            app.wait(START_SECONDS)
        yield apps
    finally:
        for app in apps.values():
            app.stop()


def seller(upstreams: dict[str, App], *, test_controller: bool = True) -> Any:
    agents = {name: f"{upstreams[name].url}/mcp" for name in ("a", "b")}
    return create_seller_app(creative_agents=agents, inventory_url=upstreams["inventory"].url,
                             test_controller=test_controller)  # fmt: skip


def failed(report: Any) -> set[str]:
    return {result.rule for result in report.failed()}


@pytest.mark.parametrize("transport", ["mcp", "a2a"])
async def test_the_example_seller_passes(upstreams: dict[str, App], transport: str) -> None:
    report = await check_seller(seller(upstreams), transport=transport)
    assert report.passed, report.text()
    rules = {result.rule for result in report.results if result.passed}
    assert {"exact_age", "recovery_transient", "schema_valid", "no_leaks",
            "one_advisory_per_upstream", "not_in_adcp_error",
            "nothing_when_nothing_cached"} <= rules  # fmt: skip
    # AdCP's own caching contract, as the example seller declares it.
    assert {"supported_versions_advertised", "adcp_version_echoed", "wholesale_bootstrap",
            "unchanged_probe", "unchanged_echoes_token_and_scope", "context_echoed",
            "lone_pricing_token_refused", "overlay_is_account_scoped", "no_token_across_scopes",
            "stale_probe_is_full", "mismatched_token_full",
            "adcp_version_echoed (get_products)"} <= rules  # fmt: skip
    two = await check_seller(seller(upstreams), transport=transport,
                             tool="list_creative_formats", upstreams=["a", "b"])  # fmt: skip
    assert two.passed, two.text()


async def test_a_seller_without_the_controller_fails_never_passes(
    upstreams: dict[str, App],
) -> None:
    report = await check_seller(seller(upstreams, test_controller=False), transport="a2a")
    assert not report.passed and failed(report) == {"controller"}
    assert "lists no comply_test_controller" in report.text()


class Rewriting:
    """A broken seller: the example seller with each A2A payload rewritten by ``change``."""

    def __init__(self, app: Any, change: Callable[[dict[str, Any]], bool | None]) -> None:
        self.app, self.change = app, change

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/":
            return await self.app(scope, receive, send)
        messages: list[dict[str, Any]] = []

        async def keep(message: dict[str, Any]) -> None:
            messages.append(message)

        await self.app(scope, receive, keep)
        start, body = messages[0], b"".join(m.get("body", b"") for m in messages[1:])
        answer = json.loads(body)
        result = answer.get("result") or {}
        for artifact in result.get("artifacts") or []:
            for part in artifact["parts"]:
                if isinstance(part.get("data"), dict) and self.change(part["data"]):
                    result["status"]["state"] = "completed"  # and the task "succeeded" too
        body = json.dumps(answer).encode()
        headers = [(k, v) for k, v in start["headers"] if k != b"content-length"]
        await send({**start, "headers": [*headers, (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


FAKE_ADVISORY = {
    "code": "STALE_RESPONSE",
    "message": "cached",
    "recovery": "transient",
    "field": "products",
    "details": {"served_from_cache": True, "cache_age_seconds": 1},
}


def stale_ones(payload: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in payload.get("errors", []) if e.get("code") == "STALE_RESPONSE"]


def wrong_recovery(payload: dict[str, Any]) -> None:
    for error in stale_ones(payload):
        error["recovery"] = "correctable"


def advisory_on_fresh_hits(payload: dict[str, Any]) -> None:
    if "products" in payload and not stale_ones(payload):
        payload.setdefault("errors", []).append(dict(FAKE_ADVISORY))


def aggregated(payload: dict[str, Any]) -> None:
    found = stale_ones(payload)
    if len(found) > 1:
        found[0]["details"]["upstream"] = {"name": "a, b"}
        payload["errors"] = [e for e in payload["errors"] if e not in found[1:]]


def advisory_with_nothing_cached(payload: dict[str, Any]) -> None:
    if "adcp_error" in payload:  # the failure, dressed as a stale answer
        payload.setdefault("errors", []).append(dict(FAKE_ADVISORY))


def promoted(payload: dict[str, Any]) -> None:
    found = stale_ones(payload)
    if found:
        payload["adcp_error"] = found[0]
        payload["errors"] = [e for e in payload["errors"] if e not in found]


def wrong_age(payload: dict[str, Any]) -> None:
    for error in stale_ones(payload):
        error["details"]["cache_age_seconds"] += 1


def made_up_payload(payload: dict[str, Any]) -> bool:
    if not payload.get("adcp_error"):
        return False
    payload.pop("adcp_error")  # nothing cached, upstream down: a success, invented data
    payload["errors"] = []
    payload["products"] = [{"product_id": "made-up"}]
    return True


def leaky_details(payload: dict[str, Any]) -> None:
    for error in stale_ones(payload):
        error["details"]["debug"] = "Bearer abcdefghijklmnop at 10.1.2.3"


def password_in_url(payload: dict[str, Any]) -> None:
    for error in stale_ones(payload):
        error["details"]["upstream"]["url"] = "https://user:hunter2@inventory.example/api"


def global_token(payload: dict[str, Any]) -> None:
    if payload.get("cache_scope") == "account":  # any token short-circuits the overlay
        payload.pop("products", None)
        payload["unchanged"] = True


def unchanged_while_stale(payload: dict[str, Any]) -> None:
    if "wholesale_feed_version" in payload and stale_ones(payload):
        payload.pop("products", None)
        payload.pop("errors", None)
        payload["unchanged"] = True


def products_with_unchanged(payload: dict[str, Any]) -> None:
    if payload.get("unchanged") is True:
        payload["products"] = [{"product_id": "p1"}]


def context_of_another(payload: dict[str, Any]) -> None:
    if "wholesale_feed_version" in payload:
        payload["context"] = {"correlation_id": "someone-else"}


def no_release_echo(payload: dict[str, Any]) -> None:
    payload.pop("adcp_version", None)


def no_release_echo_but_capabilities(payload: dict[str, Any]) -> None:
    if "products" in payload:
        payload.pop("adcp_version", None)


def stamps_the_buyers_token(payload: dict[str, Any]) -> None:
    """Answers the mismatched probe in full, but with the token the buyer sent (the kit's
    probe sends the bootstrap token with ``-not-current``: the rewriter reads it off the
    answer's context)."""
    context = (payload.get("context") or {}).get("correlation_id", "")
    token = payload.get("wholesale_feed_version")
    if context.endswith("wholesale-mismatch") and isinstance(token, str):
        payload["wholesale_feed_version"] = f"{token}-not-current"


def every_probe_unchanged(payload: dict[str, Any]) -> None:
    if "wholesale_feed_version" in payload and not stale_ones(payload):
        payload.pop("products", None)  # the seller never compares tokens
        payload["unchanged"] = True


def target_past_age(payload: dict[str, Any]) -> None:
    for error in stale_ones(payload):
        details = error["details"]
        details["freshness_target_seconds"] = details["cache_age_seconds"] + 10


@pytest.mark.parametrize(
    ("change", "options", "rule"),
    [
        (made_up_payload, {}, "nothing_when_nothing_cached"),
        (leaky_details, {}, "no_leaks"),
        (password_in_url, {}, "no_leaks"),
        (target_past_age, {}, "age_past_target"),
        (wrong_recovery, {}, "recovery_transient"),
        (advisory_on_fresh_hits, {}, "no_advisory_when_healthy (before)"),
        (aggregated, {"tool": "list_creative_formats", "upstreams": ["a", "b"]},
         "one_advisory_per_upstream"),
        (promoted, {}, "not_in_adcp_error"),
        (wrong_age, {}, "exact_age"),
        (advisory_with_nothing_cached, {}, "nothing_when_nothing_cached"),
        (global_token, {}, "no_token_across_scopes"),
        (unchanged_while_stale, {}, "stale_probe_is_full"),
        (products_with_unchanged, {}, "unchanged_probe"),
        (context_of_another, {}, "context_echoed"),
        (no_release_echo, {}, "adcp_version_echoed"),
        (no_release_echo_but_capabilities, {}, "adcp_version_echoed (get_products)"),
        (every_probe_unchanged, {}, "mismatched_token_full"),
        (stamps_the_buyers_token, {}, "mismatched_token_full"),
    ],
    ids=["made-up-payload", "leaky-details", "password-in-url", "target-past-age", "wrong-recovery", "advisory-on-fresh-hit", "aggregated", "promoted", "wrong-age",
         "advisory-with-nothing-cached", "global-token", "unchanged-while-stale",
         "products-with-unchanged", "context-of-another", "no-release-echo",
         "no-release-echo-on-products", "every-probe-unchanged", "stamps-the-buyers-token"],
)  # fmt: skip
async def test_broken_sellers_fail_on_the_right_rule(
    upstreams: dict[str, App], change: Any, options: dict[str, Any], rule: str
) -> None:
    report = await check_seller(Rewriting(seller(upstreams), change), transport="a2a", **options)
    assert not report.passed
    assert rule in failed(report), report.text()


def test_the_command_line_passes_the_example_seller_and_names_what_a_proxy_broke(
    upstreams: dict[str, App],
) -> None:
    """Acceptance: real processes, the console script, a proxy rewriting ``recovery``."""
    flags = ("--inventory-service", upstreams["inventory"].url, "--freshness-target", "60")
    with_controller = App("seller", free_port(), *flags, "--test-controller", quiet=True)
    without = App("seller", free_port(), *flags, quiet=True)

    def check(url: str, transport: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "adcp_stale_cache", "check", url,
                   "--transport", transport]  # fmt: skip
        return subprocess.run(command, capture_output=True, text=True, timeout=120)

    try:
        for app in (with_controller, without):
            app.start()
        for app in (with_controller, without):
            app.wait(START_SECONDS)
        for transport, path in (("mcp", "/mcp"), ("a2a", "/")):
            done = check(f"{with_controller.url}{path}", transport)
            assert done.returncode == 0, done.stdout + done.stderr
            assert "FAIL" not in done.stdout and f"over {transport}: conformant" in done.stdout
            refused = check(f"{without.url}{path}", transport)
            assert refused.returncode != 0 and "FAIL controller:" in refused.stdout
        with serve(recovery_rewriting_proxy(with_controller.url)) as proxy:
            for transport, path in (("mcp", "/mcp"), ("a2a", "/")):
                broken = check(f"{proxy}{path}", transport)
                assert broken.returncode != 0
                assert "FAIL recovery_transient: recovery: ['correctable']" in broken.stdout
    finally:
        for app in (with_controller, without):
            app.stop()


def recovery_rewriting_proxy(target: str) -> Any:
    """A reverse proxy that rewrites ``"recovery": "transient"`` to ``"correctable"``."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    client = httpx.AsyncClient(base_url=target, timeout=30)
    hop = {"content-length", "transfer-encoding", "connection", "host", "content-encoding"}

    async def forward(request: Request) -> Response:
        headers = {k: v for k, v in request.headers.items() if k not in hop}
        upstream = await client.request(request.method, request.url.path,
                                        content=await request.body(), headers=headers)  # fmt: skip
        body = upstream.content.replace(b'\\"recovery\\": \\"transient\\"',
                                        b'\\"recovery\\": \\"correctable\\"')  # fmt: skip
        body = body.replace(b'"recovery": "transient"', b'"recovery": "correctable"')
        body = body.replace(b'"recovery":"transient"', b'"recovery":"correctable"')
        kept = {k: v for k, v in upstream.headers.items() if k not in hop}
        return Response(body, status_code=upstream.status_code, headers=kept)

    methods = ["GET", "POST", "DELETE"]
    return Starlette(routes=[Route("/{path:path}", forward, methods=methods)])


async def test_the_pytest_fixture_fails_a_test_with_the_report(upstreams: dict[str, App]) -> None:
    from adcp_stale_cache.conformance.pytest_plugin import assert_conformant

    report = await assert_conformant(seller(upstreams), transport="mcp")
    assert report.passed
    with pytest.raises(pytest.fail.Exception, match="FAIL exact_age"):
        await assert_conformant(Rewriting(seller(upstreams), wrong_age), transport="a2a")


ODD_BODIES = [
    ("application/json", b"[1, 2]"),
    ("application/json", b'{"jsonrpc": "2.0", "id": 1, "result": [1, 2]}'),
    ("application/json", b'{"jsonrpc": "2.0", "id": 1, "result": {"content": "x", "isError": 3}}'),
    ("text/event-stream", b"event: message\r\ndata: 5\r\n\r\n"),
    ("application/json", b'"just a string"'),
    # Found by the hostile review: errors that are no list, text nested past reading.
    (
        "application/json",
        b'{"jsonrpc": "2.0", "id": 1, "result": {"structuredContent":'
        b' {"formats": [], "errors": 5}}}',
    ),
    (
        "application/json",
        b'{"jsonrpc": "2.0", "id": 1, "result": {"structuredContent":'
        b' {"formats": [], "errors": true}}}',
    ),
    ("application/json", b"[" * 100_000),
    (
        "application/json",
        b'{"jsonrpc": "2.0", "id": 1, "result": {"status": "completed",'
        b' "artifacts": {"parts": 1}}}',
    ),
    (
        "application/json",
        b'{"jsonrpc": "2.0", "id": 1, "result": {"status": {"state": "completed"},'
        b' "artifacts": ["x", {"parts": ["y", {"data": {"errors": [5, {"code": "STALE_RESPONSE",'
        b' "details": "odd"}, {"code": "STALE_RESPONSE", "details": {"upstream": 7}}]}}]}]}}',
    ),
]


@pytest.mark.parametrize(("kind", "body"), ODD_BODIES)
@pytest.mark.parametrize("transport", ["mcp", "a2a"])
async def test_odd_answers_are_fail_lines_never_a_crash(
    transport: str, kind: str, body: bytes
) -> None:
    """Issue 22, item 11: any seller answer gives FAIL lines with what was seen."""

    async def odd_seller(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        headers = [(b"content-type", kind.encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    report = await check_seller(odd_seller, transport=transport)
    assert not report.passed
    assert report.text()  # every line readable


def test_no_leaks_reads_credentials_under_json_keys_and_past_escapes() -> None:
    """Found by the hostile review of issue 22: ``password=`` never matched a JSON key (a
    quote sits between key and colon), a non-ASCII credential was looked for in escaped
    text, and ``true`` passed for an age."""
    from adcp_stale_cache.conformance import rules
    from adcp_stale_cache.conformance.wire import Reply

    def advisory(**details: Any) -> dict[str, Any]:
        upstream = {"name": "u", "url": "https://u.example/"}
        return {"code": "STALE_RESPONSE", "message": "m", "field": "products",
                "recovery": "transient", "details": {"upstream": upstream, **details}}  # fmt: skip

    for leaking in (advisory(original_error={"code": "X", "password": "hunter2-prod"}),
                    advisory(token="eyJhbGciOiJIUzI1NiJ9.x"), advisory(api_key="sk_live_1")):  # fmt: skip
        assert rules._leaks([leaking], secrets=[]).passed is False
    assert rules._leaks([advisory(echoed="clé-secrète-42")], ["clé-secrète-42"]).passed is False
    clean = advisory(cache_age_seconds=120, freshness_target_seconds=60, token_count=0)
    assert rules._leaks([clean], secrets=["the-buyer-token"]).passed is True
    boolean = advisory(cache_age_seconds=True, freshness_target_seconds=True)
    reply = Reply(True, "HTTP 200", {"products": [1], "errors": [boolean]})
    verdicts = {r.rule: r.passed for r in rules.stale(reply, tool="get_products",
                upstreams=["u"], cache_age=1, secrets=[], validators="none")}  # fmt: skip
    assert verdicts["exact_age"] is False and verdicts["age_past_target"] is False


def refuses_force(payload: dict[str, Any]) -> None:
    """A controller that lists no force_upstream_unavailable (the seller forced it all the
    same: the kit must stop there, not read the stale path)."""
    if payload.get("current_state") == "unavailable":
        payload.clear()
        payload.update({"success": False, "error": "UNKNOWN_SCENARIO"})


async def test_a_controller_without_force_is_advisory_as_the_storyboard_grades_it(
    upstreams: dict[str, App],
) -> None:
    report = await check_seller(Rewriting(seller(upstreams), refuses_force), transport="a2a")
    assert report.passed, report.text()
    assert [r.rule for r in report.advisories()] == ["controller (default upstream)"]
    assert "ADVISORY controller (default upstream)" in report.text()
    assert "(1 advisory failed)" in report.text()
    assert report.to_json()["results"][-2]["severity"] == "advisory"


def refuses_params(payload: dict[str, Any]) -> None:
    if payload.get("current_state") == "unavailable":
        payload.clear()
        payload.update({"success": False, "error": "INVALID_PARAMS"})


async def test_a_controller_refusing_otherwise_still_fails(upstreams: dict[str, App]) -> None:
    report = await check_seller(Rewriting(seller(upstreams), refuses_params), transport="a2a")
    assert not report.passed and failed(report) == {"controller (default upstream)"}
