"""The spread constraint (`JobSpec.spread`): at most `max_per_node` members of a group's jobs
on one node; a job held back by it says so in its pending reason (what `why` shows)."""

import msgspec

from gpuledger import events as ev
from gpuledger.replay.simulator import Simulator, standard_services
from gpuledger.replay.verify import verify
from gpuledger.services.domain.inputs.configfile import config_events, node_infos
from gpuledger.services.domain.tooling.stamp import submission

DOC = {
    "cluster": {
        "nodes": [
            {"name_prefix": "n", "count": 2, "gpus": 4, "model": "X", "cpu": 64, "memory": "256Gi"}
        ]
    },
    "tenants": [{"name": "t", "guaranteed": 8}],
}


def run(jobs):
    sim = Simulator(standard_services(node_infos(DOC)))
    for e in config_events(DOC):
        sim.publish(e)
    sim.schedule([(at, submission(spec, now_ms=at, producer="test")) for at, spec in jobs])
    sim.run(60_000)
    return sim


def spec(job_id, group=None, limit=1, gpus=1):
    spread = ev.Spread(group=group, max_per_node=limit) if group else msgspec.UNSET
    return ev.JobSpec(
        job_id=job_id, tenant="t", resources=ev.Resources(gpus=gpus), duration_s=30, spread=spread
    )


def nodes_of(sim, job_id):
    return [m.node for at, members in sim.ledger.jobs[job_id].placements for m in members]


def test_members_of_a_group_spread_over_nodes_up_to_the_limit():
    sim = run(
        [(0, spec("a", "web")), (0, spec("b", "web")), (0, spec("c", "web")), (0, spec("free"))]
    )
    placed = {j: nodes_of(sim, j) for j in ("a", "b", "free")}
    assert placed["a"] != placed["b"]  # one per node
    assert len(sim.ledger.jobs["c"].placements) == 1  # placed only after a or b ended
    assert sim.ledger.jobs["c"].placements[0][0] == 30_000
    reasons = [
        e for _, _, e in sim.log if isinstance(e, ev.PendingReasonChanged) and e.job_id == "c"
    ]
    assert reasons and "spread group 'web' allows at most 1 per node" in reasons[0].message
    assert reasons[0].details["spread"] == {"group": "web", "max_per_node": 1, "nodes_at_limit": 2}
    assert verify(sim.log).ok


def test_a_limit_of_two_and_jobs_without_a_group_are_unaffected():
    sim = run([(0, spec(f"j{i}", "db", limit=2)) for i in range(4)] + [(0, spec("other"))])
    per_node = {}
    for i in range(4):
        for n in nodes_of(sim, f"j{i}"):
            per_node[n] = per_node.get(n, 0) + 1
    assert sorted(per_node.values()) == [2, 2]
    assert sim.ledger.jobs["other"].placements[0][0] == 0


def test_unset_spread_encodes_as_before():
    plain = ev.JobSpec(job_id="x", tenant="t")
    assert b"spread" not in ev.encode(
        ev.JobSubmitted(job=plain, event_id="e", occurred_at_ms=0, correlation_id="x", producer="p")
    )


def test_a_scenario_files_spread_key_reaches_the_scheduler():
    """Given a scenario whose job entries say `spread: {group: web, max_per_node: 1}` (the job
    file key), when it runs, then the two nodes take one `web` job each and the third waits
    for one to end, as with a `JobSpec.spread` published directly."""
    from gpuledger.replay.scenario import from_document
    from gpuledger.replay.simulator import simulate

    web = {"tenant": "t", "gpus": 1, "duration": 30, "spread": {"group": "web", "max_per_node": 1}}
    sim = simulate(
        from_document(
            {**DOC, "timeline": [{"at": 0, "submit": {"id": f"web-{i}", **web}} for i in (1, 2, 3)]}
        )
    )
    assert sim.ledger.jobs["web-1"].spec.spread == ev.Spread(group="web", max_per_node=1)
    assert nodes_of(sim, "web-1") != nodes_of(sim, "web-2")
    assert sim.ledger.jobs["web-3"].placements[0][0] == 30_000


def _scanned(ledger) -> dict[str, dict[str, int]]:
    """Members per node of each group, counted from the active allocations (what the
    scheduler scanned every round before `Ledger.sched.spread_nodes`)."""
    out: dict[str, dict[str, int]] = {}
    for alloc_id in ledger.active:
        rec = ledger.allocations[alloc_id]
        s = ledger.jobs[rec.job_id].spec.spread
        if s:
            for m in rec.members:
                out.setdefault(s.group, {})[m.node] = out.setdefault(s.group, {}).get(m.node, 0) + 1
    return out


def test_the_folded_spread_index_equals_a_scan_of_the_active_allocations_at_every_step():
    # given jobs of two groups that start, end and wait for one another
    jobs = [(0, spec(f"a{i}", "a", limit=2)) for i in range(5)]
    jobs += [(5_000, spec(f"b{i}", "b", limit=1, gpus=2)) for i in range(3)]
    jobs += [(10_000, spec("free", gpus=1))]
    sim = run(jobs)
    # when the log is folded again one event at a time
    from gpuledger.services.domain.fold.acceptance import admit
    from gpuledger.services.domain.fold.ledger import Ledger

    ledger, seen = Ledger(), 0
    for seq, subject, e in sim.log:
        admit(ledger, seq, e, subject)
        # then the index is the scan, after every event (no zero entries left behind)
        assert ledger.sched.spread_nodes == _scanned(ledger)
        seen += bool(ledger.sched.spread_nodes)
    assert seen and "a" not in ledger.sched.spread_nodes  # group a ended: its entry is gone
