"""Live end to end: every service is its own OS process on a real nats-server (loopback),
two real node agents (`run node-agent --real`, declared GPUs: no NVML here) run
examples/train_tiny.py members that save and load checkpoints on disk.

Scenarios 1 and 2 of the preemption issue (examples/live-*.yaml): the victim is
checkpointed, evicted, and resumes from its step; each test is bounded (well under 60 s).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path

import msgspec
import pytest
import yaml

from gpuledger import events as ev
from gpuledger.replay import live_player
from gpuledger.replay.scenario import from_document
from gpuledger.services.node_agent.executor import MemberRecord
from gpuledger.services.roles import CONTROL_PLANE
from gpuledger.services.runtime.bus import Bus
from gpuledger.services.runtime.nats_server import EmbeddedNats
from gpuledger.services.runtime.processes import ServiceProcesses
from tests.waiting import eventually_async

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def live_doc(name: str) -> dict:
    """An example scenario with its commands made runnable here (this interpreter)."""
    doc = yaml.safe_load((ROOT / "examples" / name).read_text())
    for item in doc["timeline"]:
        cmd = item.get("submit", {}).get("command")
        if cmd:
            item["submit"]["command"] = [
                sys.executable
                if c == "python3"
                else str(ROOT / c)
                if c.startswith("examples/")
                else c
                for c in cmd
            ]
    return doc


class LiveCluster:
    """nats-server + control plane + real agents, each an OS process."""

    def __init__(self, tmp: Path, doc: dict) -> None:
        self.tmp, self.doc = tmp, doc
        self.config = tmp / "cluster.yaml"
        self.config.write_text(yaml.safe_dump(doc))
        self.work = tmp / "work"
        self.server = EmbeddedNats()
        self.procs: ServiceProcesses | None = None

    def spawn(self, key: str, role: str, *args: str) -> None:
        if self.procs is None:
            self.procs = ServiceProcesses(
                self.server.access(),
                config=self.config,
                log_dir=self.tmp,
                env={"PYTHONPATH": str(ROOT)},
            )
        self.procs.start(role, *args, name=key)

    def agent(self, node: str) -> None:
        self.server.add_principals(f"node:{node}")
        self.spawn(
            f"agent-{node}", "node-agent", "--real", "--node", node, "--work-dir", str(self.work)
        )

    def stop(self, key: str) -> None:
        self.procs.stop(key)

    def close(self) -> None:
        if self.procs is not None:
            self.procs.stop()
        for record in self.work.glob("*/state/*.json"):  # members outlive agents by design
            with contextlib.suppress(Exception):
                pid = msgspec.json.decode(record.read_bytes(), type=MemberRecord).pid
                if pid:
                    os.killpg(pid, signal.SIGKILL)
        self.server.stop()

    def logs(self) -> str:
        return self.procs.logs() if self.procs is not None else ""


@pytest.fixture
def live(tmp_path):
    made: list[LiveCluster] = []

    def make(name: str) -> LiveCluster:
        c = LiveCluster(tmp_path, live_doc(name))
        c.server.start()
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


async def start_cluster(c: LiveCluster, bus: Bus, sc) -> None:
    """Given the stream, `sc`'s configuration published, and the control plane and an agent
    per node of `sc` running as processes."""
    await bus.ensure_stream()
    await live_player.publish_config(bus, sc)
    for role in CONTROL_PLANE:
        c.spawn(role, role)
    for n in sc.nodes:
        c.agent(n.name)


async def run_scenario(c: LiveCluster, timeout_s: float = 40.0):
    sc = from_document(c.doc, name=c.doc.get("name", "live"))
    bus = await Bus.connect(c.server.url, **c.server.client_options())
    try:
        await start_cluster(c, bus, sc)
        assert await live_player.wait_for_nodes(bus, [n.name for n in sc.nodes], 30), c.logs()
        await live_player.play(bus, sc)
        jobs = [e.job.job_id for _, e in sc.inputs if isinstance(e, ev.JobSubmitted)]
        ledger = await live_player.wait_for_jobs(bus, jobs, timeout_s, poll_s=0.3)
        _, log = await live_player.fold(bus)
        return ledger, [e for _, _, e in log]
    finally:
        await bus.close()


def member_log(c: LiveCluster, alloc: str, rank: int) -> str:
    from gpuledger.services.node_agent.agent import executor_id

    return "".join(
        p.read_text() for p in c.work.glob(f"*/logs/{executor_id(alloc)}-rank{rank}.log")
    )


def check_checkpointed_and_resumed(
    c: LiveCluster, ledger, log, victim: str, winner: str, reason: str
):
    jobs = ledger.jobs
    assert jobs[victim].state == "completed", (jobs[victim].state, c.logs())
    assert jobs[winner].state == "completed", (jobs[winner].state, c.logs())
    (pre,) = jobs[victim].preemptions
    assert pre.reason == reason and pre.by == winner and pre.checkpointed
    acks = [
        e for e in log if isinstance(e, ev.MemberCheckpointed) and e.allocation_id == f"{victim}#1"
    ]
    exits = [e for e in log if isinstance(e, ev.MemberExited) and e.allocation_id == f"{victim}#1"]
    assert sorted(e.rank for e in exits) == [0, 1]
    assert all(e.outcome == "preempted" and e.exit_code == 75 for e in exits)
    step = min(max(e.step for e in acks if e.rank == r) for r in (0, 1))
    placements = [e for e in log if isinstance(e, ev.GangPlaced) and e.job_id == victim]
    assert [p.resume_step for p in placements] == [None, step]
    assert len(placements[1].members) == 2  # resumed on all 8 GPUs
    assert step > 0
    for rank in (0, 1):  # the step counter survived: the resumed run starts where it stopped
        text = member_log(c, f"{victim}#2", rank)
        assert "starting at step 0" not in text and "done at step 250" in text, text
    order = [type(e).__name__ for e in log if getattr(e, "job_id", None) in (victim, winner)]
    assert order.index("PreemptionRequested") < order.index("MemberCheckpointed")
    winner_placed = next(
        i for i, e in enumerate(log) if isinstance(e, ev.GangPlaced) and e.job_id == winner
    )
    victim_evicted = next(
        i for i, e in enumerate(log) if isinstance(e, ev.GangEvicted) and e.job_id == victim
    )
    assert victim_evicted < winner_placed  # never two gangs on the same GPUs


async def test_scenario_1_batch_job_is_checkpointed_evicted_and_resumes(live):
    c = live("live-preemption.yaml")
    ledger, log = await run_scenario(c)
    check_checkpointed_and_resumed(c, ledger, log, "batch-job", "prod-train", "Priority")


async def test_scenario_2_reclaim_then_resume_on_8_gpus_from_the_checkpoint(live):
    c = live("live-reclaim.yaml")
    ledger, log = await run_scenario(c)
    check_checkpointed_and_resumed(c, ledger, log, "a-train", "b-notebook", "Reclaim")


def process_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_agent_restart_readopts_running_members_without_starting_twice(live, tmp_path):
    doc = live_doc("live-preemption.yaml")
    doc["timeline"] = doc["timeline"][:1]  # only the batch job
    # 15 s of steps: it still runs when the restarted agent adopts it, under any load
    command = doc["timeline"][0]["submit"]["command"]
    command[command.index("--steps") + 1] = "750"
    c = live("live-preemption.yaml")
    c.doc = doc
    c.config.write_text(yaml.safe_dump(doc))
    sc = from_document(doc)
    bus = await Bus.connect(c.server.url, **c.server.client_options())
    try:
        await start_cluster(c, bus, sc)
        assert await live_player.wait_for_nodes(bus, ["n1", "n2"], 30), c.logs()
        await live_player.play(bus, sc)

        async def both_members_started() -> bool:
            ledger, _ = await live_player.fold(bus)
            rec = ledger.allocations.get("batch-job#1")
            return rec is not None and len(rec.started) == 2

        await eventually_async(both_members_started, 20, "both members to start", interval_s=0.2)
        c.stop("agent-n1")  # the agent dies (stop returns once it has exited)
        # its member keeps running without it
        records = [
            msgspec.json.decode(r.read_bytes(), type=MemberRecord)
            for r in c.work.glob("n1/state/*.json")
        ]
        assert records and all(process_alive(r.pid) for r in records)
        c.agent("n1")
        ledger = await live_player.wait_for_jobs(bus, ["batch-job"], 60, poll_s=0.3)
        _, log = await live_player.fold(bus)
    finally:
        await bus.close()
    assert ledger.jobs["batch-job"].state == "completed", c.logs()
    events = [e for _, _, e in log]
    starts = [e for e in events if isinstance(e, ev.MemberStarted)]
    assert sorted((e.allocation_id, e.rank) for e in starts) == [
        ("batch-job#1", 0),
        ("batch-job#1", 1),
    ]
    text = member_log(c, "batch-job#1", 0) + member_log(c, "batch-job#1", 1)
    assert text.count("starting at step") == 2  # one process per rank, never a second start
    assert not [e for e in events if isinstance(e, ev.NodeLost)]
    assert "agent.adopted" in (tmp_path / "agent-n1.log").read_text()


async def test_an_elastic_gang_shrinks_for_a_job_then_grows_back_live(live):
    """examples/live-elastic.yaml: given a 4-member elastic gang (min 2) of real processes,
    when a production job needs 2 GPUs, then only ranks 2 and 3 checkpoint and exit, the gang
    runs on with 2 whose members read world size 2; after the job it grows back to 4."""
    c = live("live-elastic.yaml")
    ledger, log = await run_scenario(c, timeout_s=50)
    jobs = ledger.jobs
    assert jobs["elastic"].state == "completed", (jobs["elastic"].state, c.logs())
    assert jobs["prod"].state == "completed", (jobs["prod"].state, c.logs())
    assert not [e for e in log if isinstance(e, ev.GangEvicted)]
    (req,) = [e for e in log if isinstance(e, ev.PreemptionRequested)]
    assert (req.job_id, req.ranks) == ("elastic", (2, 3))
    resized = [(e.from_members, e.to_members) for e in log if isinstance(e, ev.GangResized)]
    assert resized == [(4, 2), (2, 4)], c.logs()
    left = [
        e
        for e in log
        if isinstance(e, ev.MemberExited) and e.job_id == "elastic" and e.outcome == "preempted"
    ]
    assert sorted((e.rank, e.exit_code) for e in left) == [(2, 75), (3, 75)]
    for rank in (0, 1):
        text = member_log(c, "elastic#1", rank)
        assert "world size now 2" in text and "done at step 500" in text, text
        assert text.index("world size now 2") < text.index("world size now 4"), text
