"""Client requests the ledger must not apply, and client clocks it must not trust, against a
real nats-server with admission as its own process (issue 11, cases 9, 11 and 13).

Given a configured cluster, when a CI system submits or cancels the way the README shows
(`gpuledger submit`, or plain JSON on `gl.submit.<tenant>.<job>`), then every request it
cannot have is answered with a reason its sender and `gpuledger why` can see, and every job
is stamped at the time the stream received it.
"""

from __future__ import annotations

import asyncio
import json
import time

import nats.js.errors
import pytest

from gpuledger import events as ev
from gpuledger.projections.nats_source import run_projector
from gpuledger.projections.store import connect_readonly
from gpuledger.replay import live_player
from tests import natsauth
from tests.integration.cluster import EXAMPLES, cli
from tests.waiting import eventually_async

pytestmark = pytest.mark.integration
THREE = EXAMPLES / "three-jobs.yaml"
README_CI_PAYLOAD = (
    b'{"type":"JobSubmitted.v1","job":{"job_id":"%s","tenant":"team-a",'
    b'"resources":{"gpus":1},"duration_s":3600}}'
)


async def log_until(bus, done, procs, timeout_s: float = 20.0):
    """Fold the stream until `done(log)` holds; returns (ledger, log)."""

    async def folded():
        ledger, log = await live_player.fold(bus)
        return (ledger, log) if done(log) else None

    try:
        return await eventually_async(folded, timeout_s, "the log to hold it", interval_s=0.2)
    except AssertionError as exc:
        raise AssertionError(procs.logs()) from exc


def of_type(log, cls, job_id: str | None = None):
    return [
        e
        for _, _, e in log
        if isinstance(e, cls) and (job_id is None or getattr(e, "job_id", None) == job_id)
    ]


def project(url: str, db) -> None:
    """Project the whole stream into `db` (the projector a `gpuledger up` runs)."""
    asyncio.run(
        run_projector(url, db, connect_options=natsauth.options(), follow=False, fetch_timeout=0.5)
    )


# ---------------------------------------------------------------- case 9: one job id, one job


async def test_a_plain_client_resubmitting_a_job_id_with_other_content_is_refused_and_why_says_so(
    server, bus, admission, tmp_path
):
    first = await bus.publish_raw(
        "gl.submit.team-a.train-45", README_CI_PAYLOAD % b"train-45", msg_id="ci-1:train-45"
    )
    other = README_CI_PAYLOAD.replace(b'"gpus":1', b'"gpus":8') % b"train-45"
    second = await bus.publish_raw("gl.submit.team-a.train-45", other, msg_id="ci-2:train-45")
    ledger, log = await log_until(bus, lambda log: of_type(log, ev.RequestRefused), admission)
    (refused,) = of_type(log, ev.RequestRefused)
    assert (refused.reason, refused.request_seq, refused.details["existing_seq"]) == (
        "JobIdConflict",
        second,
        first,
    )
    assert "resources.gpus: stored 1, new 8" in refused.message
    assert ledger.jobs["train-45"].spec.resources.gpus == 1  # the first job stands
    assert len(of_type(log, ev.JobAdmitted)) == 1

    db = tmp_path / "projection.duckdb"
    await asyncio.to_thread(project, server.url, db)
    why = cli("why", "train-45", "--db", str(db))
    assert why.returncode == 0, why.stderr
    assert f"Refused:   JobSubmitted at seq {second} from team-a: JobIdConflict" in why.stdout


