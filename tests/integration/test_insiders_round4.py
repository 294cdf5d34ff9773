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

    def create(name: str) -> tuple[str, bytes]:
        body = {
            "stream_name": "GPULEDGER",
            "config": {"name": name, "durable_name": name, "ack_policy": "explicit"},
        }
        return f"$JS.API.CONSUMER.CREATE.GPULEDGER.{name}", json.dumps(body).encode()

    async def durable(name: str) -> bool:
        try:
            reply = await nc.request(*create(name), timeout=1)
        except (nats.errors.Error, TimeoutError):
            return False
        return "error" not in json.loads(reply.data)

    def refused() -> int:
        return sum("permissions violation" in e.lower() for e in errors)

    try:
        # names of its own choosing: each refused by the server (a request would wait for
        # a reply that never comes; the refusals come back as the connection's errors)
        for _ in range(40):
            await nc.publish(*create("d" + secrets.token_hex(6)))
        await nc.flush()
        await test_insiders.until(lambda: refused() >= 40, 20, "40 refusals")
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


async def _intake(live, principal: str, subject: str, body: bytes, headers=None) -> dict:
    """`principal` asks the intake on `subject`, with any headers it likes; the answer."""
    from gpuledger.services.runtime.auth import client_options

    nc = await nats.connect(
        live.url, allow_reconnect=False, **client_options(live.creds(principal))
    )
    try:
        reply = await nc.request(subject, body, timeout=30, headers=headers)
        return json.loads(reply.data)
    finally:
        await nc.close()


async def _publish_raw(live, principal: str, subject: str, body: bytes, headers) -> list[str]:
    """`principal` publishes straight into the stream; the server's errors."""
    from gpuledger.services.runtime.auth import client_options

    errors: list[str] = []

    async def error_cb(err: Exception) -> None:
        errors.append(str(err))

    nc = await nats.connect(
        live.url, allow_reconnect=False, error_cb=error_cb, **client_options(live.creds(principal))
    )
    try:
        with pytest.raises((nats.errors.Error, TimeoutError)):
            await nc.jetstream(timeout=2).publish(subject, body, headers=headers)
        await test_insiders.until(lambda: errors, 10, "the server's answer")
    finally:
        await nc.close()
    return errors


def _job(job_id: str, tenant: str, event_id: str | None = None) -> tuple[bytes, str]:
    """A submission as `gpuledger submit` builds it: (its bytes, its event id)."""
    from gpuledger import events as ev
    from gpuledger.services.domain.inputs.jobfile import job_spec
    from gpuledger.services.domain.tooling.stamp import submission

    event = submission(
        job_spec({"id": job_id, "tenant": tenant, "gpus": 1, "duration": 3600}),
        producer="cli",
        now_ms=0,
    )
    if event_id is not None:
        import msgspec

        event = msgspec.structs.replace(event, event_id=event_id)
    return ev.encode(event), event.event_id


def test_live_header_oracle_a_ci_key_learns_nothing_of_another_tenants_subjects(live):
    """team-a holds `secret-build-77`. team-b's CI key sends JetStream's expected-sequence
    headers naming that subject: straight into the stream it is refused (a CI key publishes
    into no subject of the stream), and through the intake the headers are ignored: the
    answer about team-a's job equals the answer about a subject nobody has."""
    assert live.submit("secret-build-77", "team-a").returncode == 0
    probe = {"Nats-Expected-Last-Subject-Sequence": "999999999"}

    def headers(subject: str) -> dict[str, str]:
        return {**probe, "Nats-Expected-Last-Subject-Sequence-Subject": subject}

    body, _ = _job("probe-1", "team-b")
    errors = asyncio.run(
        _publish_raw(
            live, "ci:team-b", "gl.submit.team-b.probe-1", body, headers("gl.submit.team-a.>")
        )
    )
    assert any("permissions violation" in e.lower() for e in errors), errors
    answers = []
    for i, target in enumerate(("gl.submit.team-a.secret-build-77", "gl.submit.team-a.nobody")):
        body, _ = _job(f"probe-{i + 2}", "team-b")
        answer = asyncio.run(
            _intake(live, "ci:team-b", f"glr.submit.team-b.probe-{i + 2}", body, headers(target))
        )
        answers.append({k: v for k, v in answer.items() if k != "seq"})
        assert answer["seq"] > 0, answer
    assert answers[0] == answers[1] == {"duplicate": False}
    wait(  # both stored, nothing of the raw publish
        lambda: (
            live.sql(
                "SELECT count(*) AS n FROM events WHERE subject LIKE 'gl.submit.team-b.probe-%'"
            )
            == [{"n": 2}]
        ),
        "the two probes through the intake in the projection",
    )


