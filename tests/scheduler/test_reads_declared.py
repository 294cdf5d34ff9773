"""What the scheduler reads, as a specification: given the tables of phases and stages, then
every unit declares what can change its answer (`reads`), and the scheduler's quiet set
(`unaffected_by`, `quiet_until_wakeup`) is derived from those declarations alone. A unit that
declares nothing (a new stage) is read as reading everything: the scheduler is then never
skipped as quiet, and this test names it. That a decide skipped as quiet is quiet is what
checking mode checks: here on a job arriving after a quiet start (and a wrong declaration
stops it at once), on random scenarios in
`test_decide_is_pure_cache_free_and_the_fold_is_incremental` (tests/properties)."""

from dataclasses import replace

import pytest

from gpuledger.events import catalog as ev
from gpuledger.replay.checking import DecideDrift
from gpuledger.replay.scenario import from_document
from gpuledger.replay.simulator import simulate
from gpuledger.services.domain.tooling import reads
from gpuledger.services.scheduler.decider import Scheduler
from gpuledger.services.scheduler.phase import Phase
from gpuledger.services.scheduler.phases import PHASES
from gpuledger.services.scheduler.stage import Stage
from gpuledger.services.scheduler.stages import STAGES

UNITS = (*PHASES, *STAGES)


def test_every_phase_and_stage_declares_what_it_reads():
    missing = reads.undeclared(UNITS)
    assert not missing, (
        f"phases/stages without `reads` (so the scheduler is never quiet): {', '.join(missing)}; "
        "declare the events or fold aggregates they read (services/domain/tooling/reads.py)"
    )


def test_the_quiet_set_is_what_no_phase_or_stage_reads():
    # given the tables, when the quiet set is derived, then it is the scheduler's own
    assert Scheduler.unaffected_by == reads.unaffected_by(UNITS)
    assert Scheduler.quiet_until_wakeup == reads.quiet_until_wakeup(UNITS)
    # and it holds what only intake or admission's side sees, and heartbeats (a wake-up)
    assert Scheduler.unaffected_by == {
        ev.JobSubmitted,
        ev.JobRejected,
        ev.RequestRefused,
        ev.DeadLettered,
        ev.NodeHeartbeat,
        ev.GpuMetricsReported,
    }
    # the queue order moves with the clock: asked at every instant
    assert Scheduler.quiet_until_wakeup is False


def test_an_event_a_unit_reads_is_never_quiet():
    for unit in UNITS:
        events = {t for t in unit.reads or () if t != reads.CLOCK}
        assert not events & Scheduler.unaffected_by, unit.name


def test_a_stage_that_declares_nothing_reads_everything():
    # given a new stage without `reads`, then the scheduler would never be skipped as quiet
    new = Stage("held", "a stage of another branch", gate=lambda rnd, job, lim: None)
    assert reads.undeclared((*UNITS, new)) == ["held"]
    assert reads.unaffected_by((*UNITS, new)) == frozenset()
    assert reads.quiet_until_wakeup((*UNITS, new)) is False
    phase = Phase("later", lambda svc, state, now_ms: [])
    assert reads.unaffected_by((*UNITS, phase)) == frozenset()


def test_a_table_that_reads_no_clock_is_quiet_until_its_wakeup():
    quiet = Phase("p", lambda svc, state, now_ms: [], reads=reads.of("nodes"))
    assert reads.quiet_until_wakeup((quiet,)) is True
    assert ev.JobSubmitted in reads.unaffected_by((quiet,))
    assert ev.NodeHeartbeat not in reads.unaffected_by((quiet,))
    clocked = Phase("q", lambda svc, state, now_ms: [], reads=reads.of(reads.CLOCK))
    assert reads.quiet_until_wakeup((quiet, clocked)) is False


def test_an_aggregate_reads_every_event_its_fold_handles():
    assert reads.of("mig") == {ev.MigReconfigurationRequested, ev.MigReconfigured}
    assert ev.JobAdmitted in reads.ADMITTED_JOBS
    assert ev.JobSubmitted not in reads.ADMITTED_JOBS


@pytest.mark.parametrize("bad", ["nodez", 3])
def test_an_unknown_read_is_a_clear_error(bad):
    with pytest.raises(ValueError, match="aggregate|not an event type"):
        reads.of(bad)


def one_job_later() -> dict:
    """One 8-GPU node; job j (4 GPUs) arrives at t=5 s, after the scheduler's quiet start."""
    return {
        "cluster": {"nodes": [{"name": "n1", "gpus": 8}]},
        "tenants": [{"name": "t", "guaranteed": 8}],
        "timeline": [
            {
                "at": 5,
                "submit": {"id": "j", "tenant": "t", "class": "train", "gpus": 4, "duration": 60},
            },
        ],
    }


class ReadsNothing(Scheduler):
    """A scheduler whose units wrongly declare that nothing can change their answers."""

    _units = tuple(replace(u, reads=reads.of()) for u in UNITS)
    unaffected_by = reads.unaffected_by(_units)
    quiet_until_wakeup = reads.quiet_until_wakeup(_units)


def test_the_derived_quiet_set_passes_checking_mode():
    # given the scheduler as its tables declare it, when a job arrives after a quiet start
    # and the simulator checks every decide it skips as quiet, then none returns anything
    sim = simulate(from_document(one_job_later()), check=True)
    assert sim.ledger.jobs["j"].state == "completed"


def test_a_wrong_declaration_stops_checking_mode_at_the_skipped_decide(monkeypatch):
    # given units that declare they read nothing, the scheduler is skipped once it was quiet
    assert ReadsNothing.quiet_until_wakeup and ev.JobAdmitted in ReadsNothing.unaffected_by
    monkeypatch.setattr("gpuledger.replay.simulator.Scheduler", ReadsNothing)
    # then checking mode asks the skipped decide and names it: it would place j
    with pytest.raises(
        DecideDrift, match=r"scheduler/0 .* skipped as quiet .* returns .*GangPlaced"
    ):
        simulate(from_document(one_job_later()), check=True)
