"""Issue 22's acceptance, with real processes on loopback: two example sellers on one
redis-server, a buyer thread per principal asking either seller, and an operator that, at
random for a minute, changes a principal's data upstream and then purges (soft, hard) or
refreshes it through either seller's operator API, and cuts the upstream (503s, a hang past
the deadline, the process killed and restarted). Every answer is checked as it comes:

- a principal only sees its own data;
- an answer without ``STALE_RESPONSE``, to a request sent after an acknowledged purge (plus
  the stated propagation bound), never carries data superseded before the purge, and is
  younger than its target;
- after an acknowledged hard purge, no answer at all carries the data it forgot;
- every advisory is schema-valid, one per upstream, its age at least its stated target, at
  most target + max-stale, and never below the data's real age.

``STEERING_SECONDS`` (default 60) sets how long the operator works.
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from adcp_stale_cache.demo.processes import App, free_port, wait_for_port

from ..redis_server import RedisServer
from ..servers import START_SECONDS

pytestmark = pytest.mark.e2e
TOKEN = "operator-token-0123456789"
OPERATOR = {"Authorization": f"Bearer {TOKEN}"}
PRINCIPALS = {"alpha": "Bearer alpha", "beta": "Bearer beta", "public": None}
TARGET, MAX_STALE, TIMEOUT = 2, 600, 1.0
BOUND = 0.3  # a purge reaches every process within 50 ms (check_seconds); room for a busy CI


class Inventory:
    """The steered upstream (tests/versioned_inventory.py) in a process of its own."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.versions = dict.fromkeys(PRINCIPALS, 0)
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        root = Path(__file__).resolve().parents[2]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.versioned_inventory", str(self.port),
             json.dumps(self.versions)], cwd=root, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        wait_for_port(self.port, START_SECONDS, process=self.process)

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()

    def bump(self, principal: str) -> int:
        self.versions[principal] += 1
        httpx.post(f"{self.url}/bump/{principal}", timeout=5).raise_for_status()
        return self.versions[principal]

    def mode(self, mode: str) -> None:
        httpx.post(f"{self.url}/mode/{mode}", timeout=5).raise_for_status()


