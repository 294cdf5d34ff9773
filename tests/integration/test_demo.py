"""`gpuledger demo` as a user runs it: under a minute, a preemption in its timeline, and a
projection that `why` can read afterwards."""

import pytest

from gpuledger.services.cli.demo import DEMO_MARK, prepare_demo_data
from tests.integration.cluster import cli

pytestmark = pytest.mark.integration


@pytest.mark.long
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


def test_a_second_demo_starts_from_nothing_in_the_data_of_the_first(tmp_path):
    """What a second run finds: the first's store and projection are removed, its mark kept
    (the live run itself is the test above)."""
    data = tmp_path / "data"
    (data / "nats" / "jetstream").mkdir(parents=True)
    (data / "nats" / "jetstream" / "msgs.blk").write_bytes(b"old events")
    for name in ("projection.duckdb", "projection.duckdb.wal", DEMO_MARK):
        (data / name).write_text("the first demo's")
    (data / "auth").mkdir()  # what the embedded server keeps for the next run

    prepare_demo_data(data)

    assert sorted(p.name for p in data.iterdir()) == [DEMO_MARK, "auth"]
    assert "the next demo run replaces" in (data / DEMO_MARK).read_text()


def test_the_demo_refuses_a_data_directory_it_did_not_create(tmp_path):
    (tmp_path / "nats").mkdir()
    out = cli("demo", "--data", str(tmp_path))
    assert out.returncode == 2 and "demo did not create" in out.stderr
