"""The harness's cluster is what the workload and the docs say it is (marker `slurm`)."""

from __future__ import annotations

import pytest

from tests.slurm.realslurm import CLUSTER, SlurmFailed

pytestmark = pytest.mark.slurm


def test_nodes_have_the_fake_gpus_and_both_partitions(real_slurm):
    out = real_slurm.run("sinfo", "--Node", "--noheader", "--format=%N|%c|%m|%G|%P|%t")
    rows = sorted(out.split())
    assert rows == [
        "n1|16|64000|gpu:4|high|idle",
        "n1|16|64000|gpu:4|low*|idle",
        "n2|16|64000|gpu:1g.10gb:4,gpu:3g.40gb:1|high|idle",
        "n2|16|64000|gpu:1g.10gb:4,gpu:3g.40gb:1|low*|idle",
    ]
    clusters = real_slurm.run("sacctmgr", "--noheader", "--parsable2", "show", "cluster")
    assert clusters.split("|")[0] == CLUSTER


def test_slurm_counts_the_fake_gpus_when_it_places(real_slurm):
    """Given 4 GPUs on n1 and one 3g.40gb slice on n2, when jobs ask for more, then Slurm
    refuses them: the fake devices are GPUs to Slurm, not decoration."""

    def fits(*args: str) -> bool:
        try:
            real_slurm.run("sbatch", "--test-only", *args, "--wrap=true")
        except SlurmFailed as exc:
            assert "Requested node configuration is not available" in str(exc)
            return False
        return True

    assert fits("--nodelist=n1", "--gres=gpu:4")
    assert not fits("--nodelist=n1", "--gres=gpu:5")
    assert fits("--gres=gpu:3g.40gb:1")
    assert not fits("--gres=gpu:3g.40gb:2")
    assert fits("--gres=gpu:1g.10gb:4")
    assert not fits("--nodelist=n1", "--gres=gpu:1g.10gb:1")  # n1's GPUs are untyped