@dataclass
class Model:
    """What the operator acknowledged: per principal, the last purge's (time, version), and
    the last hard purge's."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    purged: dict[str, tuple[float, int]] = field(default_factory=dict)
    hard: dict[str, tuple[float, int]] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    answers: dict[str, int] = field(default_factory=dict)

    def count(self, kind: str) -> None:
        with self.lock:
            self.answers[kind] = self.answers.get(kind, 0) + 1

    def violated(self, text: str) -> None:
        with self.lock:
            self.violations.append(text)


def check(model: Model, principal: str, sent: float, status: int, body: Any,
          valid: Any) -> None:  # fmt: skip
    """The invariants, on one answer (``sent``: when the request left)."""
    now = time.time()
    if status != 200:
        model.count(f"failed {status}")
        return
    errors = body.get("errors") or []
    stale = [e for e in errors if e.get("code") == "STALE_RESPONSE"]
    names = [e["details"]["upstream"]["name"] for e in stale]
    if len(names) != len(set(names)):
        model.violated(f"two advisories for one upstream: {names}")
    read = [json.loads(p["description"]) for p in body["products"]]
    if {r["who"] for r in read} != {principal}:
        model.violated(f"{principal} was served {[r['who'] for r in read]}'s data")
        return
    version, age = read[0]["v"], now - read[0]["t"]
    with model.lock:
        purged, hard = model.purged.get(principal), model.hard.get(principal)
    if not stale:
        model.count("fresh")
        if age >= TARGET + BOUND:
            model.violated(f"{principal}: {age:.2f}s old data served as fresh")
        if purged is not None and sent > purged[0] + BOUND and version < purged[1]:
            model.violated(f"{principal}: fresh v{version}, superseded by v{purged[1]} before "
                           f"a purge acknowledged {sent - purged[0]:.2f}s before the request")  # fmt: skip
    else:
        model.count("stale")
    if hard is not None and sent > hard[0] + BOUND and version < hard[1]:
        model.violated(f"{principal}: v{version} served after a hard purge forgot it")
    for advisory in stale:
        try:
            valid(advisory)
        except AssertionError as exc:
            model.violated(f"invalid advisory: {exc}")
        details = advisory["details"]
        stated, target = details["cache_age_seconds"], details["freshness_target_seconds"]
        if not target <= stated <= target + MAX_STALE:
            model.violated(f"advisory age {stated} outside [{target}, {target + MAX_STALE}]")
        if stated < math.floor(age) - 1:  # whole seconds, two clocks of one host
            model.violated(f"age understated: {stated} for {age:.2f}s")


def test_an_operator_at_random_for_a_minute_never_breaks_an_invariant(
    assert_valid_advisory: Any,
) -> None:
    pytest.importorskip("redis.asyncio", reason="the redis extra is needed")
    seconds = float(os.environ.get("STEERING_SECONDS", "60"))
    server = RedisServer().start()
    inventory = Inventory()
    inventory.start()
    common = ("--inventory-service", inventory.url, "--freshness-target", str(TARGET),
              "--max-stale", str(MAX_STALE), "--upstream-timeout", str(TIMEOUT),
              "--redis", server.url, "--admin-token", TOKEN)  # fmt: skip
    sellers = [App("seller", free_port(), *common, quiet=True) for _ in range(2)]
    model, stop = Model(), threading.Event()
    rng = random.Random(int(os.environ.get("STEERING_SEED", "22")))
    try:
        for seller in sellers:
            seller.start()
        for seller in sellers:
            seller.wait(START_SECONDS)

        def buyer(principal: str) -> None:
            auth = PRINCIPALS[principal]
            headers = {"authorization": auth} if auth else {}
            with httpx.Client(timeout=10) as client:
                while not stop.is_set():
                    seller = random.choice(sellers)
                    sent = time.time()
                    answer = client.post(f"{seller.url}/api/get_products", headers=headers,
                                         json={"brief": "news"})  # fmt: skip
                    check(model, principal, sent, answer.status_code, answer.json(),
                          assert_valid_advisory)  # fmt: skip
                    time.sleep(0.01)

        buyers = [threading.Thread(target=buyer, args=(p,)) for p in PRINCIPALS]
        for thread in buyers:
            thread.start()
        actions: dict[str, int] = {}
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            time.sleep(rng.uniform(0.1, 0.6))
            action = rng.choice(["purge", "hard", "refresh", "fail", "slow", "kill", "heal",
                                 "heal"])  # fmt: skip
            actions[action] = actions.get(action, 0) + 1
            if action in ("purge", "hard", "refresh"):
                principal = rng.choice(sorted(PRINCIPALS))
                version = (
                    inventory.bump(principal)
                    if inventory.process.poll() is None
                    # type: ignore[union-attr]
                    else (inventory.versions[principal])
                )
                seller = rng.choice(sellers)
                endpoint = "refresh" if action == "refresh" else "invalidate"
                body: dict[str, Any] = {"upstream": "inventory-service"}
                if action != "refresh":
                    body["soft"] = action == "purge"
                answer = httpx.post(f"{seller.url}/admin/api/{endpoint}", headers=OPERATOR,
                                    json=body, timeout=10)  # fmt: skip
                if answer.status_code == 200:  # acknowledged: the model holds it from now
                    acknowledged = time.time()
                    with model.lock:
                        for name in PRINCIPALS:  # by upstream: every principal's entries
                            v = version if name == principal else inventory.versions[name]
                            model.purged[name] = (acknowledged, v)
                            if action == "hard":
                                model.hard[name] = (acknowledged, v)
            elif action in ("fail", "slow"):
                if inventory.process.poll() is None:  # type: ignore[union-attr]
                    inventory.mode(action)
            elif action == "kill":
                inventory.kill()
            elif inventory.process.poll() is not None:  # type: ignore[union-attr]
                inventory.start()  # heal: up again, with the versions it had
            else:
                inventory.mode("ok")
        stop.set()
        for thread in buyers:
            thread.join(timeout=30)
    finally:
        stop.set()
        for seller in sellers:
            seller.stop()
        inventory.kill()
        server.kill()
    print(f"steering: actions {actions}, answers {model.answers}")
    assert model.violations == [], model.violations[:10]
    assert model.answers.get("fresh", 0) > 100 and model.answers.get("stale", 0) > 10
    assert sum(actions.get(a, 0) for a in ("purge", "hard", "refresh")) >= 20
