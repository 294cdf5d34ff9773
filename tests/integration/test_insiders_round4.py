"""Issue 44 against one live `gpuledger up --processes`, each insider with its own key file
(plain nats-py or the CLI), judged by what the operator then sees (docs/security.md,
"Checked live"): a reader key cannot take the consumer budget the services need, and the
refusals of one tenant are never filed under another's job."""

from __future__ import annotations

import asyncio
import json
import secrets

import nats
import pytest

from tests.integration import test_insiders
from tests.integration.test_insiders import wait

live = test_insiders.live  # the same `up --processes` fixture, one for this module

pytestmark = pytest.mark.integration


async def _fill_consumers(live, principal: str) -> tuple[int, list[str]]:
    """As `principal`: durable consumers under 40 names of its choosing, then under every
    name its permissions give it. Returns (how many the server created, its errors)."""
    from gpuledger.services.runtime.auth import client_options, consumer_names

    errors: list[str] = []

    async def error_cb(err: Exception) -> None:
        errors.append(str(err))

    options = client_options(live.creds(principal))
    nc = await nats.connect(live.url, allow_reconnect=False, error_cb=error_cb, **options)
    created = 0

    async def durable(name: str) -> bool:
        body = {
            "stream_name": "GPULEDGER",
            "config": {"name": name, "durable_name": name, "ack_policy": "explicit"},
        }
        try:
            reply = await nc.request(
                f"$JS.API.CONSUMER.CREATE.GPULEDGER.{name}", json.dumps(body).encode(), timeout=1
            )
        except (nats.errors.Error, TimeoutError):
            return False
        return "error" not in json.loads(reply.data)

    try:
        for _ in range(40):
            created += await durable("d" + secrets.token_hex(6))
        for name in consumer_names(options["inbox_prefix"]):
            created += await durable(name)
    finally:
        await nc.close()
    return created, errors


def _consumers(live) -> list[str]:
    from gpuledger.services.runtime.auth import client_options

    async def names() -> list[str]:
        nc = await nats.connect(live.url, **client_options(live.creds("admin")))
        try:
            return [c.name for c in await nc.jsm().consumers_info("GPULEDGER")]
        finally:
            await nc.close()

    return asyncio.run(names())


def test_live_consumer_exhaustion_a_reader_key_holds_only_its_own_few(live):
    """Given a node key and the auditor key, when each creates durable consumers under every
    name it can think of, then the server refuses every name but the identity's own eight,
    the stream holds at most those, and after every service is killed each one restarts,
    reads the log and a job submitted next is placed."""
    import os
    import signal

    from gpuledger.services.runtime.auth import CONSUMER_SLOTS

    before = set(_consumers(live))
    for principal in ("node:n1", "auditor"):
        created, errors = asyncio.run(_fill_consumers(live, principal))
        assert 0 < created <= CONSUMER_SLOTS, (principal, created)
        assert sum("permissions violation" in e.lower() for e in errors) >= 40, errors[:3]
    grown = set(_consumers(live)) - before
    assert len(grown) <= 2 * CONSUMER_SLOTS

    doc = json.loads(live.cli("status", "-o", "json").stdout)
    killed = {s["name"]: s["pid"] for s in doc["services"] if s.get("pid")}
    assert {"admission", "scheduler", "projector"} <= set(killed), killed
    for pid in killed.values():
        os.kill(pid, signal.SIGKILL)

    def all_back() -> list | None:
        out = live.cli("status", "-o", "json")
        rows = json.loads(out.stdout).get("services", []) if out.stdout.strip() else []
        fresh = {s["name"]: s for s in rows}
        back = all(
            fresh.get(n, {}).get("state") == "running" and fresh[n].get("pid") != pid
            for n, pid in killed.items()
        )
        return rows if back else None

    wait(all_back, "every killed service running again", timeout_s=120)
    assert live.submit("after-fill", "team-a", wait=True).returncode == 0
    wait(
        lambda: live.jobs().get(("team-a", "after-fill"), {}).get("state") == "running",
        "a job placed after the restarts",
        timeout_s=90,
    )
