"""CSV traces pin rows to node pools: `nodes.labels` labels nodes from node columns and
`jobs.node_selector` selects them from job columns (a value map for roles), so a CPU-only
role runs only on CPU nodes in the replay; bad mappings are one line."""

from __future__ import annotations

import pytest

from gpuledger import events as ev
from gpuledger.replay.importers.common import TraceImportError
from gpuledger.replay.importers.csvtrace import import_csv
from gpuledger.replay.logio import read_log
from gpuledger.replay.whatif import external_inputs, replay

MAPPING = """\
trace: pools
time: {unit: s}
jobs:
  id: job
  submit: submit
  start: start
  end: end
  gpus: gpus
  cpu: cpu
  node_selector:
    pool: {column: role, values: {worker: gpu, ps: cpu}}
nodes:
  name: node
  cpu: cpu
  memory: {column: mem, unit: Gi}
  gpus: gpus
  gpu_model: model
  gpu_memory: {A100: 80Gi}
  labels: {pool: pool}
tenants: [{name: default, guaranteed: all}]
"""
NODES = """\
node,cpu,mem,gpus,model,pool
g1,64,512,8,A100,gpu
c1,64,256,0,,cpu
c2,64,256,0,,cpu
"""
JOBS = """\
job,role,submit,start,end,gpus,cpu
w1,worker,0,0,600,8,8
p1,ps,0,0,600,0,48
p2,ps,0,0,600,0,48
p3,ps,0,0,600,0,48
x1,,0,0,60,0,1
"""


def _files(tmp_path, mapping=MAPPING, jobs=JOBS):
    (tmp_path / "map.yaml").write_text(mapping)
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "jobs.csv").write_text(jobs)
    return tmp_path / "jobs.csv", tmp_path / "map.yaml", tmp_path / "nodes.csv"


def test_cpu_roles_stay_on_cpu_nodes(tmp_path):
    trace, mapping, nodes = _files(tmp_path)
    out = tmp_path / "out.jsonl"
    summary = import_csv(trace, out, mapping=mapping, nodes=nodes).summary
    assert summary["jobs"] == 5 and summary["node_selected"] == 4
    log = list(read_log(out))
    labels = {e.node.name: e.node.labels for _, _, e in log if isinstance(e, ev.NodeRegistered)}
    assert labels == {"g1": {"pool": "gpu"}, "c1": {"pool": "cpu"}, "c2": {"pool": "cpu"}}
    jobs = {e.job.job_id: e.job for _, _, e in log if isinstance(e, ev.JobSubmitted)}
    assert jobs["p1"].node_selector == {"pool": "cpu"}
    assert not jobs["x1"].node_selector  # empty role: any node

    sim = replay(external_inputs(log))
    ran = {
        j: [(at, m.node) for at, members in rec.placements for m in members]
        for j, rec in sim.ledger.jobs.items()
    }
    # three 48-core ps jobs on two 64-core CPU nodes: the third waits (the GPU node has room
    # for it but is not in its pool)
    ps = sorted(ran["p1"] + ran["p2"] + ran["p3"])
    assert {n for _, n in ps} == {"c1", "c2"}
    assert ps[-1][0] >= 600_000
    assert ran["w1"] == [(0, "g1")]


def test_a_selector_column_missing_from_the_header_is_one_line(tmp_path):
    trace, mapping, nodes = _files(
        tmp_path, mapping=MAPPING.replace("{column: role,", "{column: rle,")
    )
    with pytest.raises(TraceImportError) as err:
        import_csv(trace, tmp_path / "o.jsonl", mapping=mapping, nodes=nodes)
    assert str(err.value) == (
        f"{trace}:1: jobs.node_selector.pool: no column 'rle' (did you mean 'role'?) "
        "(header: job,role,submit,start,end,gpus,cpu)"
    )


def test_an_unknown_role_is_a_skipped_row(tmp_path):
    trace, mapping, nodes = _files(tmp_path, jobs=JOBS + "y1,chief,0,0,60,0,1\n")
    summary = import_csv(trace, tmp_path / "o.jsonl", mapping=mapping, nodes=nodes).summary
    assert summary["skipped_rows"] == 1
    assert list(summary["skipped"]) == ["unknown role 'chief' (expected worker, ps)"]
