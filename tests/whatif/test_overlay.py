"""What-if overlays: given a recorded log, when a replay changes one key (`--set`) or applies a
policy-only file (`--policy`), then only that changes; bad keys are one typed line each."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuledger import events as ev
from gpuledger.replay.logio import write_log
from gpuledger.replay.overlay import OverlayError, apply_overlays
from gpuledger.replay.scenario import load
from gpuledger.replay.simulator import simulate
from gpuledger.replay.whatif import external_inputs, replay
from gpuledger.services.cli.main import app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def demo_log():
    return simulate(load(EXAMPLES / "demo.yaml")).log


def rejected(log):
    return [e.job_id for _, _, e in log if isinstance(e, ev.JobRejected)]


def test_set_policy_preemption_false_keeps_recorded_tenants_and_stops_preemption(demo_log):
    inputs, changes = apply_overlays(external_inputs(demo_log), ["policy.preemption=false"])
    assert changes == ["policy.preemption=False"]
    sim = replay(inputs)
    assert not any(isinstance(e, ev.PreemptionRequested) for _, _, e in sim.log)
    assert rejected(sim.log) == ["bad-job"]  # the demo's deliberate unknown tenant only
    assert sim.ledger.config.policy.preemption is False
    # the rest of the recorded policy is untouched
    recorded = replay(external_inputs(demo_log)).ledger.config.policy
    assert sim.ledger.config.policy.min_runtime_s == recorded.min_runtime_s
    assert set(sim.ledger.config.tenants) == set(recorded_tenants(demo_log))


def recorded_tenants(log):
    return {e.tenant for _, _, e in log if isinstance(e, ev.TenantConfigured)}


def test_a_policy_only_file_overlays_instead_of_replacing(demo_log, tmp_path):
    nopre = tmp_path / "nopre.yaml"
    nopre.write_text("policy: {preemption: false}\n")
    inputs, _ = apply_overlays(
        external_inputs(demo_log), files=[(str(nopre), {"policy": {"preemption": False}})]
    )
    sim = replay(inputs)
    assert rejected(sim.log) == ["bad-job"]  # the demo's deliberate unknown tenant only
    assert sim.ledger.jobs["serve"].placements[0][0] == 20_000  # waits instead of preempting


def test_set_tenant_and_class_keys(demo_log):
    inputs, _ = apply_overlays(
        external_inputs(demo_log),
        ["tenants.research.guaranteed=2", "priority_classes.train.value=60"],
    )
    sim = replay(inputs)
    assert sim.ledger.config.tenants["research"].guaranteed_gpu_milli == 2000
    assert sim.ledger.config.classes["train"].value == 60


def test_an_overlay_sets_lending_and_borrowing_limits_and_keeps_recorded_ones():
    # given a log whose prod tenant lends at most 2 of its 8
    log = simulate(load(EXAMPLES / "lending-limits.yaml")).log
    # when a what-if changes prod's guarantee and sets research's lending limit
    inputs, _ = apply_overlays(
        external_inputs(log),
        ["tenants.prod.guaranteed=6", "tenants.research.lending_limit=1"],
    )
    tenants = replay(inputs).ledger.config.tenants
    # then prod keeps its recorded lending limit, and the new limit is in force
    assert (tenants["prod"].guaranteed_gpu_milli, tenants["prod"].lending_limit_gpu_milli) == (
        6000,
        2000,
    )
    assert tenants["research"].borrowing_limit_gpu_milli == 4000
    assert tenants["research"].lending_limit_gpu_milli == 1000


def test_an_overlay_sets_a_per_model_lending_limit_and_keeps_the_recorded_ones():
    # given a log whose prod tenant lends at most 2 of its 6 guaranteed H100s
    log = simulate(load(EXAMPLES / "model-lending-limits.yaml")).log
    # when a what-if lets prod lend none of them
    inputs, _ = apply_overlays(
        external_inputs(log), ["tenants.prod.lending_limit_by_model.H100-80GB=0"]
    )
    sim = replay(inputs)
    tenants = sim.ledger.config.tenants
    assert tenants["prod"].lending_limit_by_model == {"H100-80GB": 0}
    assert tenants["research"].borrowing_limit_by_model == {"H100-80GB": 2000}
    # then research's training may no longer borrow prod's H100s: it waits for them
    reasons = [
        e.reason
        for _, _, e in sim.log
        if isinstance(e, ev.PendingReasonChanged) and e.job_id == "research-train"
    ]
    assert reasons[0] == "LendingLimit"


@pytest.mark.parametrize(
    "item, message",
    [
        (
            "policy.preemptoin=false",
            "--set policy.preemptoin=false: policy.preemptoin: unknown key (did you mean 'preemption'?)",
        ),
        (
            "polcy.preemption=false",
            "--set polcy.preemption=false: 'polcy': unknown key (did you mean 'policy'?)",
        ),
        (
            "policy.preemption_scope=galaxy",
            "policy.preemption_scope: 'galaxy' is not one of cluster, tenant",
        ),
        ("policy.min_runtime_s=-3", "policy.min_runtime_s: must be >= 0"),
        (
            "tenants.reserch.guaranteed=1",
            "no tenant 'reserch' in the recorded configuration (did you mean 'research'?)",
        ),
        (
            "tenants.research.guarantee=1",
            "tenants.research.guarantee: unknown key (did you mean 'guaranteed'?)",
        ),
        ("policy.preemption", "expected KEY=VALUE"),
        (
            "policy.slurm.bf_interval=2",
            "policy.slurm.bf_interval: unknown key (did you mean 'backfill_interval_s'?)",
        ),
        ("policy.slurm.backfill_interval_s=-1", "backfill_interval_s"),
    ],
)
def test_bad_set_items_are_one_clear_line(demo_log, item, message):
    with pytest.raises(OverlayError) as err:
        apply_overlays(external_inputs(demo_log), [item])
    assert message in str(err.value)
    assert len(err.value.problems) == 1


def test_policy_file_unknown_keys_and_timelines_are_refused(demo_log):
    with pytest.raises(
        OverlayError, match=r"f.yaml: policy.preemptio: unknown key \(did you mean 'preemption'\?\)"
    ):
        apply_overlays(
            external_inputs(demo_log), files=[("f.yaml", {"policy": {"preemptio": False}})]
        )
    with pytest.raises(OverlayError, match="cannot hold a timeline"):
        apply_overlays(external_inputs(demo_log), files=[("f.yaml", {"timeline": []})])
    with pytest.raises(OverlayError, match="polcy: unknown key"):
        apply_overlays(external_inputs(demo_log), files=[("f.yaml", {"polcy": {}})])


def test_cli_replay_with_set_and_policy(demo_log, tmp_path):
    log = tmp_path / "live.jsonl"
    write_log(log, demo_log)
    nopre = tmp_path / "nopre.yaml"
    nopre.write_text("policy: {preemption: false}\n")
    r = CliRunner().invoke(
        app, ["replay", str(log), "--policy", str(nopre), "--out", str(tmp_path / "b.jsonl")]
    )
    assert r.exit_code == 0, r.output
    assert "'rejected': 1" in r.output and "preemptions 0" in r.output
    r = CliRunner().invoke(
        app,
        ["replay", str(log), "--set", "policy.preemtion=false", "--out", str(tmp_path / "c.jsonl")],
    )
    assert r.exit_code == 2
    assert (
        "error: --set policy.preemtion=false: policy.preemtion: unknown key (did you mean 'preemption'?)"
        in r.output
    )


def test_a_policy_only_config_warns_and_points_to_policy(demo_log, tmp_path):
    log = tmp_path / "live.jsonl"
    write_log(log, demo_log)
    nopre = tmp_path / "nopre.yaml"
    nopre.write_text("policy: {preemption: false}\n")
    r = CliRunner().invoke(
        app, ["replay", str(log), "--config", str(nopre), "--out", str(tmp_path / "b.jsonl")]
    )
    assert r.exit_code == 0, r.output
    assert "defines no tenants: every job will be rejected (UnknownTenant)" in r.output
    assert f"use --policy {nopre}" in r.output


def _checkpoints(inputs) -> dict[str, ev.CheckpointPolicy]:
    return {
        e.job.job_id: e.job.checkpoint for _, e in inputs.timeline if isinstance(e, ev.JobSubmitted)
    }


def test_an_overlay_can_assume_checkpointing_for_every_job_or_by_class(demo_log):
    from gpuledger.replay.importers.checkpoint import NO_SAVE_S

    base = external_inputs(demo_log)
    # --set: every job checkpoints every 30 min and saves in 60 s when evicted
    inputs, changes = apply_overlays(base, ["checkpoint.interval=30m", "checkpoint.save=60s"])
    assert {(c.interval_s, c.save_s) for c in _checkpoints(inputs).values()} == {(1800, 60)}
    assert changes == ["checkpoint.interval='30m'", "checkpoint.save='60s'"]
    # --set checkpoint=none: no job can save
    inputs, _ = apply_overlays(base, ["checkpoint=none"])
    assert {c.save_s for c in _checkpoints(inputs).values()} == {NO_SAVE_S}
    # a --policy file: by class, the rest none
    classes = {e.job.priority_class for _, e in base.timeline if isinstance(e, ev.JobSubmitted)}
    cls = sorted(classes)[0]
    doc = {"checkpoint": {"default": "none", "classes": {cls: {"interval": "1h", "save": "2m"}}}}
    inputs, changes = apply_overlays(base, files=[("ck.yaml", doc)])
    by_class = {
        e.job.priority_class: e.job.checkpoint
        for _, e in inputs.timeline
        if isinstance(e, ev.JobSubmitted)
    }
    assert (by_class[cls].interval_s, by_class[cls].save_s) == (3600, 120)
    assert all(c.save_s == NO_SAVE_S for k, c in by_class.items() if k != cls)
    assert changes[0].startswith("checkpoint: none")


@pytest.mark.parametrize(
    "item, message",
    [
        ("checkpoint.intervl=30m", "checkpoint.intervl: unknown key (did you mean 'interval'?)"),
        ("checkpoint.save=soon", "checkpoint.save: cannot read 'soon'"),
        ("checkpoint=sometimes", "checkpoint: expected none or {interval: 30m, save: 60s}"),
    ],
)
def test_bad_checkpoint_overlays_are_one_clear_line(demo_log, item, message):
    with pytest.raises(OverlayError) as err:
        apply_overlays(external_inputs(demo_log), [item])
    assert message in str(err.value) and len(err.value.problems) == 1


def test_an_overlay_on_a_tenant_keeps_its_users_weights_and_bounds():
    # given a log whose research tenant weighs alice 2 and bounds each user to 4 H100 GPUs
    # (examples/fair-tree.yaml, plus that bound)
    import yaml

    from gpuledger.replay.scenario import from_document

    doc = yaml.safe_load((EXAMPLES / "fair-tree.yaml").read_text())
    doc["tenants"][0]["users"]["default"] = {"gpus_by_model": {"H100-80GB": 4}}
    log = simulate(from_document(doc)).log
    # when a what-if changes another key of research
    inputs, _ = apply_overlays(external_inputs(log), ["tenants.research.limit=8"])
    users = replay(inputs, until_ms=1).ledger.config.tenants["research"].user_limits
    # then the users' configuration is kept, weights and per-model bounds included
    assert (users.weight_of("alice"), users.weight_of("bob")) == (2, 1)
    assert users.of("bob").gpu_milli_by_model == {"H100-80GB": 4000}
