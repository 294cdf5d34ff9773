"""Every decision and node fact has exactly one producing role, the one its subject names
(issue 13, defence in depth in the fold); client and configuration events have none."""

from __future__ import annotations

import pytest

from gpuledger import events as ev
from gpuledger.events.subjects import OPERATOR_INPUTS, producer_problem, role_of
from gpuledger.services.roles import ROLES
from tests.fold.story import admission

# the subject prefix each role may publish on (events/subjects.py)
PREFIX = {
    "admission": "gl.admission.",
    "quota": "gl.quota.",
    "scheduler": "gl.sched.",
    "preemption": "gl.preempt.",
    "node-agent": "gl.node.",
}
NODE_FACTS = (
    ev.NodeRegistered,
    ev.NodeHeartbeat,
    ev.MemberStarted,
    ev.MemberCheckpointed,
    ev.MemberExited,
    ev.GpuMetricsReported,
    ev.MigReconfigured,
)


def test_every_decision_and_node_fact_has_one_role_of_a_real_service():
    for cls in ev.ALL_EVENTS:
        role = role_of(cls)
        if issubclass(cls, ev.Decision) or cls in NODE_FACTS:
            assert role in ROLES, cls.__name__
        else:  # clients, configuration and dead letters: producer free
            assert role is None, cls.__name__


@pytest.mark.parametrize(
    "cls, role",
    [
        (ev.JobAdmitted, "admission"),
        (ev.JobRejected, "admission"),
        (ev.RequestRefused, "admission"),
        (ev.FairShareUpdated, "quota"),
        (ev.GangPlaced, "scheduler"),
        (ev.NodeLost, "scheduler"),
        (ev.PendingReasonChanged, "scheduler"),
        (ev.GangEvicted, "scheduler"),
        (ev.PreemptionRequested, "preemption"),
        (ev.PreemptionDeclined, "preemption"),
        (ev.ConsolidationPlanned, "preemption"),
        (ev.MigReconfigurationRequested, "preemption"),
        (ev.MigReconfigured, "node-agent"),
        (ev.MemberExited, "node-agent"),
        (ev.NodeRegistered, "node-agent"),
        (ev.JobSubmitted, None),
        (ev.JobCancelled, None),
        (ev.PolicyConfigured, None),
        (ev.DeadLettered, None),
    ],
)
def test_the_role_is_the_one_the_subject_grammar_names(cls, role):
    assert role_of(cls) == role


def test_a_role_publishes_only_on_its_own_subject_prefix():
    samples = [
        admission("j", "t", priority_class="c", priority=1),
        ev.FairShareUpdated(shares=()),
        ev.GangPlaced(job_id="j", allocation_id="j#1", tenant="t", members=()),
        ev.NodeLost(node="n1"),
        ev.PreemptionDeclined(job_id="j", reason="NoVictims"),
        ev.ConsolidationPlanned(job_id="j", moves=(), target_nodes=()),
        ev.MigReconfigurationRequested(job_id="j", node="n1", gpu_index=0, layout=()),
        ev.MigReconfigured(node="n1", gpu_index=0, layout=()),
        ev.MemberStarted(job_id="j", allocation_id="j#1", rank=0, node="n1"),
        ev.NodeRegistered(node=ev.NodeInfo(name="n1", cpu_milli=1, memory_mib=1, gpus=())),
    ]
    for e in samples:
        assert ev.subject_for(e).startswith(PREFIX[role_of(type(e))]), type(e).__name__


def test_only_the_role_of_the_producer_is_checked():
    placed = ev.GangPlaced(job_id="j", allocation_id="j#1", tenant="t", members=())
    assert producer_problem(ev.GangPlaced(**{**_fields(placed), "producer": "scheduler/7"})) is None
    assert producer_problem(ev.GangPlaced(**{**_fields(placed), "producer": "scheduler"})) is None
    problem = producer_problem(ev.GangPlaced(**{**_fields(placed), "producer": "node-agent/n1"}))
    assert problem is not None and "scheduler" in problem and "node-agent/n1" in problem
    assert set(OPERATOR_INPUTS) == {ev.NodeLost, ev.NodeRegistered}


def _fields(e: ev.Event) -> dict:
    return {f: getattr(e, f) for f in e.__struct_fields__}
