"""`gpuledger demo` as a user runs it: under a minute, a preemption in its timeline, and a
projection that `why` can read afterwards."""

import pytest

from tests.integration.cluster import cli

pytestmark = pytest.mark.integration


def test_the_demo_shows_the_preemption_and_leaves_a_queryable_projection(tmp_path):
    data = tmp_path / "data"
    demo = cli("demo", "--data", str(data), timeout=120)
    assert demo.returncode == 0, demo.stderr[-2000:]
    out = demo.stdout
    assert "preempt     pretrain for serve (Reclaim)" in out
    assert "evicted     pretrain (Reclaim by serve), checkpointed, lost 0 GPU-s" in out
    assert "rejected    bad-job: UnknownTenant" in out
    summary = out.split("SUMMARY", 1)[1]
    states = {line.split()[0]: line.split()[3] for line in summary.splitlines()[2:6]}
    assert states == {
        "bad-job": "rejected",
        "notebook": "completed",
        "pretrain": "completed",
        "serve": "completed",
    }

    why = cli("why", "pretrain", "--data", str(data))
    assert why.returncode == 0, why.stderr
    assert "Preempted #1: by serve" in why.stdout and "checkpointed: yes" in why.stdout

    again = cli("demo", "--data", str(data), timeout=120)  # a second run replaces the first's data
    assert again.returncode == 0 and "preempt     pretrain for serve" in again.stdout


def test_the_demo_refuses_a_data_directory_it_did_not_create(tmp_path):
    (tmp_path / "nats").mkdir()
    out = cli("demo", "--data", str(tmp_path))
    assert out.returncode == 2 and "demo did not create" in out.stderr
