"""What preemption reads, as a specification: given its decide's steps and its victim rules
(`services.preemption.steps.UNITS`), then every unit declares what can change its answer and
preemption's quiet set is derived from them: it ignores heartbeats and what only intake and
admission see, and, as its rules read the clock (minimum runtimes, budgets), it is asked at
every instant."""

from gpuledger.events import catalog as ev
from gpuledger.services.domain.tooling import reads
from gpuledger.services.preemption.decider import Preemption
from gpuledger.services.preemption.rules import EXCLUSIONS, GROUNDS
from gpuledger.services.preemption.steps import UNITS


def test_every_step_ground_and_exclusion_declares_what_it_reads():
    assert set(GROUNDS) | set(EXCLUSIONS) <= set(UNITS)
    missing = reads.undeclared(UNITS)
    assert not missing, f"preemption units without `reads` (never quiet): {', '.join(missing)}"


def test_the_quiet_set_is_what_no_unit_reads():
    assert Preemption.unaffected_by == reads.unaffected_by(UNITS)
    # heartbeats and what only intake and admission see cannot make it request or decline
    assert {ev.NodeHeartbeat, ev.GpuMetricsReported, ev.JobSubmitted} <= Preemption.unaffected_by
    # what the blocked jobs, their victims and the policy are made of always counts
    moves = {ev.PendingReasonChanged, ev.GangPlaced, ev.MemberStarted, ev.PolicyConfigured}
    assert not moves & Preemption.unaffected_by
    assert Preemption.quiet_until_wakeup is False


def test_rules_that_lapse_with_time_read_the_clock():
    for rule in EXCLUSIONS:
        if rule.lapses:
            assert reads.CLOCK in rule.reads, rule.name
