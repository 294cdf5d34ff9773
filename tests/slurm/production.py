"""A production-like real Slurm workload (issue 41, "Tested for real"): a few minutes of jobs
of seconds on `RealSlurm(production=True)` (multifactor priority: age, fair share over the
accounts `physics` 50 / `bio` 30 / `ml` 20 shares, QOS `normal` 10 / `high` 100; partitions
`low` (tier 1, `PreemptMode=REQUEUE`) and `high` (tier 10)), exported
with the docs' commands (`workload.export`).

Wave 1, all at once (about 60 jobs):
- arrays with `%N` throttles: `ptrain` 0-11%3 (one GPU), `pprep` 0-7%2 and `bsweep` 0-9%2
  (a `1g.10gb` slice), `mlsweep` 0-5%2 (one GPU);
- `mltrain1..4` (two GPUs, 8 s; the first with QOS `high`), `eval1..3` (QOS `high`), `mpi`
  (two nodes), `cpu1..2` (no GPU);
- failures `fail1..3` (`exit 1`), timeouts `slow1..2` (`--time=1`, would sleep 300 s);
- dependencies: `post` afterok on the whole `ptrain` array, `report` afterany on `fail1`,
  `never` afterok on `fail2` (cancelled once Slurm says DependencyNeverSatisfied), `chain`
  afterok on
  `mltrain1`;
- cancels: `cancelrun1..2` cancelled once running, `cancelpend` (all of n1) cancelled while
  pending; a hold: `held`, released once wave 2 is in.

Wave 2, once at least 6 jobs run: `urgent1..3` (partition `high`, two GPUs) and `urgentmig`
(`high`, two `1g.10gb` slices) preempt `low` jobs; each preempted job is requeued and, like an
operator would, made eligible at once (`scontrol update StartTime=now`: Slurm would hold it
back 120 s).

Nothing here sleeps: every step polls `squeue`/`sacct` for the state it waits for.
"""

from __future__ import annotations

from tests.slurm.realslurm import RealSlurm, poll
from tests.slurm.workload import (
    TERMINAL,
    Workload,
    in_sacct,
    sacct_states,
    sbatch,
    squeue_reasons,
    squeue_states,
)

GPU1 = "--gres=gpu:1"
MIG1 = "--gres=gpu:1g.10gb:1"


def _low(account: str, *args: str) -> list[str]:
    return ["--partition=low", f"--account={account}", *args]


def _wave1(s: RealSlurm, j: dict[str, str]) -> None:
    j["ptrain"] = sbatch(
        s, "ptrain", *_low("physics", GPU1, "--array=0-11%3"),
        wrap="sleep $((4 + SLURM_ARRAY_TASK_ID % 3))",
    )  # fmt: skip
    j["pprep"] = sbatch(s, "pprep", *_low("physics", MIG1, "--array=0-7%2"), wrap="sleep 3")
    j["bsweep"] = sbatch(s, "bsweep", *_low("bio", MIG1, "--array=0-9%2"), wrap="sleep 5")
    j["mlsweep"] = sbatch(s, "mlsweep", *_low("ml", GPU1, "--array=0-5%2"), wrap="sleep 4")
    for i in range(1, 5):
        qos = ["--qos=high"] if i == 1 else []
        j[f"mltrain{i}"] = sbatch(
            s, f"mltrain{i}", *_low("ml", "--gres=gpu:2", *qos), wrap="sleep 8"
        )
    for i in range(1, 4):
        j[f"eval{i}"] = sbatch(s, f"eval{i}", *_low("physics", GPU1, "--qos=high"), wrap="sleep 3")
    j["mpi"] = sbatch(
        s, "mpi", *_low("physics", "--nodes=2", "--ntasks-per-node=1", GPU1), wrap="srun sleep 4"
    )
    for i in range(1, 3):
        j[f"cpu{i}"] = sbatch(s, f"cpu{i}", *_low("bio", "--cpus-per-task=2"), wrap="sleep 2")
    for i in range(1, 4):
        j[f"fail{i}"] = sbatch(s, f"fail{i}", *_low("bio", GPU1), wrap="sleep 2; exit 1")
    for i in range(1, 3):
        j[f"slow{i}"] = sbatch(s, f"slow{i}", *_low("ml", GPU1, "--time=1"), wrap="sleep 300")
    j["post"] = sbatch(
        s, "post", *_low("physics", GPU1, f"--dependency=afterok:{j['ptrain']}"), wrap="sleep 2"
    )
    j["report"] = sbatch(
        s, "report", *_low("bio", GPU1, f"--dependency=afterany:{j['fail1']}"), wrap="sleep 1"
    )
    j["never"] = sbatch(
        s, "never", *_low("bio", GPU1, f"--dependency=afterok:{j['fail2']}"), wrap="sleep 1"
    )
    j["chain"] = sbatch(
        s, "chain", *_low("ml", GPU1, f"--dependency=afterok:{j['mltrain1']}"), wrap="sleep 3"
    )
    for i in range(1, 3):
        j[f"cancelrun{i}"] = sbatch(s, f"cancelrun{i}", *_low("physics", GPU1), wrap="sleep 300")
    j["cancelpend"] = sbatch(
        s, "cancelpend", *_low("ml", "--nodelist=n1", "--gres=gpu:4"), wrap="sleep 5"
    )
    j["held"] = sbatch(s, "held", *_low("bio", GPU1, "--hold"), wrap="sleep 3")


