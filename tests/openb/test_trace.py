"""Reading the openb node and pod lists (including pod lists without optional columns).

Expected numbers are those of the slices in tests/fixtures/openb (every 12th row of the real
trace), counted from the CSV text independently of the loader (awk, see the fixtures' README).
"""

import csv

from gpuledger.replay.openb.trace import Task, load_nodes, load_tasks
from gpuledger.services.placement import MemberRequest


def test_gpu_node_list(openb_dir):
    nodes = load_nodes(openb_dir / "openb_node_list_gpu_node.csv")
    assert len(nodes) == 102
    assert sum(n.num_gpu for n in nodes) == 498
    assert nodes[0].name == "openb-node-0000" and nodes[0].model == "P100"
    assert nodes[1].name == "openb-node-0012" and nodes[1].num_gpu == 2
    spec = nodes[0].spec()
    assert len({g.clique for g in spec.gpus}) == 1 and {g.sharing for g in spec.gpus} == {"mps"}
    all_nodes = load_nodes(openb_dir / "openb_node_list_all_node.csv")
    assert len(all_nodes) == 98  # of 127 rows: the 29 CPU-only nodes are dropped
    assert all(n.num_gpu > 0 for n in all_nodes)


def test_default_pod_list(openb_dir):
    tasks = load_tasks(openb_dir / "openb_pod_list_default.csv")
    assert len(tasks) == 680
    assert tasks[1] == Task("openb-pod-0012", 8000, 32768, 1, 1000)
    assert tasks[1].member() == MemberRequest(gpus=1, cpu_milli=8000, memory_mib=32768)
    shared = next(t for t in tasks if t.shared)
    assert shared == Task("openb-pod-0132", 4000, 15258, 1, 220)
    assert shared.member() == MemberRequest(gpu_milli=220, cpu_milli=4000, memory_mib=15258)
    assert sum(t.gpu_request_milli for t in tasks) == 512_150
    assert sum(1 for t in tasks if t.num_gpu == 0) == 95


def test_gpuspec25_pod_list_adds_model_constraints_to_a_quarter_of_gpu_tasks(openb_dir):
    default = load_tasks(openb_dir / "openb_pod_list_default.csv")
    spec25 = load_tasks(openb_dir / "openb_pod_list_gpuspec25.csv")
    assert [t.name for t in spec25] == [t.name for t in default]
    assert [t.gpu_spec for t in default if t.gpu_spec] == []
    constrained = [t for t in spec25 if t.gpu_spec]
    assert len(constrained) == 142 and all(t.num_gpu > 0 for t in constrained)
    assert 0.2 < len(constrained) / sum(1 for t in spec25 if t.num_gpu) < 0.3  # 142 of 585
    assert all(t.member().gpu_models == t.gpu_spec for t in constrained)


def test_pod_list_variant_without_optional_columns(openb_dir, tmp_path):
    src = openb_dir / "openb_pod_list_default.csv"
    slim = tmp_path / "slim.csv"
    with open(src, newline="") as f, open(slim, "w", newline="") as out:
        rows = list(csv.DictReader(f))[:200]
        w = csv.DictWriter(out, ["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"])
        w.writeheader()
        for r in rows:
            w.writerow({k: r[k] for k in w.fieldnames})
    assert load_tasks(slim) == load_tasks(src)[:200]


def test_gpu_spec_restricts_models(tmp_path):
    f = tmp_path / "spec.csv"
    f.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
        "p,1000,10,1,1000,V100M16|V100M32\nq,1000,10,2,1000,\n"
    )
    p, q = load_tasks(f)
    assert p.member() == MemberRequest(
        gpus=1, cpu_milli=1000, memory_mib=10, gpu_models=("V100M16", "V100M32")
    )
    assert q.member().gpus == 2 and q.member().gpu_models == ()
