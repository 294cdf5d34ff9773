"""A small real Slurm workload and the export of its accounting (the commands the docs give).

The workload (about a minute of `sleep`s on the two nodes of `realslurm.NODES`), in two phases
whose steps wait for job states by polling `squeue`/`sacct`, never by sleeping:

phase 1, all at once:
- `mpi`: a 2-node job (`-N 2 --gres=gpu:1`, one GPU per node) running `srun sleep`;
- `arr`: an array `--array=0-3`, each task one MIG-named GPU `--gres=gpu:1g.10gb:1`;
- `fail`: exits with code 3 (FAILED);
- `cancelled`: one GPU, cancelled by `scancel` once it runs (CANCELLED after a start);
- `requeued`: one GPU, requeued by `scontrol requeue` once it runs, then completes (its first
  run would sleep 300 s, a run after a restart 4 s, so the requeue cannot race the job's end;
  a requeued job is held back 120 s by Slurm: `scontrol update jobid=N StartTime=now`);
- `dep`: `--dependency=afterok:<fail>`, cancelled once Slurm says DependencyNeverSatisfied;
- `held`: submitted `--hold`, cancelled while held (never eligible);
- `later`: submitted `--begin=now+1hour`, cancelled before it was eligible;
- `mig3g`: one `gpu:3g.40gb` GPU;
- `cpuonly`: no GPU, 2 CPUs;

phase 2, once phase 1 has finished:
- `victim`: partition `low`, all 4 GPUs of node n1 (300 s, 8 s once restarted); once it runs,
- `urgent`: partition `high` (PriorityTier 10 over 1), all 4 GPUs of n1: preempts `victim`
  (PreemptMode=REQUEUE: the victim's run ends PREEMPTED, the job is requeued and runs again).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from tests.slurm.realslurm import RealSlurm, SlurmFailed, poll

# The sacct fields `gpuledger import slurm` reads (docs/slurm-testing.md, README).
SACCT_FORMAT = (
    "JobID,JobIDRaw,JobName,User,Account,Partition,QOS,Priority,Submit,Eligible,Start,End,"
    "Elapsed,Timelimit,State,ExitCode,NNodes,NodeList,ReqTRES,AllocTRES,SubmitLine"
)
# every job state sacct knows: with -s and -E, sacct lists jobs in any state during the window,
# including jobs cancelled before they were ever eligible (held, future --begin)
SACCT_STATES = "CA,CD,DL,F,NF,OOM,PD,PR,R,RQ,RS,RV,S,TO"
SINFO_NODES = "%N|%c|%m|%G"
SINFO_PARTITIONS = "%N|%c|%m|%G|%P"

# a job that runs until it is requeued or preempted (Slurm counts restarts in
# SLURM_RESTART_COUNT), then, run again, for {again} seconds: the requeue never races the end
UNTIL_REQUEUED = (
    'if [ "${{SLURM_RESTART_COUNT:-0}}" -gt 0 ]; then sleep {again}; else sleep 300; fi'
)
TERMINAL = {
    "COMPLETED",
    "CANCELLED",
    "FAILED",
    "TIMEOUT",
    "PREEMPTED",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
}


def sacct_command(start: str, *, header: bool = True) -> list[str]:
    """The exact sacct command line of the docs (times in the cluster's local time)."""
    return [
        "sacct",
        "--allusers",
        "--duplicates",
        "--parsable2",
        *([] if header else ["--noheader"]),
        f"--starttime={start}",
        "--endtime=now",
        f"--state={SACCT_STATES}",
        f"--format={SACCT_FORMAT}",
    ]


def sinfo_command(fmt: str = SINFO_NODES) -> list[str]:
    return ["sinfo", "--Node", "--noheader", f"--format={fmt}"]


@dataclass
class Workload:
    """Job ids by name (`arr` is the array's base id)."""

    jobs: dict[str, str] = field(default_factory=dict)


def sbatch(s: RealSlurm, name: str, *args: str, wrap: str) -> str:
    out = s.run(
        "sbatch",
        "--parsable",
        f"--job-name={name}",
        "--output=/dev/null",
        f"--chdir={s.jobs_dir}",
        *args,
        f"--wrap={wrap}",
    )
    return out.strip().split(";")[0]


def in_sacct(s: RealSlurm, *jobs: str) -> bool:
    out = s.run("sacct", "--noheader", "--parsable2", f"--jobs={','.join(jobs)}", "--format=JobID")
    return set(jobs) <= set(out.split())


def squeue_reasons(s: RealSlurm) -> dict[str, str]:
    out = s.run("squeue", "--noheader", "--array", "--format=%i|%r")
    return dict(line.split("|", 1) for line in out.split() if "|" in line)


def squeue_states(s: RealSlurm) -> dict[str, str]:
    out = s.run("squeue", "--noheader", "--array", "--format=%i|%T")
    return dict(line.split("|", 1) for line in out.split() if "|" in line)


def sacct_states(s: RealSlurm, start: str) -> dict[str, str]:
    """Last state of every job allocation (no steps), as the database has it."""
    out = s.run(
        "sacct",
        "--allusers",
        "--parsable2",
        "--noheader",
        f"--starttime={start}",
        "--endtime=now",
        f"--state={SACCT_STATES}",
        "--format=JobID,State",
    )
    states: dict[str, str] = {}
    for line in out.splitlines():
        jid, _, state = line.partition("|")
        if "." not in jid:
            states[jid] = state.split()[0]
    return states


def wait_state(s: RealSlurm, job: str, state: str, timeout_s: float = 60) -> None:
    poll(lambda: squeue_states(s).get(job) == state, f"job {job} {state}", timeout_s=timeout_s)


def release_requeued(s: RealSlurm, job: str) -> None:
    """A requeued job waits 120 s (its begin time) before Slurm runs it again; once it is pending
    and its earlier run's steps are gone from the node, make it eligible now, as an operator
    would, to keep the workload short (released while its old batch step was still being torn
    down on a loaded machine, its new run ended FAILED in some CI runs)."""
    wait_state(s, job, "PENDING")
    poll(lambda: s.steps_ended(job), f"job {job}'s earlier run to end on its node")
    s.run("scontrol", "update", f"jobid={job}", "StartTime=now")


def wait_drained(s: RealSlurm, start: str, jobs: list[str], timeout_s: float = 120) -> None:
    """Until no job is queued or running and sacct shows every job in a final state."""

    def done() -> bool:
        if squeue_states(s):
            return False
        states = sacct_states(s, start)
        return all(any(k == j or k.startswith(f"{j}_") for k in states) for j in jobs) and all(
            v in TERMINAL for v in states.values()
        )

    poll(
        done,
        "the workload to finish and reach the accounting database",
        timeout_s=timeout_s,
        every_s=0.5,
    )


def run_workload(s: RealSlurm, start: str) -> Workload:
    w = Workload()
    j = w.jobs
    gpu1 = ["--partition=low", "--account=physics", "--nodelist=n1", "--gres=gpu:1"]
    j["mpi"] = sbatch(
        s,
        "mpi",
        "--partition=low",
        "--account=physics",
        "--nodes=2",
        "--ntasks-per-node=1",
        "--gres=gpu:1",
        wrap="srun sleep 3",
    )
    j["arr"] = sbatch(
        s,
        "arr",
        "--partition=low",
        "--account=bio",
        "--array=0-3",
        "--gres=gpu:1g.10gb:1",
        wrap="sleep 3",
    )
    j["mig3g"] = sbatch(
        s, "mig3g", "--partition=low", "--account=bio", "--gres=gpu:3g.40gb:1", wrap="sleep 2"
    )
    j["cpuonly"] = sbatch(
        s, "cpuonly", "--partition=low", "--account=physics", "--cpus-per-task=2", wrap="sleep 1"
    )
    j["fail"] = sbatch(s, "fail", *gpu1, wrap="sleep 1; exit 3")
    j["dep"] = sbatch(s, "dep", *gpu1, f"--dependency=afterok:{j['fail']}", wrap="sleep 1")
    j["cancelled"] = sbatch(s, "cancelled", *gpu1, wrap="sleep 300")
    j["requeued"] = sbatch(s, "requeued", *gpu1, wrap=UNTIL_REQUEUED.format(again=4))
    j["held"] = sbatch(s, "held", *gpu1, "--hold", wrap="sleep 1")
    j["later"] = sbatch(s, "later", *gpu1, "--begin=now+3600", wrap="sleep 1")
    wait_state(s, j["cancelled"], "RUNNING")
    s.run("scancel", j["cancelled"])
    # cancel them once slurmdbd has their pending record: sacct then shows Start=None (cancelled
    # before slurmctld sent that record, the same jobs show Start = End = the cancel time)
    poll(lambda: in_sacct(s, j["held"], j["later"]), "the held and --begin jobs in sacct")
    s.run("scancel", j["held"], j["later"])
    wait_state(s, j["requeued"], "RUNNING")
    s.run("scontrol", "requeue", j["requeued"])
    release_requeued(s, j["requeued"])
    # `fail` failed: `dep` can never start; cancel it
    poll(
        lambda: squeue_reasons(s).get(j["dep"]) == "DependencyNeverSatisfied",
        "the dependent job to be DependencyNeverSatisfied",
    )
    poll(lambda: in_sacct(s, j["dep"]), "the dependent job in sacct")
    s.run("scancel", j["dep"])
    wait_drained(s, start, list(j.values()))
    # phase 2: a partition-tier preemption
    j["victim"] = sbatch(
        s,
        "victim",
        "--partition=low",
        "--account=physics",
        "--nodelist=n1",
        "--gres=gpu:4",
        wrap=UNTIL_REQUEUED.format(again=8),
    )
    wait_state(s, j["victim"], "RUNNING")
    j["urgent"] = sbatch(
        s,
        "urgent",
        "--partition=high",
        "--account=bio",
        "--nodelist=n1",
        "--gres=gpu:4",
        wrap="sleep 3",
    )
    wait_state(s, j["urgent"], "RUNNING")
    release_requeued(s, j["victim"])
    wait_drained(s, start, list(j.values()))
    return w


def export(s: RealSlurm, start: str, out: Path) -> dict[str, list[str]]:
    """Write the dump files into `out`; the command line of each, by file name."""
    out.mkdir(parents=True, exist_ok=True)
    commands = {
        "sacct.txt": sacct_command(start),
        "sacct-noheader.txt": sacct_command(start, header=False),
        "sinfo.txt": sinfo_command(),
        "sinfo-partitions.txt": sinfo_command(SINFO_PARTITIONS),
        # the site's policy (`gpuledger import slurm --slurm-conf --qos --assoc`)
        "qos.txt": ["sacctmgr", "show", "qos", "-P"],
        "assoc.txt": ["sacctmgr", "show", "assoc", "-P"],
    }
    for name, argv in commands.items():
        (out / name).write_text(s.run(*argv))
    (out / "slurm.conf").write_text(s.conf.read_text())
    return commands


def job_ids(text: str) -> list[str]:
    return re.findall(r"^(\d+(?:_\d+)?)\|", text, re.M)


if __name__ == "__main__":  # pragma: no cover - `python -m tests.slurm.workload OUTDIR`
    import shlex
    import sys
    from datetime import UTC, datetime

    out = Path(sys.argv[1])
    start = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S")
    with RealSlurm() as s:
        w = run_workload(s, start)
        cmds = export(s, start, out)
        version = s.run("sinfo", "--version").strip()
    for name, argv in cmds.items():
        print(f"{shlex.join(argv)} > {name}")
    print(version)
    print(w.jobs)
    if not w.jobs:
        raise SlurmFailed("no jobs")
