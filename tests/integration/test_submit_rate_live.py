"""A tenant's submissions a second at the intake (issue 44), against a real nats-server with
the tenant's own CI credential: given tenant `research` configured with `limits: {submit_rate:
1}` and the admission service (the intake) running as its own identity, when research's CI
key asks to store five submissions at once, then at most one a second is stored and each other is
refused with `SubmitLimit` in one line naming the bound, and is not in the stream; once the
bucket refills, a refused one asked again is stored."""

from __future__ import annotations

import asyncio
import json
import re
import time

import nats.errors
import pytest

from gpuledger.services.cli.apply import publish_config
from gpuledger.services.runtime.client_requests import ask_status
from tests.integration.cluster import Processes, submission
from tests.integration.test_security import Client, stored
from tests.waiting import eventually_async

pytestmark = pytest.mark.integration

R = "research"
CONFIG = {
    "cluster": {"nodes": [{"name": "node-1", "gpus": 4, "model": "A100-80GB"}]},
    "tenants": [{"name": R, "guaranteed": 4, "limits": {"submit_rate": 1}}],
}
REFUSED = re.compile(
    r"SubmitLimit: tenant research may submit at most 1 jobs a second \(submit_rate\); "
    r"retry in [0-9]+ ms"
)


@pytest.fixture
async def live(server, bus, tmp_path):
    """research's CI key admitted by the server; the configuration published; admission
    running as its own identity and holding the configuration in its fold."""
    server.add_principals(f"ci:{R}")
    await publish_config(server.access(), CONFIG)
    (tmp_path / "config.yaml").write_text(json.dumps(CONFIG))
    p = Processes(server, tmp_path / "config.yaml", tmp_path)
    p.start("admission")
    ci = await Client.connect(server, f"ci:{R}")
    try:
        # a first submission, pending in admission's fold: its configuration is folded
        first = await eventually_async(
            lambda: ask(ci, "first"),
            60,
            "the intake answering (admission started)",
            ignoring=(nats.errors.NoRespondersError,),
        )
        assert "seq" in first, first
        st = await ask_status(
            bus, R, "first", timeout=30, wait_for_service=True, until=lambda s: s.known
        )
        assert st is not None and st.known
        yield ci
    finally:
        await ci.close()
        p.stop()


async def ask(ci: Client, job_id: str) -> dict:
    reply = await ci.nc.request(f"glr.submit.{R}.{job_id}", submission(job_id, R), timeout=30)
    return json.loads(reply.data)


async def test_a_ci_keys_submissions_past_its_tenants_rate_are_refused_and_not_stored(live, bus):
    # when research's CI key asks to store five submissions at once
    ids = [f"burst-{i}" for i in range(5)]
    began = time.monotonic()
    answers = dict(zip(ids, await asyncio.gather(*(ask(live, j) for j in ids)), strict=True))
    took_s = time.monotonic() - began
    kept = [j for j, a in answers.items() if "seq" in a]
    refused = [j for j, a in answers.items() if "seq" not in a]
    # then: no more are stored than the bucket holds (a burst of 1, one more a second), the
    # others are refused, each in one line naming the bound, and only those taken are stored
    assert refused and len(kept) <= 1 + int(took_s), (answers, took_s)
    for j in refused:
        assert answers[j]["reason"] == "SubmitLimit", answers[j]
        assert REFUSED.fullmatch(answers[j]["error"]), answers[j]
        assert not await stored(bus, f"gl.submit.{R}.{j}")  # nothing stored
    for j in kept:
        assert await stored(bus, f"gl.submit.{R}.{j}")
    # and once the bucket refills, a refused one asked again is stored
    again = refused[0]
    await eventually_async(
        lambda: _stored_now(live, again), 30, f"{again} stored once the rate allows it"
    )
    assert await stored(bus, f"gl.submit.{R}.{again}")


async def _stored_now(ci: Client, job_id: str) -> bool:
    answer = await ask(ci, job_id)
    assert "seq" in answer or answer.get("reason") == "SubmitLimit", answer
    return "seq" in answer
