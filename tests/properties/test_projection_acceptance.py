"""Property: the projection never shows what the ledger refused.

A consistent log with random adversarial events spliced in (placements of unknown, settled
or running jobs, on unknown nodes or busy GPUs; node loss and return; admissions, cancels
and pending reasons of any job; preemptions; any of them on a wrong subject or in the name of
any producer, the wrong role's included, at any leader epoch) is folded by the projector.
Afterwards its job states, open allocations and lost nodes equal the services' ledger, no
node holds more GPU capacity than it has, and every refused event left no row but its
`refusals` one. A decision or node fact from the wrong role is refused (`WrongProducer`), and
no role's leader epoch was raised by an event of another role."""

from __future__ import annotations

from collections import defaultdict

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from gpuledger import events as ev
from gpuledger.events.subjects import role_of
from gpuledger.projections.mappers import Projection, columns_of
from gpuledger.replay.bench.projector import synthetic_log
from tests.fold.story import admission
from tests.properties.profiles import examples

BASE = list(synthetic_log(1500, nodes=4))
JOBS = sorted({e.job.job_id for _, _, e in BASE if isinstance(e, ev.JobSubmitted)})
NODES = ["node0", "node1", "node2", "node3", "nowhere"]

job_id = st.sampled_from([*JOBS[:40], "ghost"])
node = st.sampled_from(NODES)
member = st.builds(
    lambda rank, n, gpus: ev.MemberPlacement(rank=rank, node=n, gpus=tuple(sorted(gpus))),
    st.integers(0, 3),
    node,
    st.sets(st.integers(0, 8), max_size=8),
)
bad_event = st.one_of(
    st.builds(
        lambda j, a, ms, epoch: ev.GangPlaced(
            job_id=j,
            allocation_id=f"{j}#x{a}",
            tenant="org/t0",
            members=tuple(ms),
            producer="scheduler/0",
            leader_epoch=epoch,
        ),
        job_id,
        st.integers(0, 3),
        st.lists(member, min_size=1, max_size=3),
        st.integers(0, 2),
    ),
    st.builds(lambda n: ev.NodeLost(node=n, producer="scheduler/0"), node),
    st.builds(lambda n: ev.NodeHeartbeat(node=n), node),
    st.builds(lambda j: ev.PendingReasonChanged(job_id=j, reason="Resources", message="m"), job_id),
    st.builds(lambda j: admission(j, "org/t0", priority=1), job_id),
    st.builds(lambda j: ev.JobCancelled(job_id=j, tenant="org/t0"), job_id),
)
# the real producer of each type most of the time, anyone's name (or none) otherwise
claimed = st.sampled_from(
    [
        "scheduler/0",
        "admission/0",
        "preemption/0",
        "quota/0",
        "node-agent/node0",
        "node-agent/sim",
        "",
        "scenario",
        "cli",
    ]
)
epoch = st.sampled_from([0, 1, 2, 2**53 - 1])


def as_produced(event: ev.Event, producer: str | None, at_epoch: int) -> ev.Event:
    role = role_of(type(event))
    fields = {"producer": f"{role}/0" if producer is None and role else producer or ""}
    if isinstance(event, ev.Decision):
        fields["leader_epoch"] = at_epoch
    return msgspec.structs.replace(event, **fields)


forged = st.builds(as_produced, bad_event, st.one_of(st.none(), claimed), epoch)
preempt = st.builds(
    lambda j: ev.PreemptionRequested(
        job_id=j, allocation_id=f"{j}#1", beneficiary="ghost", reason="Priority", deadline_ms=1
    ),
    job_id,
)
forged = st.one_of(forged, st.builds(as_produced, preempt, st.one_of(st.none(), claimed), epoch))
splice = st.tuples(st.integers(0, len(BASE)), forged, st.booleans())


@examples(60)
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
    wrong_role = {
        seq
        for seq, (_, e) in enumerate(log, 1)
        if role_of(type(e)) not in (None, e.producer.partition("/")[0])
        and not (isinstance(e, ev.NodeLost) and e.producer == "scenario" and not e.leader_epoch)
    }
    ledger = p.ledger
    batch = p.drain()

    assert {j: r.state for j, r in p.jobs.items()} == {j: r.state for j, r in ledger.jobs.items()}
    assert set(p.open_allocs) == ledger.active
    lost = {n for n, r in p.nodes.items() if r.status == "lost"}
    assert lost == {n for n, r in ledger.nodes.items() if r.lost}
    held: dict[tuple[str, int], int] = defaultdict(int)
    for ranks in p.open_allocs.values():
        for r in ranks.values():
            for index in r.gpu_index:
                held[(r.node, index)] += r.gpu_milli
    assert all(m <= 1000 and (n, i) in p.gpus for (n, i), m in held.items())
    refusals = {r[0]: r for r in batch.rows("refusals")}
    refused = set(refusals)
    code = columns_of("refusals").index("code")
    assert wrong_role <= refused
    assert all(
        refusals[s][code] in ("WrongProducer", "WrongSubject", "InvalidId") for s in wrong_role
    )
    for (
        role,
        seen,
    ) in ledger.intake.leader_epochs.items():  # raised only by that role's own decisions
        assert seen <= max(
            e.leader_epoch
            for _, e in log
            if isinstance(e, ev.Decision)
            and role_of(type(e)) == role
            and e.producer.partition("/")[0] == role
        )
    for table in ("job_transitions", "decisions", "pending_reasons"):
        assert not refused & {r[0] for r in batch.rows(table)}, table
    placed_seq = columns_of("allocations").index("placed_seq")
    assert not refused & {r[placed_seq] for r in batch.rows("allocations")}
