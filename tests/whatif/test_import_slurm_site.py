"""The site's policy is recorded with a Slurm import (issue 41): given a site's `slurm.conf`,
`sacctmgr show qos -P` and `sacctmgr show assoc -P`, when `gpuledger import slurm` reads them
(`--slurm-conf --qos --assoc`), then a typed record of partitions, priority weights, QOS,
accounts and enforcement is written beside the log (`OUT.site.json`), the recorded
configuration keeps only the protections the site had (`PreemptExemptTime` as the minimum
runtime; no eviction budget, no aging), a timed-out run stops `OverTimeLimit` after its
limit, and a malformed value stops the import with one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from typer.testing import CliRunner

from gpuledger import events as ev
from gpuledger.replay.importers.slurm import import_slurm
from gpuledger.replay.importers.slurm_site import (
    SiteAccount,
    SitePartition,
    SitePolicy,
    SiteQos,
    read_site,
)
from gpuledger.replay.logio import read_log
from gpuledger.replay.whatif import external_inputs, replay
from gpuledger.services.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
SLURM = ROOT / "tests" / "fixtures" / "slurm"
REAL = ROOT / "tests" / "fixtures" / "slurm-real"
GPU_A = tuple(f"gpu-a0{i}" for i in range(1, 5))


def test_a_production_like_site_is_read_into_one_typed_record():
    site = read_site(SLURM / "slurm.conf", SLURM / "qos.txt", SLURM / "assoc.txt")
    assert site is not None
    assert site.partitions == (
        # PartitionName=DEFAULT gives MaxTime and PreemptMode to the lines after it
        SitePartition(name="gpu", nodes=GPU_A, priority_tier=1, preempt_mode="REQUEUE",
                      max_time_s=2 * 86_400, default=True),
        # a `\` continues the line
        SitePartition(name="urgent", nodes=(*GPU_A, "gpu-h01", "gpu-h02"), priority_tier=10,
                      preempt_mode="OFF", max_time_s=4 * 3600, grace_time_s=120),
        SitePartition(name="long", nodes=(), all_nodes=True, preempt_mode="REQUEUE",
                      max_time_s=None),
    )  # fmt: skip
    assert (site.priority_type, site.weights) == (
        "priority/multifactor",
        {"age": 1000, "fairshare": 10000, "jobsize": 0, "partition": 2000, "qos": 5000},
    )
    assert (site.priority_max_age_s, site.priority_decay_half_life_s) == (7 * 86_400, 14 * 86_400)
    assert (site.preempt_type, site.preempt_mode, site.preempt_exempt_time_s) == (
        "preempt/qos",
        "REQUEUE",
        600,
    )
    assert (site.kill_wait_s, site.over_time_limit_s) == (30, 120)
    assert (site.sched_interval_s, site.bf_interval_s, site.kill_invalid_depend) == (30, 45, True)
    assert site.qos == (
        SiteQos(name="normal", priority=50, preempt=("scavenger",), preempt_mode="cluster"),
        SiteQos(name="high", priority=100, preempt=("normal", "scavenger"),
                preempt_mode="requeue", preempt_exempt_time_s=300, grace_time_s=120),
        SiteQos(name="scavenger", priority=10, preempt_mode="cancel"),
        SiteQos(name="debug", priority=80, preempt_mode="cluster"),
    )  # fmt: skip
    # accounts: the rows without a user; `parent` shares its parent's
    assert site.accounts == (
        SiteAccount(name="root", shares=1),
        SiteAccount(name="physics", parent="root", shares=60),
        SiteAccount(name="chem", parent="root", shares=40),
        SiteAccount(name="chem-ml", parent="chem", shares=None),
    )


def test_the_real_slurm_s_own_files_are_read():
    """The files a real Slurm 22.05 wrote (tests/fixtures/slurm-real, the harness's cluster)."""
    site = read_site(REAL / "slurm.conf", REAL / "qos.txt", REAL / "assoc.txt")
    assert [(p.name, p.priority_tier, p.preempt_mode, p.max_time_s) for p in site.partitions] == [
        ("low", 1, "REQUEUE", 600),
        ("high", 10, "OFF", 600),
    ]
    assert (site.preempt_type, site.preempt_mode, site.kill_wait_s) == (
        "preempt/partition_prio",
        "REQUEUE",
        2,
    )
    assert (site.sched_interval_s, site.bf_interval_s, site.priority_type) == (
        2,
        2,
        "priority/basic",
    )
    assert site.qos == (SiteQos(name="normal", priority=0, preempt_mode="cluster"),)
    assert [(a.name, a.shares) for a in site.accounts] == [("root", 1), ("bio", 1), ("physics", 1)]


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    d = tmp_path_factory.mktemp("site")
    out = d / "slurm.jsonl"
    summary = import_slurm(
        SLURM / "sacct-dependencies.txt",
        out,
        sinfo=SLURM / "sinfo.txt",
        slurm_conf=SLURM / "slurm.conf",
        qos=SLURM / "qos.txt",
        assoc=SLURM / "assoc.txt",
    ).summary
    return summary, out, list(read_log(out))


def test_the_record_is_written_beside_the_log(imported):
    summary, out, _ = imported
    written = Path(summary["site_policy"])
    assert written == out.with_name("slurm.site.json")
    record = msgspec.json.decode(written.read_bytes(), type=SitePolicy)
    assert record == read_site(SLURM / "slurm.conf", SLURM / "qos.txt", SLURM / "assoc.txt")


def test_the_baseline_keeps_only_the_protections_the_site_had(imported, tmp_path):
    _, _, log = imported
    policy = next(e.policy for _, _, e in log if isinstance(e, ev.PolicyConfigured))
    assert (policy.min_runtime_s, policy.eviction_budget_per_hour) == (600, 0)  # PreemptExemptTime
    assert (policy.aging_after_preemptions, policy.aging_after_wait_s) == (0, 0)
    assert policy.preemption and policy.dependency_never_satisfied == "cancel"
    # without the site's files: gpuledger's defaults, as before
    plain = tmp_path / "plain.jsonl"
    import_slurm(SLURM / "sacct-dependencies.txt", plain, sinfo=SLURM / "sinfo.txt")
    default = next(e.policy for _, _, e in read_log(plain) if isinstance(e, ev.PolicyConfigured))
    assert (default.min_runtime_s, default.eviction_budget_per_hour) == (300, 3)
    assert not plain.with_name("plain.site.json").exists()


def test_a_timeout_stops_over_time_limit_after_the_limit(imported):
    _, _, log = imported
    sim = replay(external_inputs(log))
    job = sim.ledger.jobs["3005"]  # Timelimit 02:00:00, TIMEOUT
    placed = job.placements[-1][0]
    assert job.state == "timeout"
    assert job.finished_ms - placed == (2 * 3600 + 120) * 1000  # OverTimeLimit=2 (minutes)


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("slurm.conf", "ClusterName=x\nKillWait=soon\n",
         "slurm.conf:2: KillWait: expected a whole number, got 'soon'"),
        ("slurm.conf", "PartitionName=p Nodes=n1 PriorityTier=high\n",
         "slurm.conf:1: PriorityTier: expected a whole number, got 'high'"),
        ("slurm.conf", "# x\nPartitionName=p Nodes=n1 MaxTime=forever\n",
         "slurm.conf:2: MaxTime: expected a time (minutes, [D-]HH:MM:SS, UNLIMITED), got 'forever'"),
        ("qos.txt", "Name|Priority\nnormal|high\n",
         "qos.txt:2: Priority: expected a whole number, got 'high'"),
        ("assoc.txt", "Cluster|Account|User|Share\nc|a||lots\n",
         "assoc.txt:2: Share: expected a whole number or `parent`, got 'lots'"),
        ("assoc.txt", "no table here\n", "assoc.txt:1: not a `sacctmgr ... -P` table"),
    ],
)  # fmt: skip
def test_a_malformed_value_is_one_line_exit_2(tmp_path, name, text, message):
    bad = tmp_path / name
    bad.write_text(text)
    flag = {"slurm.conf": "--slurm-conf", "qos.txt": "--qos", "assoc.txt": "--assoc"}[name]
    out = tmp_path / "x.jsonl"
    res = CliRunner().invoke(
        app,
        ["import", "slurm", "--sacct", str(SLURM / "sacct.txt"), "--sinfo",
         str(SLURM / "sinfo.txt"), "--out", str(out), flag, str(bad)],
    )  # fmt: skip
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert message in lines[0].replace(str(tmp_path) + "/", "")
    assert not out.exists()


def test_unknown_keys_are_fine(tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text("FutureKey=whatever\nSomethingElse=1 2 3\nKillWait=5\n")
    site = read_site(conf, None, None)
    assert site.kill_wait_s == 5 and site.partitions == ()


def test_the_cli_reports_the_record(tmp_path):
    out = tmp_path / "s.jsonl"
    res = CliRunner().invoke(
        app,
        ["import", "slurm", "--sacct", str(REAL / "sacct.txt"), "--sinfo", str(REAL / "sinfo.txt"),
         "--out", str(out), "--slurm-conf", str(REAL / "slurm.conf"), "--qos",
         str(REAL / "qos.txt"), "--assoc", str(REAL / "assoc.txt"), "-o", "json"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["site_policy"] == str(tmp_path / "s.site.json")
