"""The openb importer: mapping, ordering, optional columns, errors, speed, and a replay."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import msgspec
import pytest

from gpuledger import events as ev
from gpuledger.replay.importers import TraceImportError, import_openb
from gpuledger.replay.importers.openb import GPU_MEMORY_GIB
from gpuledger.replay.logio import read_log, write_log
from gpuledger.replay.simulator import Simulator, standard_services
from tests.openb.conftest import OPENB_FIXTURES

TRACE = OPENB_FIXTURES  # every 12th row of the real trace (tests/fixtures/openb/README.md)

NODES = """sn,cpu_milli,memory_mib,gpu,model
node-a,64000,262144,2,V100M16
node-b,96000,786432,8,V100M32
node-c,32000,262144,0,
"""
PODS = """name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
p-ls,6000,12288,1,460,,LS,Running,0,100,0
p-be8,88000,327680,8,1000,V100M16|V100M32,BE,Succeeded,30,530,40
p-cpu,4000,8192,0,0,,Burstable,Running,10,70,10
p-pend,4000,8192,1,1000,,Guaranteed,Pending,20,90,
p-whole,4000,8192,1,1000,,be,Failed,5,25,5
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.fixture
def small(tmp_path):
    return import_openb(write(tmp_path, "pods.csv", PODS), write(tmp_path, "nodes.csv", NODES))


def test_configuration_then_nodes_then_inputs_in_time_order(small):
    entries = small.entries()
    assert [s for s, _, _ in entries] == list(range(1, len(entries) + 1))
    kinds = [type(e).__name__ for _, _, e in entries]
    assert kinds[:6] == ["TenantConfigured"] + ["PriorityClassConfigured"] * 4 + [
        "PolicyConfigured"
    ]
    assert kinds[6:9] == ["NodeRegistered"] * 3
    # p-pend never ran: cancelled as it is submitted (20 s); p-cpu and p-ls were deleted
    # while Running: cancelled at their deletion (70 s, 100 s)
    assert (
        kinds[9:] == ["JobSubmitted"] * 4 + ["JobCancelled", "JobSubmitted"] + ["JobCancelled"] * 2
    )
    times = [e.occurred_at_ms for _, _, e in entries]
    assert times == sorted(times)
    assert [e.job.job_id for _, _, e in entries if isinstance(e, ev.JobSubmitted)] == [
        "p-ls",
        "p-whole",
        "p-cpu",
        "p-pend",
        "p-be8",
    ]
    for _, subject, e in entries:
        assert subject == ev.subject_for(e)
    tenant = entries[0][2]
    assert tenant.tenant == "openb" and tenant.guaranteed_gpu_milli == 10_000


def test_qos_mapping(small):
    classes = {e.name: e for e in small.events if isinstance(e, ev.PriorityClassConfigured)}
    assert not classes["ls"].preemptible and classes["ls"].slo_class == "latency-critical"
    assert classes["guaranteed"].slo_class == classes["burstable"].slo_class == "interactive"
    assert classes["be"].preemptible and classes["be"].slo_class == "batch"
    assert (
        classes["ls"].value
        > classes["guaranteed"].value
        > classes["burstable"].value
        > classes["be"].value
    )
    jobs = {e.job.job_id: e.job for e in small.events if isinstance(e, ev.JobSubmitted)}
    assert {j: s.priority_class for j, s in jobs.items()} == {
        "p-ls": "ls",
        "p-be8": "be",
        "p-cpu": "burstable",
        "p-pend": "guaranteed",
        "p-whole": "be",
    }


def test_nodes(small):
    nodes = {e.node.name: e for e in small.events if isinstance(e, ev.NodeRegistered)}
    assert all(e.simulated and e.heartbeat_s == 0 and e.occurred_at_ms == 0 for e in nodes.values())
    b = nodes["node-b"].node
    assert len(b.gpus) == 8 and b.cpu_milli == 96000 and b.memory_mib == 786432
    assert {g.model for g in b.gpus} == {"V100M32"}
    assert {g.memory_mib for g in b.gpus} == {32 * 1024}
    assert {g.clique for g in b.gpus} == {"node-b-nvl0"}
    assert {g.sharing for g in b.gpus} == {"mps"}
    assert nodes["node-a"].node.gpus[0].memory_mib == GPU_MEMORY_GIB["V100M16"] * 1024
    assert nodes["node-c"].node.gpus == ()


