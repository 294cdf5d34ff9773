"""The walking skeleton end to end: every service a separate OS process on a real
nats-server, simulated node agents, the same scenario through the simulator."""

from __future__ import annotations

import asyncio
import json

import pytest

from gpuledger import events as ev
from gpuledger.replay import live_player
from gpuledger.replay.scenario import load
from gpuledger.replay.simulator import simulate
from gpuledger.services.domain.fold.ledger import Ledger
from tests.integration.cluster import EXAMPLES, cli
from tests.waiting import eventually_async

pytestmark = pytest.mark.integration
THREE = EXAMPLES / "three-jobs.yaml"


def placements(log) -> dict[str, list[tuple[str, tuple[int, ...]]]]:
    return {
        e.allocation_id: sorted((m.node, m.gpus) for m in e.members)
        for _, _, e in log
        if isinstance(e, ev.GangPlaced)
    }


def strict_fold(log) -> Ledger:
    """Fold without forgiveness: a GPU booked twice raises PlacementConflict."""
    ledger = Ledger()
    for seq, _, e in log:
        ledger.apply(seq, e)
    return ledger


def assert_exports_and_verifies(url, path):
    exported = cli("export", "--out", str(path), "--nats-url", url)
    assert exported.returncode == 0, exported.stderr
    verified = cli("verify", str(path), "--json")
    report = json.loads(verified.stdout)
    assert verified.returncode == 0 and report["mismatches"] == [], report
    assert report["checked"] > 10


async def run_scenario(bus, procs, scenario, timeout=60):
    await live_player.publish_config(bus, scenario)
    procs.start_all([n.name for n in scenario.nodes])
    assert await live_player.wait_for_nodes(bus, [n.name for n in scenario.nodes], 30), procs.logs()
    await live_player.play(bus, scenario)
    job_ids = [e.job.job_id for _, e in scenario.inputs if isinstance(e, ev.JobSubmitted)]
    ledger = await live_player.wait_for_jobs(bus, job_ids, timeout)
    _, log = await live_player.fold(bus)
    return ledger, log


async def test_three_jobs_complete_live_and_match_the_simulator(bus, procs):
    scenario = load(THREE)
    ledger, log = await run_scenario(bus, procs, scenario)
    states = {j: r.state for j, r in ledger.jobs.items()}
    assert states == {
        "job-1": "completed",
        "job-2": "completed",
        "job-3": "completed",
        "job-bad": "rejected",
    }, procs.logs()
    assert ledger.jobs["job-bad"].reason == "TopologyUnsatisfiable"
    assert "9 GPUs in one NVLink clique" in ledger.jobs["job-bad"].message
    sim = simulate(scenario)
    assert placements(log) == placements(sim.log)
    strict_fold(log)
    assert_exports_and_verifies(procs.url, procs.log_dir / "live.jsonl")


async def _grown(bus, seq: int) -> bool:
    return await bus.last_seq() > seq


async def test_kill_9_of_the_scheduler_loses_no_job_and_places_none_twice(bus, procs, tmp_path):
    doc = {
        "cluster": {"nodes": [{"name_prefix": "n", "count": 2, "gpus": 4}]},
        "tenants": [{"name": "t", "guaranteed": 8}],
        "timeline": [
            {
                "at": i * 0.2,
                "submit": {"id": f"j{i}", "tenant": "t", "gpus": 1 + i % 4, "duration": 1},
            }
            for i in range(16)
        ],
    }
    from gpuledger.replay.scenario import from_document

    scenario = from_document(doc)
    config = tmp_path / "cluster.yaml"
    config.write_text(json.dumps(doc))
    procs.config = config
    await live_player.publish_config(bus, scenario)
    procs.start_all(["n1", "n2"])
    assert await live_player.wait_for_nodes(bus, ["n1", "n2"], 30), procs.logs()
    player = asyncio.create_task(live_player.play(bus, scenario))

    async def placing() -> bool:  # kill the scheduler mid-run: after its first placement
        _, log = await live_player.fold(bus)
        return any(isinstance(e, ev.GangPlaced) for _, _, e in log)

    await eventually_async(placing, 30, "the scheduler's first placement", interval_s=0.2)
    procs.kill9("scheduler")  # returns once it is dead
    dead_at = await bus.last_seq()
    # the cluster goes on without it: the log grows before it comes back
    await eventually_async(lambda: _grown(bus, dead_at), 30, "the log to grow without it")
    procs.start("scheduler")
    await player
    job_ids = [f"j{i}" for i in range(16)]
    ledger = await live_player.wait_for_jobs(bus, job_ids, 60)
    _, log = await live_player.fold(bus)
    assert {ledger.jobs[j].state for j in job_ids} == {"completed"}, procs.logs()
    placed = [e for _, _, e in log if isinstance(e, ev.GangPlaced)]
    assert len(placed) == len({e.allocation_id for e in placed}) == 16
    assert len({e.job_id for e in placed}) == 16
    strict_fold(log)  # no GPU allocated twice at any point of the log
    assert_exports_and_verifies(procs.url, tmp_path / "live.jsonl")