def _wave2(s: RealSlurm, j: dict[str, str]) -> None:
    for i, account in enumerate(("ml", "physics", "ml"), 1):
        j[f"urgent{i}"] = sbatch(
            s, f"urgent{i}", "--partition=high", f"--account={account}", "--gres=gpu:2",
            wrap="sleep 4",
        )  # fmt: skip
    j["urgentmig"] = sbatch(
        s, "urgentmig", "--partition=high", "--account=bio", "--gres=gpu:1g.10gb:2", wrap="sleep 3"
    )


def _release_requeued(s: RealSlurm) -> None:
    """Preempted (requeued) jobs wait for their begin time: make them eligible now."""
    out = s.run("squeue", "--noheader", "--states=PENDING", "--format=%i|%r")
    for line in out.split():
        job, _, reason = line.partition("|")
        if reason == "BeginTime":
            s.run("scontrol", "update", f"jobid={job}", "StartTime=now", check=False)


def run_production(s: RealSlurm, start: str) -> Workload:
    w = Workload()
    j = w.jobs
    _wave1(s, j)
    poll(lambda: in_sacct(s, j["cancelpend"]), "the pending job in sacct")
    for name in ("cancelrun1", "cancelrun2"):
        poll(lambda n=name: squeue_states(s).get(j[n]) == "RUNNING", f"{name} running")
    s.run("scancel", j["cancelrun1"], j["cancelrun2"], j["cancelpend"])
    poll(
        lambda: sum(v == "RUNNING" for v in squeue_states(s).values()) >= 6,
        "six jobs running",
        timeout_s=120,
    )
    _wave2(s, j)
    s.run("scontrol", "release", j["held"])
    poll(
        lambda: squeue_reasons(s).get(j["never"]) == "DependencyNeverSatisfied",
        "`never` DependencyNeverSatisfied",
    )
    s.run("scancel", j["never"])

    def drained() -> bool:
        _release_requeued(s)
        if squeue_states(s):
            return False
        states = sacct_states(s, start)
        return all(v in TERMINAL for v in states.values())

    poll(drained, "the production workload to finish", timeout_s=600, every_s=1)
    return w


if __name__ == "__main__":  # pragma: no cover - `python -m tests.slurm.production OUTDIR`
    import json
    import sys
    from datetime import UTC, datetime
    from pathlib import Path

    from tests.slurm.workload import export

    out = Path(sys.argv[1])
    start = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S")
    with RealSlurm(production=True) as s:
        w = run_production(s, start)
        export(s, start, out)
        version = s.run("sinfo", "--version").strip()
    (out / "jobs.json").write_text(json.dumps({"version": version, "jobs": w.jobs}, indent=1))
    print(version, len(w.jobs))