def test_resources_durations_and_cancels(small):
    jobs = {e.job.job_id: e for e in small.events if isinstance(e, ev.JobSubmitted)}
    ls = jobs["p-ls"].job
    # deleted while Running: no run time of its own, cancelled at its deletion
    assert ls.resources.gpu_milli == 460 and ls.resources.gpus == 0 and ls.duration_s is None
    be8 = jobs["p-be8"]
    assert be8.occurred_at_ms == 30_000 and be8.job.duration_s == 490
    assert be8.job.resources.gpus == 8 and be8.job.resources.gpu_models == ("V100M16", "V100M32")
    assert be8.job.resources.cpu_milli == 88000 and be8.job.resources.memory_mib == 327680
    cpu = jobs["p-cpu"].job.resources
    assert cpu.gpus == 0 and cpu.gpu_milli == 0 and cpu.cpu_milli == 4000
    whole = jobs["p-whole"].job  # Failed after 20 s: replayed as a run that fails after 20 s
    assert (whole.resources.gpus, whole.duration_s, whole.ends) == (1, 20, "failed")
    assert be8.job.ends is msgspec.UNSET  # Succeeded: completes
    assert jobs["p-pend"].job.duration_s is None
    cancels = [e for e in small.events if isinstance(e, ev.JobCancelled)]
    assert [(c.job_id, c.occurred_at_ms, c.reason) for c in cancels] == [
        ("p-pend", 20_000, "DeletedBeforeScheduled"),  # never scheduled: as it is submitted
        ("p-cpu", 70_000, "CancelledWhileRunning"),
        ("p-ls", 100_000, "CancelledWhileRunning"),
    ]
    assert small.summary()["by_shape"] == {"1gpu": 2, "8gpu": 1, "cpu": 1, "share": 1}


def test_pods_without_optional_columns(tmp_path):
    pods = write(
        tmp_path,
        "pods.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\nx1,1000,100,1,500\nx2,1000,100,2,1000\n",
    )
    nodes = write(tmp_path, "nodes.csv", NODES)
    imp = import_openb(pods, nodes)
    subs = [e for e in imp.events if isinstance(e, ev.JobSubmitted)]
    assert [(s.occurred_at_ms, s.job.duration_s, s.job.priority_class) for s in subs] == [
        (0, None, "burstable"),
        (0, None, "burstable"),
    ]
    assert not any(isinstance(e, ev.JobCancelled) for e in imp.events)
    imp = import_openb(pods, nodes, default_duration_s=600)
    assert {e.job.duration_s for e in imp.events if isinstance(e, ev.JobSubmitted)} == {600}


@pytest.mark.parametrize(
    ("pods", "nodes", "message"),
    [
        ("name,num_gpu\nok,1\nbad.name,1\n", NODES, "pods.csv:3: invalid job id 'bad.name'"),
        ("name,num_gpu,qos\nok,1,LS\nq,1,Platinum\n", NODES, "pods.csv:3: unknown qos 'Platinum'"),
        ("name,num_gpu,cpu_milli\nok,1,abc\n", NODES, "pods.csv:2: cpu_milli: not a number: 'abc'"),
        ("name,cpu_milli\nok,1\n", NODES, "pods.csv:1: missing column(s) num_gpu"),
        ("name,num_gpu\nsame,1\nsame,1\n", NODES, "pods.csv:3: duplicate pod name 'same'"),
        (
            "name,num_gpu,creation_time,scheduled_time,deletion_time\nx,1,5,10,8\n",
            NODES,
            "pods.csv:2: deletion_time 8 is before scheduled_time 10",
        ),
        ("name,num_gpu,creation_time\nx,1,\n", NODES, "pods.csv:2: creation_time is empty"),
        (
            "name,num_gpu\nx,1\n",
            "sn,cpu_milli,memory_mib,gpu,model\nn1,1,1,2,H900\n",
            "nodes.csv:2: unknown GPU model 'H900'",
        ),
    ],
)
def test_bad_rows_name_file_and_line(tmp_path, pods, nodes, message):
    with pytest.raises(TraceImportError) as err:
        import_openb(write(tmp_path, "pods.csv", pods), write(tmp_path, "nodes.csv", nodes))
    assert message in str(err.value)
    assert str(tmp_path) in str(err.value)