async def test_jetstream_tells_a_plain_publisher_about_a_reused_msg_id_or_a_taken_job_id(
    bus, admission
):
    """What a `nats pub` client can see in the ack: a reused Nats-Msg-Id is a duplicate
    (nothing stored, whatever the content); with the expected-last-subject-sequence headers
    the schema documents, a second submission of a job id is an error."""
    payload = README_CI_PAYLOAD % b"ci-9"
    ack = await bus.js.publish(
        "gl.submit.team-a.ci-9", payload, headers={"Nats-Msg-Id": "run-1:ci-9"}
    )
    again = await bus.js.publish(
        "gl.submit.team-a.ci-9",
        payload.replace(b'"gpus":1', b'"gpus":2'),
        headers={"Nats-Msg-Id": "run-1:ci-9"},
    )
    assert again.duplicate and again.seq == ack.seq
    create = {"Nats-Expected-Last-Subject-Sequence": "0"}
    with pytest.raises(nats.js.errors.APIError) as refused:
        await bus.js.publish(
            "gl.submit.team-a.ci-9", payload, headers={**create, "Nats-Msg-Id": "run-2:ci-9"}
        )
    assert refused.value.err_code == 10071
    other_tenant = payload.replace(b'"tenant":"team-a"', b'"tenant":"team-b"')
    assert other_tenant != payload  # ids are per tenant: team-b's ci-9 is another job
    ack_b = await bus.js.publish(
        "gl.submit.team-b.ci-9", other_tenant, headers={**create, "Nats-Msg-Id": "b:run-2:ci-9"}
    )
    assert not ack_b.duplicate and ack_b.seq > ack.seq


async def test_gpuledger_submit_is_idempotent_over_a_plain_submission_and_another_tenant_has_its_own(
    server, bus, admission, tmp_path
):
    await bus.publish_raw(
        "gl.submit.team-a.ci-3", README_CI_PAYLOAD % b"ci-3", msg_id="ci-run:ci-3"
    )
    job = tmp_path / "job.yaml"
    job.write_text("id: ci-3\ntenant: team-a\ngpus: 1\nduration: 3600\n")
    same = cli("submit", str(job), "--nats-url", server.url, "--wait")
    assert same.returncode == 0, same.stderr
    assert "same content" in same.stderr and "admitted ci-3" in same.stdout
    job.write_text("id: ci-3\ntenant: team-b\ngpus: 1\nduration: 3600\n")
    other = cli("submit", str(job), "--nats-url", server.url)
    assert other.returncode == 0, other.stderr  # job ids are per tenant: team-b's own ci-3
    assert "submitted ci-3" in other.stdout + other.stderr
    _, log = await live_player.fold(bus)
    assert [e.job.tenant for e in of_type(log, ev.JobSubmitted)] == ["team-a", "team-b"]


async def test_a_submission_with_a_typo_is_rejected_with_the_decode_error_for_its_subjects_job(
    server, bus, admission, tmp_path
):
    typo = b'{"type":"JobSubmitted.v1","job":{"job_id":"train-46","tenant":"team-a","gpu":8}}'
    seq = await bus.publish_raw("gl.submit.team-a.train-46", typo, msg_id="ci-1:train-46")
    ledger, log = await log_until(
        bus, lambda log: of_type(log, ev.JobRejected, "train-46"), admission
    )
    (rejected,) = of_type(log, ev.JobRejected, "train-46")
    assert (rejected.tenant, rejected.reason) == ("team-a", "InvalidSpec")
    assert f"seq {seq}" in rejected.message and "gpu" in rejected.message
    assert ledger.jobs["train-46"].state == "rejected"
    assert all(p.poll() is None for p in admission.procs.values())

    db = tmp_path / "projection.duckdb"
    await asyncio.to_thread(project, server.url, db)
    why = cli("why", "train-46", "--db", str(db), "-o", "json")
    assert why.returncode == 0, why.stderr
    report = json.loads(why.stdout)
    assert (report["state"], report["reason"]) == ("rejected", "InvalidSpec")
    assert "Unknown field 'gpu'" in report["message"] or "gpu" in report["message"]


# ---------------------------------------------------------------- case 11: the submit time


