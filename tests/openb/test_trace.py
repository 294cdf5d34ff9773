"""Reading the openb node and pod lists (including pod lists without optional columns)."""

import csv

from replay.openb.trace import Task, load_nodes, load_tasks
from services.placement import MemberRequest


def test_gpu_node_list(openb_dir):
    nodes = load_nodes(openb_dir / "openb_node_list_gpu_node.csv")
    assert len(nodes) == 1213
    assert sum(n.num_gpu for n in nodes) == 6212
    assert nodes[0].name == "openb-node-0000" and nodes[0].model == "P100"
    spec = nodes[0].spec()
    assert len({g.clique for g in spec.gpus}) == 1 and {g.sharing for g in spec.gpus} == {"mps"}
    all_nodes = load_nodes(openb_dir / "openb_node_list_all_node.csv")
    assert len(all_nodes) < 1523  # CPU-only nodes are dropped


def test_default_pod_list(openb_dir):
    tasks = load_tasks(openb_dir / "openb_pod_list_default.csv")
    assert len(tasks) == 8152
    assert tasks[1] == Task("openb-pod-0001", 6000, 12288, 1, 460)
    assert tasks[1].member() == MemberRequest(gpu_milli=460, cpu_milli=6000, memory_mib=12288)
    assert sum(t.gpu_request_milli for t in tasks) == 6_086_800
    assert sum(1 for t in tasks if t.num_gpu == 0) == 1088


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
    f.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
                 "p,1000,10,1,1000,V100M16|V100M32\nq,1000,10,2,1000,\n")
    p, q = load_tasks(f)
    assert p.member() == MemberRequest(gpus=1, cpu_milli=1000, memory_mib=10,
                                       gpu_models=("V100M16", "V100M32"))
    assert q.member().gpus == 2 and q.member().gpu_models == ()
