"""Property: the projection never shows what the ledger refused.

A consistent log with random adversarial events spliced in (placements of unknown, settled
or running jobs, on unknown nodes or busy GPUs; node loss and return; admissions, cancels
and pending reasons of any job; any of them on a wrong subject) is folded by the projector.
Afterwards its job states, open allocations and lost nodes equal the services' ledger, no
node holds more GPU capacity than it has, and every refused event left no row but its
`refusals` one."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuledger import events as ev
from gpuledger.projections.bench import synthetic_log
from gpuledger.projections.mappers import Projection, columns_of

BASE = list(synthetic_log(1500, nodes=4))
JOBS = sorted({e.job.job_id for _, _, e in BASE if isinstance(e, ev.JobSubmitted)})
NODES = ["node0", "node1", "node2", "node3", "nowhere"]

job_id = st.sampled_from([*JOBS[:40], "ghost"])
node = st.sampled_from(NODES)
member = st.builds(
    lambda rank, n, gpus: ev.MemberPlacement(rank=rank, node=n, gpus=tuple(sorted(gpus))),
    st.integers(0, 3), node, st.sets(st.integers(0, 8), max_size=8),
)
bad_event = st.one_of(
    st.builds(
        lambda j, a, ms, epoch: ev.GangPlaced(
            job_id=j, allocation_id=f"{j}#x{a}", tenant="org/t0", members=tuple(ms),
            producer="scheduler/0", leader_epoch=epoch,
        ),
        job_id, st.integers(0, 3), st.lists(member, min_size=1, max_size=3), st.integers(0, 2),
    ),
    st.builds(lambda n: ev.NodeLost(node=n, producer="scheduler/0"), node),
    st.builds(lambda n: ev.NodeHeartbeat(node=n), node),
    st.builds(lambda j: ev.PendingReasonChanged(job_id=j, reason="Resources", message="m"), job_id),
    st.builds(
        lambda j: ev.JobAdmitted(job_id=j, tenant="org/t0", priority_class="train", priority=1,
                                 preemptible=True, slo_class="batch"),
        job_id,
    ),
    st.builds(lambda j: ev.JobCancelled(job_id=j, tenant="org/t0"), job_id),
)
splice = st.tuples(st.integers(0, len(BASE)), bad_event, st.booleans())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(splice, max_size=25))
def test_the_projection_shows_only_what_the_ledger_accepted(splices):
    log: list[tuple[str, ev.Event]] = [(s, e) for _, s, e in BASE]
    for at, event, wrong_subject in sorted(splices, key=lambda x: -x[0]):
        try:
            subject = "gl.submit.org/x.y" if wrong_subject else ev.subject_for(event)
        except ev.InvalidId:
            continue
        log.insert(at, (subject, event))
    p = Projection()
    for seq, (subject, event) in enumerate(log, 1):
        p.apply(seq, subject, event)
    ledger = p.ledger
    batch = p.drain()

    assert {j: r.state for j, r in p.jobs.items()} == {j: r.state for j, r in ledger.jobs.items()}
    assert set(p.open_allocs) == ledger.active
    lost = {n for n, r in p.nodes.items() if r.status == "lost"}
    assert lost == {n for n, r in ledger.nodes.items() if r.lost}
    held: dict[tuple[str, int], int] = defaultdict(int)
    for ranks in p.open_allocs.values():
        for rows in ranks.values():
            for r in rows:
                held[(r.node, r.gpu_index)] += r.gpu_milli
    assert all(m <= 1000 and (n, i) in p.gpus for (n, i), m in held.items())
    refused = {r[0] for r in batch.rows("refusals")}
    for table in ("job_transitions", "decisions", "pending_reasons"):
        assert not refused & {r[0] for r in batch.rows(table)}, table
    placed_seq = columns_of("allocations").index("placed_seq")
    assert not refused & {r[placed_seq] for r in batch.rows("allocations")}