async def test_a_job_without_a_client_time_or_with_a_wrong_clock_is_stamped_when_the_stream_got_it(
    server, bus, admission, tmp_path
):
    before = time.time_ns() // 1_000_000
    await bus.publish_raw("gl.submit.team-a.no-clock", README_CI_PAYLOAD % b"no-clock")
    hour_ahead = json.loads(README_CI_PAYLOAD % b"fast-clock")
    hour_ahead["occurred_at_ms"] = before + 3_600_000
    await bus.publish_raw("gl.submit.team-a.fast-clock", json.dumps(hour_ahead).encode())
    sane = json.loads(README_CI_PAYLOAD % b"sane-clock")
    sane["occurred_at_ms"] = before - 2_000
    await bus.publish_raw("gl.submit.team-a.sane-clock", json.dumps(sane).encode())
    after = time.time_ns() // 1_000_000
    jobs = ("no-clock", "fast-clock", "sane-clock")
    ledger, _ = await log_until(bus, lambda log: len(of_type(log, ev.JobAdmitted)) == 3, admission)
    assert before <= ledger.jobs["no-clock"].submitted_ms <= after
    assert before <= ledger.jobs["fast-clock"].submitted_ms <= after
    assert ledger.jobs["sane-clock"].submitted_ms == before - 2_000

    db = tmp_path / "projection.duckdb"
    await asyncio.to_thread(project, server.url, db)
    con = connect_readonly(db)
    try:
        stamped = dict(
            con.execute(
                "SELECT job_id, submitted_at_ms FROM jobs WHERE job_id IN (?, ?, ?)", list(jobs)
            ).fetchall()
        )
        wait_p99_s = con.execute("SELECT max(admission_wait_p99_s) FROM slo").fetchone()[0]
    finally:
        con.close()
    assert stamped == {j: ledger.jobs[j].submitted_ms for j in jobs}  # one effective time
    assert 0 <= wait_p99_s < 30
    listed = cli("jobs", "--db", str(db), "--no-headers")
    assert listed.returncode == 0, listed.stderr
    ages = {line.split()[0]: line.split()[5] for line in listed.stdout.splitlines()}
    assert all(ages[j].endswith("s") for j in jobs), ages  # seconds old, not 20780d


# ---------------------------------------------------------------- case 13: cancel


async def test_cancelling_an_unknown_job_is_refused_and_creates_nothing(
    server, bus, admission, tmp_path
):
    last = await bus.last_seq()
    out = cli("cancel", "no-such-job", "--nats-url", server.url)
    assert out.returncode == 1
    assert "error: no job 'no-such-job'" in out.stderr and "UnknownJob" in out.stderr
    assert await bus.last_seq() == last  # nothing published

    raw = ev.JobCancelled(job_id="no-such-job", tenant="team-a")
    seq = await bus.publish_raw("gl.cancel.team-a.no-such-job", ev.encode(raw))
    ledger, log = await log_until(bus, lambda log: of_type(log, ev.RequestRefused), admission)
    (refused,) = of_type(log, ev.RequestRefused)
    assert (refused.reason, refused.request, refused.request_seq) == (
        "UnknownJob",
        "JobCancelled",
        seq,
    )
    assert "no-such-job" not in ledger.jobs

    db = tmp_path / "projection.duckdb"
    await asyncio.to_thread(project, server.url, db)
    con = connect_readonly(db)
    try:
        assert (
            con.execute("SELECT count(*) FROM jobs WHERE job_id = 'no-such-job'").fetchone()[0] == 0
        )
    finally:
        con.close()
    why = cli("why", "no-such-job", "--db", str(db))
    assert why.returncode == 1
    assert (
        "no job 'no-such-job'" in why.stderr
        and "JobCancelled" in why.stderr
        and "UnknownJob" in why.stderr
    )


async def test_a_cancel_names_the_tenant_that_submitted_the_job_or_is_refused(
    server, bus, admission, tmp_path
):
    job = tmp_path / "job.yaml"
    job.write_text("id: mine\ntenant: team-a\ngpus: 1\nduration: 3600\n")
    assert cli("submit", str(job), "--nats-url", server.url, "--wait").returncode == 0
    wrong = cli("cancel", "mine", "--tenant", "team-b", "--nats-url", server.url)
    assert wrong.returncode == 1 and "no job 'mine' in tenant 'team-b'" in wrong.stderr
    ok = cli("cancel", "mine", "--nats-url", server.url)
    assert ok.returncode == 0, ok.stderr
    ledger, _ = await log_until(bus, lambda log: bool(of_type(log, ev.JobCancelled)), admission)
    assert ledger.jobs["mine"].state == "cancelled"