def test_live_msg_id_collision_a_predicted_id_keeps_nobody_out(live):
    """team-b sends, before team-a, a submission carrying the Msg-Id (and the event id)
    team-a's `submit` will use for `release-9`; team-a's submit is admitted all the same, and
    team-b's answer is that of content nobody submitted (no `duplicate`)."""
    _, predicted = _job("release-9", "team-a")
    body, _ = _job("decoy", "team-b", event_id=predicted)
    first = asyncio.run(
        _intake(live, "ci:team-b", "glr.submit.team-b.decoy", body, {"Nats-Msg-Id": predicted})
    )
    assert first["duplicate"] is False and first["seq"] > 0
    a = live.submit("release-9", "team-a", wait=True)
    assert a.returncode == 0 and "admitted release-9" in a.stdout, (a.stdout, a.stderr)
    # the reverse: team-a's content submitted, team-b repeats its id: not told `duplicate`
    again, _ = _job("decoy-2", "team-b", event_id=predicted)
    reverse = asyncio.run(
        _intake(live, "ci:team-b", "glr.submit.team-b.decoy-2", again, {"Nats-Msg-Id": predicted})
    )
    nobody, _ = _job("decoy-3", "team-b", event_id="nobody-has-this-id")
    control = asyncio.run(_intake(live, "ci:team-b", "glr.submit.team-b.decoy-3", nobody))
    assert (
        {k: v for k, v in reverse.items() if k != "seq"}
        == {k: v for k, v in control.items() if k != "seq"}
        == {"duplicate": False}
    )


def test_live_a_refused_raw_submission_is_filed_under_its_own_tenant(live):
    """team-b has `squat-1` first, so team-a's `squat-1` is kept as `squat-1~~<digest>`;
    team-b then submits that key as an id (raw, through the intake): admission refuses it,
    and the refusal is filed under team-b, never under team-a's job (`why`, the log)."""
    from gpuledger.events.ids import tenant_job_key

    assert live.submit("squat-1", "team-b").returncode == 0
    assert live.submit("squat-1", "team-a").returncode == 0
    key = tenant_job_key("team-a", "squat-1")
    body = json.dumps(
        {
            "type": "JobSubmitted.v1",
            "event_id": "squat-raw",
            "job": {"job_id": key, "tenant": "team-b", "resources": {"gpus": 1}},
        }
    ).encode()
    asyncio.run(_intake(live, "ci:team-b", f"glr.submit.team-b.{key}", body))
    refused = wait(
        lambda: live.sql(
            "SELECT correlation_id, payload::VARCHAR AS p FROM events WHERE type = 'RequestRefused'"
            f" AND payload->>'job_id' = '{key}'"
        ),
        "admission's refusal of the raw submission",
    )
    assert [r["correlation_id"] for r in refused] == [tenant_job_key("team-b", key)]
    # the acceptance rules' refusal of the same message: filed under team-b's key too
    filed = wait(
        lambda: live.sql(
            f"SELECT job_id, code FROM refusals WHERE subject = 'gl.submit.team-b.{key}'"
        ),
        "the refusal row of the raw submission",
    )
    assert filed == [{"job_id": tenant_job_key("team-b", key), "code": "InvalidSpec"}]
    why = live.cli("why", "squat-1", "--tenant", "team-a")
    assert why.returncode == 0 and "Refused" not in why.stdout + why.stderr, why.stdout


def test_live_a_stuck_leader_is_stalled_not_running(live):
    """Given the scheduler leading, when it is frozen (SIGSTOP) and a job is submitted, then
    within a minute and a bit `status` shows it `stalled` (its lease still `leader`) with how
    long and at which sequence; once it thaws it is `running` again and decides about the
    job."""
    import os
    import signal

    from gpuledger.services.runtime.supervisor import STALLED_AFTER_S

    def scheduler() -> dict:
        doc = json.loads(live.cli("status", "-o", "json").stdout)
        return next(s for s in doc["services"] if s["name"] == "scheduler")

    pid = scheduler()["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        assert live.submit("while-frozen", "team-b", wait=True).returncode == 0  # admission's
        row = wait(
            lambda: (r := scheduler())["state"] == "stalled" and r,
            "status to call the frozen scheduler stalled",
            timeout_s=STALLED_AFTER_S + 60,
        )
        assert row["lease"] == "leader" and row["lag"] > 0 and row["idle_s"] >= STALLED_AFTER_S
        assert row["detail"].startswith(f"no progress for {row['idle_s']}s at seq ")
        table = live.cli("status").stdout
        assert any(ln.split()[:2] == ["scheduler", "stalled"] for ln in table.splitlines())
    finally:
        os.kill(pid, signal.SIGCONT)
    wait(  # the fleet is full by now: it catches up and decides (the job waits, Resources)
        lambda: (r := scheduler())["state"] == "running" and r["lag"] == 0,
        "the thawed scheduler running again, caught up",
        timeout_s=90,
    )
    wait(  # placed, or pending with the scheduler's reason
        lambda: any(
            r["state"] == "running" or r["reason"]
            for r in live.sql(
                "SELECT state, reason FROM jobs WHERE job_id = 'while-frozen' AND tenant = 'team-b'"
            )
        ),
        "the thawed scheduler's decision about the job",
        timeout_s=60,
    )
