"""What-if replay and verification: given a recorded log, when it is verified or replayed
(under its own or another configuration), then decisions reproduce, tampering is caught,
and replays are deterministic."""

from pathlib import Path

import msgspec
import pytest

from gpuledger import events as ev
from gpuledger.replay.export import read_any, write_any
from gpuledger.replay.logio import write_log
from gpuledger.replay.scenario import load
from gpuledger.replay.simulator import simulate
from gpuledger.replay.verify import verify
from gpuledger.replay.whatif import external_inputs, replay, with_config

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def demo_log():
    return simulate(load(EXAMPLES / "demo.yaml")).log


def test_a_clean_log_verifies_with_zero_mismatches(demo_log):
    report = verify(demo_log)
    assert report.ok and report.checked >= 20


def test_a_tampered_decision_is_caught_and_its_first_divergence_explained(demo_log):
    log = list(demo_log)
    i = next(i for i, (_, _, e) in enumerate(log) if isinstance(e, ev.JobAdmitted))
    seq, subject, e = log[i]
    log[i] = (seq, subject, msgspec.structs.replace(e, priority=999))
    report = verify(log)
    first = report.mismatches[0]
    assert (first.seq, first.event_type, first.correlation_id) == (seq, "JobAdmitted", e.job_id)
    assert "priority" in first.explanation and "999" in first.explanation


def test_a_forged_placement_that_double_books_gpus_is_reported_not_crashed(demo_log):
    log = list(demo_log)
    placed = [i for i, (_, _, e) in enumerate(log) if isinstance(e, ev.GangPlaced)]
    seq, subject, e = log[placed[0]]
    forged = msgspec.structs.replace(e, job_id="serve", allocation_id="serve#9", event_id="forged")
    log.insert(placed[0] + 1, (seq, subject, forged))
    report = verify(log)
    assert any(
        "cannot be applied" in m.explanation or m.event_type == "GangPlaced"
        for m in report.mismatches
    )


def test_replay_without_a_new_config_reproduces_the_recorded_outcomes(demo_log):
    sim = replay(external_inputs(demo_log))
    placed = lambda log: [(e.job_id, e.members) for _, _, e in log if isinstance(e, ev.GangPlaced)]  # noqa: E731
    assert placed(sim.log) == placed(demo_log)


def test_replay_under_a_policy_without_preemption_changes_the_outcome(demo_log):
    doc = {
        "tenants": [{"name": "research", "guaranteed": 8}, {"name": "product", "guaranteed": 8}],
        "policy": {"preemption": False},
    }
    sim = replay(with_config(external_inputs(demo_log), doc))
    assert not any(isinstance(e, ev.PreemptionRequested) for _, _, e in sim.log)
    serve = sim.ledger.jobs["serve"]
    assert serve.placements[0][0] == 20_000  # waits for pretrain's 20 s instead of 1 s
    assert verify(sim.log).ok


def test_observed_run_times_replace_duration_hints(demo_log):
    inputs = external_inputs(demo_log)
    specs = {e.job.job_id: e.job for _, e in inputs.timeline if isinstance(e, ev.JobSubmitted)}
    assert specs["pretrain"].duration_s == 20 and specs["serve"].duration_s == 8


def test_the_same_log_replayed_twice_gives_byte_identical_output(demo_log, tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write_log(a, replay(external_inputs(demo_log)).log)
    write_log(b, replay(external_inputs(demo_log)).log)
    assert a.read_bytes() == b.read_bytes()


def test_parquet_logs_round_trip(demo_log, tmp_path):
    path = tmp_path / "log.parquet"
    assert write_any(path, demo_log) == len(demo_log)
    assert list(read_any(path)) == list(demo_log)


def test_a_replay_measured_as_it_runs_has_the_metrics_of_its_log_measured_afterwards(demo_log):
    from gpuledger.replay.metrics import measure, measured
    from gpuledger.replay.whatif import measured_replay

    # Given the demo's inputs, with preemptions, replayed with its metrics integrated as it folds
    sim, meter = measured_replay(external_inputs(demo_log))
    live = measured(meter)
    # When the log it wrote is measured again by a fresh fold
    again = measure(sim.log)
    # Then every metric, series and per-job fact is the same, without the second fold
    assert live.metrics["preemptions"] > 0
    assert live.metrics == again.metrics
    assert live.allocation == again.allocation and live.utilisation == again.utilisation
    assert live.waits == again.waits and live.jobs == again.jobs
    assert sim.log == replay(external_inputs(demo_log)).log
