"""The site's policy is the recorded configuration (issue 41): given a Slurm site's
`slurm.conf`, QOS and accounts, when `gpuledger import slurm --slurm-conf --qos --assoc`
records the configuration, then it selects the `slurm` queue-order and preemption profile
with the site's values (partitions -> tiers, QOS -> classes with priorities and preempt
lists, weights, accounts' shares -> tenant weights), and a replay of the real Slurm's dump
preempts as that Slurm did; a variant turns gpuledger's protections back on with `--set`."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuledger import events as ev
from gpuledger.events.slurm_policy import SlurmPartitionPolicy, SlurmQosPolicy
from gpuledger.replay.importers.slurm_site import read_site
from gpuledger.replay.logio import read_log
from gpuledger.replay.overlay import apply_overlays
from gpuledger.replay.whatif import external_inputs, replay
from tests.slurm.fidelity import import_with_site

ROOT = Path(__file__).resolve().parents[2]
SLURM = ROOT / "tests" / "fixtures" / "slurm"
REAL = ROOT / "tests" / "fixtures" / "slurm-real"


def recorded_policy(log: Path) -> ev.Policy:
    return next(e.policy for _, _, e in read_log(log) if isinstance(e, ev.PolicyConfigured))


def test_the_production_like_site_selects_the_slurm_profile_with_its_values(tmp_path):
    out = tmp_path / "prod.jsonl"
    import_with_site(SLURM, out, sacct="sacct-dependencies.txt", sinfo="sinfo.txt")
    policy = recorded_policy(out)
    assert policy.profile == "slurm"
    site = policy.slurm
    assert (site.multifactor, site.preempt, site.max_age_s) == (True, "qos", 7 * 86_400)
    assert site.calc_period_s == 300  # PriorityCalcPeriod: Slurm's default, 5 minutes
    assert site.backfill_interval_s == 45  # SchedulerParameters bf_interval (sched/backfill)
    assert site.weights == {"age": 1000, "fairshare": 10000, "jobsize": 0, "partition": 2000,
                            "qos": 5000}  # fmt: skip
    assert site.partitions == {
        "gpu": SlurmPartitionPolicy(tier=1),
        "urgent": SlurmPartitionPolicy(tier=10, preemptable=False),  # PreemptMode=OFF
        "long": SlurmPartitionPolicy(tier=1),
    }
    assert site.default_partition == "gpu"
    assert site.qos["high"] == SlurmQosPolicy(priority=100, preempt=("normal", "scavenger"))
    assert site.qos["normal"] == SlurmQosPolicy(priority=50, preempt=("scavenger",))
    # fair share decays with PriorityDecayHalfLife; a preempted job stops at once (GraceTime
    # of the preemptable partitions: 0); PreemptExemptTime is the minimum runtime
    assert (policy.usage_half_life_s, policy.default_grace_s, policy.min_runtime_s) == (
        14 * 86_400,
        0,
        600,
    )
    tenants = {e.tenant: e for _, _, e in read_log(out) if isinstance(e, ev.TenantConfigured)}
    assert tenants["physics"].over_quota_weight == 60  # its Share


def test_only_the_backfill_scheduler_has_backfill_cycles(tmp_path):
    # sched/builtin (the main scheduler alone): no interval, every pass places in queue order
    conf = tmp_path / "slurm.conf"
    text = (SLURM / "slurm.conf").read_text()
    conf.write_text(text + "\nSchedulerType=sched/builtin\n")
    assert read_site(conf, None, None).profile()["backfill_interval_s"] == 0
    assert read_site(SLURM / "slurm.conf", None, None).profile()["backfill_interval_s"] == 45


def test_accounts_shares_are_tenant_weights_parent_shares_its_parents():
    site = read_site(None, None, SLURM / "assoc.txt")
    assert site.tenant_weights() == {"root": 1, "physics": 60, "chem": 40, "chem-ml": 40}


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    out = tmp_path_factory.mktemp("real") / "real.jsonl"
    import_with_site(REAL, out)
    return list(read_log(out))


def preemptions(sim) -> list[tuple[str, str]]:
    return [
        (e.job_id, e.beneficiary) for _, _, e in sim.log if isinstance(e, ev.PreemptionRequested)
    ]


def test_the_replay_preempts_as_the_real_slurm_did(real):
    # the real Slurm: job 13 (partition low, tier 1) preempted by 14 (high, tier 10), requeued
    sim = replay(external_inputs(real))
    assert preemptions(sim) == [("13", "14")]
    assert (
        sim.ledger.jobs["13"].state == "completed" and len(sim.ledger.jobs["13"].preemptions) == 1
    )


@pytest.mark.parametrize(
    "setting", ["policy.profile=native", "policy.min_runtime_s=300"], ids=["native", "protected"]
)
def test_a_variant_turns_the_native_profile_or_a_protection_back_on(real, setting):
    inputs, changes = apply_overlays(external_inputs(real), sets=[setting])
    assert len(changes) == 1
    sim = replay(inputs)
    assert preemptions(sim) == []  # same class: natively no ground; 300 s protects 13
