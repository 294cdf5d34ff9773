"""What admission, quota and the simulated agent read, as a specification: given each
service's table of decide steps (`STEPS`), then every step declares what can change its
answer (`reads`) and the service's quiet set (`unaffected_by`, `quiet_until_wakeup`) is
derived from those declarations alone, as the scheduler's (tests/scheduler/
test_reads_declared.py) and preemption's are. A step that leaves out an event it reads
makes the service skip a decide that is not quiet: checking mode asks every skipped decide
and stops there, here on a job that arrives after a quiet start, on random scenarios in
`test_decide_is_pure_cache_free_and_the_fold_is_incremental` (tests/properties)."""

from dataclasses import replace

import pytest

from gpuledger.events import catalog as ev
from gpuledger.replay.checking import DecideDrift
from gpuledger.replay.scenario import from_document
from gpuledger.replay.simulator import simulate
from gpuledger.services.admission import decider as admission
from gpuledger.services.domain.tooling import reads
from gpuledger.services.node_agent import simulated as agent
from gpuledger.services.quota import decider as quota
from tests.scheduler.test_reads_declared import one_job_later

SERVICES = {
    "admission": (admission.Admission, admission.STEPS),
    "quota": (quota.Quota, quota.STEPS),
    "node-agent": (agent.SimulatedAgent, agent.STEPS),
}

QUIET = {
    # what happens to an admitted job never changes a verdict
    "admission": {
        ev.FairShareUpdated,
        ev.GangPlaced,
        ev.MemberStarted,
        ev.MemberCheckpointed,
        ev.MemberExited,
        ev.PreemptionRequested,
        ev.PreemptionDeclined,
        ev.GangEvicted,
        ev.GangRequeued,
        ev.GangCompleted,
        ev.GangFailed,
        ev.PendingReasonChanged,
        ev.GpuMetricsReported,
        ev.NodeHeartbeat,
    },
    # capacity, configuration, schedules and demand (held + pending milli-GPUs) only
    "quota": {
        ev.JobSubmitted,
        ev.MemberStarted,
        ev.MemberCheckpointed,
        ev.MemberExited,
        ev.PendingReasonChanged,
        ev.PreemptionRequested,
        ev.PreemptionDeclined,
        ev.GpuMetricsReported,
        ev.RequestRefused,
        ev.DeadLettered,
        ev.NodeHeartbeat,
    },
    # its nodes and the allocations on them; nothing of a job before it is placed
    "node-agent": {
        ev.JobSubmitted,
        ev.JobAdmitted,
        ev.JobRejected,
        ev.FairShareUpdated,
        ev.PendingReasonChanged,
        ev.PreemptionDeclined,
        ev.GpuMetricsReported,
        ev.RequestRefused,
        ev.DeadLettered,
    },
}


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_every_step_declares_what_it_reads(name):
    _, steps = SERVICES[name]
    missing = reads.undeclared(steps)
    assert not missing, f"{name} steps without `reads` (never quiet): {', '.join(missing)}"


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_the_quiet_set_is_what_no_step_reads(name):
    # given the steps, when the quiet set is derived, then it is the service's own
    service, steps = SERVICES[name]
    assert service.unaffected_by == reads.unaffected_by(steps)
    assert service.unaffected_by == QUIET[name]
    # and no step reads the clock but through the service's wake-up
    assert service.quiet_until_wakeup is reads.quiet_until_wakeup(steps) is True


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_an_event_a_step_reads_is_never_quiet(name):
    service, steps = SERVICES[name]
    for step in steps:
        assert not set(step.reads or ()) & service.unaffected_by, step.name


def reading_nothing(service: type) -> type:
    """`service` with steps that wrongly declare that nothing can change their answers."""
    steps = next(
        tuple(replace(s, reads=reads.of()) for s in t) for c, t in SERVICES.values() if c is service
    )
    return type(
        f"{service.__name__}ReadingNothing",
        (service,),
        {
            "unaffected_by": reads.unaffected_by(steps),
            "quiet_until_wakeup": reads.quiet_until_wakeup(steps),
        },
    )


def test_the_derived_quiet_sets_pass_checking_mode():
    # given the services as their steps declare them, when a job arrives after a quiet start
    # and the simulator checks every decide it skips as quiet, then none returns anything
    sim = simulate(from_document(one_job_later()), check=True)
    assert sim.ledger.jobs["j"].state == "completed"


@pytest.mark.parametrize(
    "service, skipped",
    [
        (admission.Admission, r"admission/0 .* skipped as quiet .* JobAdmitted"),
        (quota.Quota, r"quota/0 .* skipped as quiet .* FairShareUpdated"),
        (agent.SimulatedAgent, r"node-agent/sim .* skipped as quiet .* Member"),
    ],
)
def test_a_wrong_declaration_stops_checking_mode_at_the_skipped_decide(
    monkeypatch, service, skipped
):
    # given steps that declare they read nothing, the service is skipped once it was quiet
    wrong = reading_nothing(service)
    assert ev.GangPlaced in wrong.unaffected_by and ev.JobSubmitted in wrong.unaffected_by
    monkeypatch.setattr(f"gpuledger.replay.simulator.{service.__name__}", wrong)
    # then checking mode asks the skipped decide and names it: it would act on job j
    with pytest.raises(DecideDrift, match=skipped):
        simulate(from_document(one_job_later()), check=True)
