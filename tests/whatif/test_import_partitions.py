"""Slurm partitions become node labels and job node selectors: given an sinfo dump with its
partition column and sacct rows naming partitions, when imported and replayed, then every
job runs only on its partition's nodes, and jobs whose partition no node is in are counted."""

from __future__ import annotations

from gpuledger import events as ev
from gpuledger.replay.importers.labels import partition_labels
from gpuledger.replay.importers.slurm import import_slurm
from gpuledger.replay.logio import read_log
from gpuledger.replay.whatif import external_inputs, replay

HEADER = (
    "JobID|JobIDRaw|JobName|User|Account|Partition|QOS|Priority|Submit|Eligible|Start|End|Elapsed|"
    "Timelimit|State|ExitCode|NNodes|NodeList|ReqTRES|AllocTRES"
)
# sinfo --Node --noheader --format='%N|%c|%m|%G|%P': a01/a02 in a100 (the default, `*`),
# h01/h02 in h100 and in the overlapping debug partition
SINFO = """\
a01|64|1031000|gpu:a100:8(S:0-1)|a100*
a02|64|1031000|gpu:a100:8(S:0-1)|a100*
h01|64|1031000|gpu:h100:8(S:0-1)|h100
h02|64|1031000|gpu:h100:8(S:0-1)|h100
h01|64|1031000|gpu:h100:8(S:0-1)|debug
h02|64|1031000|gpu:h100:8(S:0-1)|debug
"""


def _row(job: str, partition: str, submit: int, run: int, gpus: int = 8) -> str:
    t = lambda s: f"2024-03-01T09:{s // 60:02d}:{s % 60:02d}"  # noqa: E731
    tres = f"cpu=8,gres/gpu={gpus},mem=64G,node=1"
    return (
        f"{job}|{job}|x|u|acct|{partition}|normal|1|{t(submit)}|{t(submit)}|{t(submit)}|"
        f"{t(submit + run)}|00:01:00|01:00:00|COMPLETED|0:0|1|n|{tres}|{tres}"
    )


def test_partitions_label_nodes_overlapping_ones_by_membership():
    labels = partition_labels({"a01": ["a100"], "h01": ["h100", "debug"], "h02": ["h100"]})
    assert labels == {
        "a01": {"partition": "a100"},
        "h01": {"partition.debug": "true", "partition.h100": "true"},
        "h02": {"partition.h100": "true"},
    }


def test_jobs_replay_inside_their_partition(tmp_path):
    sinfo, sacct, out = tmp_path / "sinfo.txt", tmp_path / "sacct.txt", tmp_path / "s.jsonl"
    sinfo.write_text(SINFO)
    # three 8-GPU jobs in a100 at once (two nodes: the third waits), one in debug, one in a
    # partition the sinfo does not know, one submitted to two partitions
    rows = [_row(f"1{i}", "a100", 0, 600) for i in range(3)]
    rows += [_row("20", "debug", 0, 600), _row("21", "gone", 0, 60), _row("22", "a100,h100", 0, 60)]
    sacct.write_text("\n".join([HEADER, *rows]) + "\n")
    summary = import_slurm(sacct, out, sinfo=sinfo).summary
    assert summary["jobs"] == 6 and summary["skipped_rows"] == 0
    assert summary["node_selected"] == 4
    assert summary["partition_unmatched"] == 2
    log = list(read_log(out))
    nodes = {n.name: n for _, _, e in log if isinstance(e, ev.NodeRegistered) for n in [e.node]}
    assert nodes["a01"].labels == {"partition": "a100"}
    assert nodes["h01"].labels == {"partition.debug": "true", "partition.h100": "true"}
    jobs = {e.job.job_id: e.job for _, _, e in log if isinstance(e, ev.JobSubmitted)}
    assert jobs["10"].node_selector == {"partition": "a100"}
    assert jobs["20"].node_selector == {"partition.debug": "true"}
    assert not jobs["21"].node_selector and not jobs["22"].node_selector

    sim = replay(external_inputs(log))
    ran = {
        j: sorted({m.node for _, members in rec.placements for m in members})
        for j, rec in sim.ledger.jobs.items()
    }
    assert all(ran[j] and set(ran[j]) <= {"a01", "a02"} for j in ("10", "11", "12"))
    assert ran["20"] and set(ran["20"]) <= {"h01", "h02"}
    starts = sorted(sim.ledger.jobs[j].placements[0][0] for j in ("10", "11", "12"))
    assert starts[2] - starts[0] >= 600_000  # the third a100 job waited for one to end


def test_an_sinfo_without_the_partition_column_labels_nothing(tmp_path):
    sinfo, sacct, out = tmp_path / "sinfo.txt", tmp_path / "sacct.txt", tmp_path / "s.jsonl"
    sinfo.write_text("a01|64|1031000|gpu:a100:8(S:0-1)\n")
    sacct.write_text("\n".join([HEADER, _row("1", "a100", 0, 60)]) + "\n")
    summary = import_slurm(sacct, out, sinfo=sinfo).summary
    assert "node_selected" not in summary and "partition_unmatched" not in summary
    log = list(read_log(out))
    (job,) = [e.job for _, _, e in log if isinstance(e, ev.JobSubmitted)]
    assert b"node_selector" not in ev.encode(
        next(e for _, _, e in log if isinstance(e, ev.JobSubmitted))
    )
    assert not job.node_selector