async def test_a_ci_retry_of_the_same_submission_yields_one_job(server, bus, procs, tmp_path):
    await live_player.publish_config(bus, load(THREE))
    procs.start("admission")
    job = tmp_path / "job.yaml"
    job.write_text("id: retry-1\ntenant: team-a\ngpus: 1\nduration: 1\n")
    first = cli("submit", str(job), "--nats-url", server.url, "--wait")
    second = cli("submit", str(job), "--nats-url", server.url, "--wait")
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    job.write_text("id: retry-1\ntenant: team-a\ngpus: 2\nduration: 1\n")
    different = cli("submit", str(job), "--nats-url", server.url)
    assert different.returncode == 1, different.stderr
    assert "already exists" in different.stderr and "JobIdConflict" in different.stderr
    assert "resources.gpus: stored 1, new 2" in different.stderr
    _, log = await live_player.fold(bus)
    assert sum(isinstance(e, ev.JobSubmitted) for _, _, e in log) == 1
    assert sum(isinstance(e, ev.JobAdmitted) for _, _, e in log) == 1


async def test_a_rejected_submission_exits_non_zero_with_the_reason(server, bus, procs, tmp_path):
    await live_player.publish_config(bus, load(THREE))
    procs.start("admission")
    job = tmp_path / "job.yaml"
    job.write_text("id: nope\ntenant: nobody\ngpus: 1\n")
    out = cli("submit", str(job), "--nats-url", server.url, "--wait")
    assert out.returncode == 1
    assert "UnknownTenant" in out.stderr


async def test_a_malformed_message_is_dead_lettered_once_and_services_keep_working(
    server, bus, procs, tmp_path
):
    await live_player.publish_config(bus, load(THREE))
    procs.start("admission")
    procs.start("scheduler")
    await bus.publish_raw("gl.submit.team-a.garbage", b"{not json")
    await bus.publish_raw(
        "gl.submit.team-a.wrong", b'{"type": "JobSubmitted.v1", "job": {"job_id": 1}}'
    )
    job = tmp_path / "job.yaml"
    job.write_text("id: after-garbage\ntenant: team-a\ngpus: 1\n")
    out = cli("submit", str(job), "--nats-url", server.url, "--wait")
    assert out.returncode == 0, out.stderr + procs.logs()

    async def scheduler_past_the_bad_messages():
        # the scheduler's first word on a job submitted after them: it has folded them too
        _, log = await live_player.fold(bus)
        later = [
            e
            for _, _, e in log
            if getattr(e, "job_id", None) == "after-garbage" and e.producer.startswith("scheduler/")
        ]
        return log if later else None

    log = await eventually_async(scheduler_past_the_bad_messages, 30, "the scheduler's decision")
    dead = [e for _, _, e in log if isinstance(e, ev.DeadLettered)]
    assert sorted(d.subject for d in dead) == ["gl.submit.team-a.garbage", "gl.submit.team-a.wrong"]
    assert all(p.poll() is None for p in procs.procs.values()), "a service died on a bad message"


async def test_a_ci_system_submits_plain_json_with_its_own_msg_id(server, bus, procs):
    """What the README shows for CI: `nats pub gl.submit.<tenant>.<job> '<json>' -H Nats-Msg-Id`."""
    await live_player.publish_config(bus, load(THREE))
    procs.start("admission")
    payload = b'{"type":"JobSubmitted.v1","job":{"job_id":"ci-7","tenant":"team-a","resources":{"gpus":2},"duration_s":60}}'
    first = await bus.publish_raw("gl.submit.team-a.ci-7", payload, msg_id="ci-run-1:ci-7")
    retry = await bus.publish_raw("gl.submit.team-a.ci-7", payload, msg_id="ci-run-1:ci-7")
    assert first == retry  # JetStream deduplicated the retried publish

    async def admitted():
        ledger, _ = await live_player.fold(bus)
        job = ledger.jobs.get("ci-7")
        return ledger if job is not None and job.state != "submitted" else None

    ledger = await eventually_async(admitted, 20, "admission's decision on ci-7", interval_s=0.2)
    assert ledger.jobs["ci-7"].state == "pending" and ledger.jobs["ci-7"].priority == 50
