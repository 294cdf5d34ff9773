"""Property: whatever a Slurm or Kubernetes dump of the supported shapes holds, import ->
replay -> export keeps every job (each becomes exactly one job of the log, every one of them
is in the replayed log, none is rejected)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuledger import events as ev
from gpuledger.replay.importers.kubernetes import import_kubernetes
from gpuledger.replay.importers.slurm import import_slurm
from gpuledger.replay.logio import read_log, write_log
from gpuledger.replay.whatif import external_inputs, replay

T0 = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
HEADER = (
    "JobID|JobIDRaw|JobName|User|Account|Partition|QOS|Priority|Submit|Eligible|Start|End|Elapsed|"
    "Timelimit|State|ExitCode|NNodes|NodeList|ReqTRES|AllocTRES"
)
SETTINGS = settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _t(seconds: int | None) -> str:
    return (
        "Unknown"
        if seconds is None
        else (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S")
    )


slurm_job = st.fixed_dictionaries(
    {
        "state": st.sampled_from(
            ["COMPLETED", "FAILED", "PENDING", "RUNNING", "CANCELLED", "TIMEOUT"]
        ),
        "nodes": st.integers(1, 2),
        "gpus": st.sampled_from([0, 1, 2, 8]),
        "typed": st.booleans(),
        "submit": st.integers(0, 3600),
        "wait": st.integers(0, 600),
        "run": st.integers(1, 7200),
        "steps": st.integers(0, 2),
        "array": st.sampled_from([None, "task", "range"]),
        "qos": st.sampled_from(["normal", "high", "low"]),
        "account": st.sampled_from(["physics", "chem"]),
    }
)


def _keep_every_job(out, expected: set[str], tasks: frozenset[str] = frozenset()) -> None:
    """Every expected submission is in the log and in the replayed log; the ledger holds
    them and the `tasks` of the arrays among them."""
    log = list(read_log(out))
    imported = {e.job.job_id for _, _, e in log if isinstance(e, ev.JobSubmitted)}
    assert imported == expected
    sim = replay(external_inputs(log))
    exported = out.with_suffix(".replayed.jsonl")
    write_log(exported, sim.log)
    replayed = {e.job.job_id for _, _, e in read_log(exported) if isinstance(e, ev.JobSubmitted)}
    assert replayed == expected and set(sim.ledger.jobs) == expected | tasks
    assert not any(isinstance(e, ev.JobRejected) for _, _, e in sim.log)


@SETTINGS
@given(jobs=st.lists(slurm_job, min_size=1, max_size=15))
def test_slurm_import_replay_export_keeps_every_job(tmp_path, jobs):
    lines, expected, tasks = [HEADER], set(), set()
    for i, j in enumerate(jobs):
        base = str(1000 + i)
        if j["array"] == "task":
            jid = f"{base}_3"
        elif j["array"] == "range" and j["state"] == "PENDING":
            jid = f"{base}_[1-3%2]"
        else:
            jid = base
        # an array task or pending array record is an array job `base` of tasks `base@i`; a
        # task cancelled before it started never ran: a job of its own `base_3` (the replay
        # cancels it as it is submitted)
        if jid == f"{base}_3" and j["state"] == "CANCELLED":
            expected.add(jid)
            own_tasks: tuple[int, ...] = ()
        else:
            expected.add(base)
            own_tasks = (1, 2, 3) if "[" in jid else (3,) if "_" in jid else ()
        tasks.update(f"{base}@{t}" for t in own_tasks)
        submit = j["submit"]
        start = submit + j["wait"] if j["state"] not in ("PENDING", "CANCELLED") else None
        end = (
            None
            if j["state"] in ("PENDING", "RUNNING")
            else (start + j["run"] if start is not None else submit + j["wait"])
        )
        total = j["gpus"] * j["nodes"]
        gres = (f"gres/gpu:a100={total}," if j["typed"] and total else "") + (
            f"gres/gpu={total}," if total else ""
        )
        tres = f"billing=1,cpu={4 * j['nodes']},{gres}mem={16 * j['nodes']}G,node={j['nodes']}"
        alloc = tres if start is not None else ""
        lines.append(
            f"{jid}|{jid}|job{i}|u|{j['account']}|gpu|{j['qos']}|1|{_t(submit)}|{_t(submit)}|"
            f"{_t(start) if start is not None else 'None' if end is not None else 'Unknown'}|"
            f"{_t(end)}|00:00:00|01:00:00|{j['state']}|0:0|{j['nodes']}|n|{tres}|{alloc}"
        )
        for s in range(j["steps"]):
            step = ("batch", "extern", "0")[s]
            lines.append(
                f"{jid}.{step}|{jid}.{step}|{step}||{j['account']}||||{_t(submit)}|{_t(submit)}|"
                f"{_t(start)}|{_t(end)}|00:00:00||COMPLETED|0:0|1|n||{alloc}"
            )
    sacct, sinfo = tmp_path / "sacct.txt", tmp_path / "sinfo.txt"
    sacct.write_text("\n".join(lines) + "\n")
    sinfo.write_text("".join(f"g{k}|64|1000000|gpu:a100:8(S:0-1)\n" for k in range(4)))
    out = tmp_path / "s.jsonl"
    summary = import_slurm(sacct, out, sinfo=sinfo, run_size=5).summary
    jobs_and_tasks = len(expected) - len({t.split("@")[0] for t in tasks}) + len(tasks)
    assert summary["skipped_rows"] == 0 and summary["jobs"] == jobs_and_tasks
    _keep_every_job(out, expected, frozenset(tasks))


pod_group = st.fixed_dictionaries(
    {
        "size": st.integers(1, 3),
        "gpus": st.sampled_from([0, 1, 4, 8]),
        "phase": st.sampled_from(["Succeeded", "Failed", "Running", "Pending", "Deleted"]),
        "created": st.integers(0, 3600),
        "run": st.integers(1, 7200),
        "ns": st.sampled_from(["a", "b"]),
    }
)


def _pod(ns, name, gpus, created, phase, run, labels, annotations):
    start = created + 5
    ts = lambda s: (T0 + timedelta(seconds=s)).strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: E731
    status = {"phase": "Pending" if phase == "Deleted" else phase}
    meta = {
        "name": name,
        "namespace": ns,
        "creationTimestamp": ts(created),
        "labels": labels,
        "annotations": annotations,
    }
    if phase == "Deleted":
        meta["deletionTimestamp"] = ts(created + run)
    if phase in ("Succeeded", "Failed", "Running"):
        state = (
            {"running": {"startedAt": ts(start)}}
            if phase == "Running"
            else {
                "terminated": {"startedAt": ts(start), "finishedAt": ts(start + run), "exitCode": 0}
            }
        )
        status.update(startTime=ts(start), containerStatuses=[{"name": "c", "state": state}])
    res = {"requests": {"cpu": "1", "memory": "1Gi"}}
    if gpus:
        res["limits"] = {"nvidia.com/gpu": str(gpus)}
    return {
        "metadata": meta,
        "spec": {"containers": [{"name": "c", "resources": res}]},
        "status": status,
    }


@SETTINGS
@given(groups=st.lists(pod_group, min_size=1, max_size=12))
def test_kubernetes_import_replay_export_keeps_every_job(tmp_path, groups):
    pods, expected = [], set()
    for i, g in enumerate(sorted(groups, key=lambda g: g["ns"])):
        if g["size"] == 1:
            pods.append(
                _pod(g["ns"], f"p{i}", g["gpus"], g["created"], g["phase"], g["run"], {}, {})
            )
            expected.add(f"p{i}")
            continue
        expected.add(f"job{i}")
        for k in range(g["size"]):
            idx = {"batch.kubernetes.io/job-completion-index": str(k)}
            pods.append(
                _pod(
                    g["ns"],
                    f"job{i}-{k}-x",
                    g["gpus"],
                    g["created"],
                    g["phase"],
                    g["run"],
                    {"batch.kubernetes.io/job-name": f"job{i}", **idx},
                    idx,
                )
            )
    nodes = [
        {
            "metadata": {
                "name": f"g{k}",
                "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            },
            "status": {"capacity": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"}},
        }
        for k in range(4)
    ]
    pf, nf = tmp_path / "pods.json", tmp_path / "nodes.json"
    pf.write_text(json.dumps({"apiVersion": "v1", "items": pods, "kind": "List"}, indent=1))
    nf.write_text(json.dumps({"apiVersion": "v1", "items": nodes, "kind": "List"}))
    out = tmp_path / "k.jsonl"
    summary = import_kubernetes(pf, out, nodes=nf, run_size=4).summary
    assert summary["skipped_rows"] == 0 and summary["jobs"] == len(expected)
    _keep_every_job(out, expected)