def test_cli_import_of_a_missing_trace_says_where_to_get_it(tmp_path):
    from typer.testing import CliRunner

    from gpuledger.services.cli.main import app

    res = CliRunner().invoke(
        app,
        [
            "import",
            "alibaba-openb",
            "--pods",
            str(tmp_path / "p.csv"),
            "--nodes",
            str(write(tmp_path, "nodes.csv", NODES)),
            "--out",
            str(tmp_path / "log.jsonl"),
        ],
    )
    assert res.exit_code == 2
    assert res.output.strip() == (
        f"error: openb trace not found at {tmp_path / 'p.csv'}; get it from "
        "https://github.com/alibaba/clusterdata/tree/master/cluster-trace-gpu-v2023/csv "
        "or pass its files with --pods and --nodes"
    )
    assert not (tmp_path / "log.jsonl").exists()


def test_missing_file(tmp_path):
    with pytest.raises(TraceImportError, match="nope.csv"):
        import_openb(tmp_path / "nope.csv", write(tmp_path, "nodes.csv", NODES))


def test_the_trace_slice_imports_every_pod_node_and_cancel():
    # Given the slice of the real trace (680 pods, 102 GPU nodes; numbers counted with awk)
    imp = import_openb(TRACE / "openb_pod_list_default.csv", TRACE / "openb_node_list_gpu_node.csv")
    assert imp.jobs == 680 and imp.gpus == 498 and len(imp.nodes) == 102
    # 82 pods with no scheduled_time (deleted, never scheduled) and 426 deleted while Running
    assert imp.cancels == 508
    assert imp.never_ran == {
        "ended before it started: cancelled at its submission in the replay": 82
    }
    assert len(imp.events) == 6 + 102 + 680 + 508
    assert Counter(e.job.priority_class for e in imp.events if isinstance(e, ev.JobSubmitted)) == {
        "ls": 383,
        "be": 289,
        "burstable": 6,
        "guaranteed": 2,
    }


def test_a_full_size_trace_imports_every_pod(tmp_path):
    # Given 8,160 pods (the slice tiled 12 times under new names: the full trace's size)
    lines = (TRACE / "openb_pod_list_default.csv").read_text().splitlines()
    rows = [f"{r.split(',', 1)[0]}-{k}," + r.split(",", 1)[1] for k in range(12) for r in lines[1:]]
    pods = write(tmp_path, "pods.csv", "\n".join([lines[0], *rows]) + "\n")
    imp = import_openb(pods, TRACE / "openb_node_list_gpu_node.csv")
    out = tmp_path / "openb.jsonl"
    n = write_log(out, imp.entries())
    assert imp.jobs == 8160 and imp.cancels == 12 * 508
    assert n == len(imp.events) == 6 + 102 + 8160 + 12 * 508
    back = list(read_log(out))
    assert [s for s, _, _ in back] == list(range(1, n + 1))
    times = [e.occurred_at_ms for _, _, e in back]
    assert times == sorted(times)


def _replay(imp):
    nodes = [e.node for e in imp.events if isinstance(e, ev.NodeRegistered)]
    sim = Simulator(standard_services(nodes))
    for e in imp.events:
        if not isinstance(e, ev.JobSubmitted | ev.JobCancelled):
            sim.publish(e)
    sim.schedule(imp.inputs())
    sim.run()
    return sim


def test_replay_of_shares_and_cpu_pods_keeps_observed_run_times(tmp_path):
    pods = write(
        tmp_path,
        "pods.csv",
        """name,cpu_milli,memory_mib,num_gpu,gpu_milli,qos,creation_time,deletion_time,scheduled_time
s1,1000,1024,1,460,LS,0,100,0
s2,1000,1024,1,500,BE,10,70,12
c1,1000,1024,0,0,Burstable,20,50,20
pend,1000,1024,1,300,BE,30,90,
""",
    )
    imp = import_openb(pods, write(tmp_path, "nodes.csv", NODES))
    sim = _replay(imp)
    jobs = sim.ledger.jobs
    assert {j: r.state for j, r in jobs.items()} == {
        "s1": "completed",
        "s2": "completed",
        "c1": "completed",
        "pend": "cancelled",
    }
    assert jobs["s1"].finished_ms == 100_000
    assert jobs["s2"].finished_ms == 10_000 + 58_000  # placed at submission, runs its observed 58 s
    assert jobs["c1"].finished_ms == 50_000
    assert jobs["pend"].finished_ms == 30_000  # never scheduled: cancelled as it is submitted
    assert not jobs["pend"].placements


def test_replay_of_whole_gpu_pods_on_mps_gpus(tmp_path):
    imp = import_openb(write(tmp_path, "pods.csv", PODS), write(tmp_path, "nodes.csv", NODES))
    sim = _replay(imp)
    assert sim.ledger.jobs["p-whole"].state == "failed"  # its recorded phase
    assert sim.ledger.jobs["p-be8"].state == "completed"
