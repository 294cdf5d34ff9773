"""A real Slurm 22.05 runs a small workload; its sacct/sinfo export goes through
`gpuledger import slurm`, `replay` and `whatif` (the CLI), and what gpuledger reports must be
what sacct says.

Given the workload of `tests/slurm/workload.py` (an array, a 2-node job, a failure, a cancel, a
requeue, a partition-tier preemption, MIG-typed GPUs, jobs cancelled before they were eligible)
exported with the docs' command lines; when it is imported, replayed and compared; then job
counts, GPU counts and (once issue 36's observed baseline lands) observed times equal sacct's.

Every test runs twice: on the dump this session's real Slurm writes (`[live]`, marker `slurm`,
needs root and the Debian packages) and on the committed dump `tests/fixtures/slurm-real/`
(`[committed]`, no Slurm needed, so importer changes are checked on every machine).

Where today's importer is known to be wrong, the test states the correct behaviour and is
marked `xfail(strict=True)` naming the gap: it turns into a failure (XPASS) the day the fix
lands, and the marker is then removed.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

NO_TIME = {"", "Unknown", "None"}
NEVER_STARTED = ("held", "later", "dep")  # cancelled while pending (`dep`: live dumps only)


# -- an independent reading of the sacct dump (what sacct says) ---------------------------------


@dataclass(frozen=True)
class Run:
    """One allocation row of sacct (a job's run; a requeued job has several)."""

    line: int
    job: str
    fields: dict[str, str]

    def time(self, col: str) -> float | None:
        v = self.fields[col]
        if v in NO_TIME:
            return None
        return datetime.fromisoformat(v).replace(tzinfo=UTC).timestamp()

    @property
    def state(self) -> str:
        return self.fields["State"].split()[0]

    @property
    def started(self) -> bool:
        # a job cancelled before slurmdbd heard of it has Start = End but was never allocated
        return self.time("Start") is not None and self.fields["NodeList"] != "None assigned"

    def tres(self) -> dict[str, int]:
        text = self.fields["AllocTRES"] or self.fields["ReqTRES"]
        out = {}
        for part in text.split(","):
            k, _, v = part.partition("=")
            if k.startswith("gres/gpu"):
                out[k] = int(v)
        return out

    @property
    def gpus(self) -> int:
        return self.tres().get("gres/gpu", 0)

    @property
    def gpu_capacity(self) -> float:
        """GPUs of capacity the run held: a MIG-typed request (in AllocTRES or ReqTRES) holds
        one instance per GPU, its compute slices out of 7 (as the metrics module counts)."""
        both = self.fields["AllocTRES"] + "," + self.fields["ReqTRES"]
        mig = re.search(r"gres/gpu:(\d)g\.\d+gb=", both)
        return self.gpus * (-(-int(mig.group(1)) * 1000 // 7) / 1000 if mig else 1)

    @property
    def typed(self) -> dict[str, int]:
        return {k.split(":", 1)[1]: v for k, v in self.tres().items() if ":" in k}


def sacct_runs(path: Path) -> dict[str, list[Run]]:
    """Allocation rows (no steps) by job id, in file order."""
    lines = path.read_text().splitlines()
    header = lines[0].split("|")
    jobs: dict[str, list[Run]] = {}
    for n, text in enumerate(lines[1:], 2):
        fields = dict(zip(header, text.split("|"), strict=True))
        if "." in fields["JobID"]:
            continue
        jobs.setdefault(fields["JobID"], []).append(Run(n, fields["JobID"], fields))
    return jobs


def task_id(job: str) -> str:
    """The gpuledger id of a sacct job id: an array task `2_3` is task `2@3` of array `2`."""
    return job.replace("_", "@", 1)


def submission(job: str) -> str:
    """The submission a sacct job id is imported as: the array `2` for task `2_3`."""
    return job.split("_", 1)[0]


def nearest_rank(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[round(q * (len(s) - 1))]


# -- the CLI ------------------------------------------------------------------------------------


def gl(*args: str | Path, ok: bool = True) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("gpuledger")
    argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "gpuledger.services.cli"]
    p = subprocess.run(
        [*argv, *map(str, args)], capture_output=True, text=True, timeout=120, cwd=Path.cwd()
    )
    if ok:
        assert p.returncode == 0, f"gpuledger {' '.join(map(str, args))}: {p.stderr}"
    return p


@dataclass(frozen=True)
class Imported:
    summary: dict
    log: Path
    events: list[dict]

    def of(self, type_: str) -> list[dict]:
        return [e for e in self.events if e["type"].split(".")[0] == type_]

    def submitted(self) -> dict[str, dict]:
        return {e["job"]["job_id"]: e["job"] for e in self.of("JobSubmitted")}

    def nodes(self) -> dict[str, dict]:
        return {e["node"]["name"]: e["node"] for e in self.of("NodeRegistered")}


@pytest.fixture(scope="module")
def runs(dump) -> dict[str, list[Run]]:
    return sacct_runs(dump.sacct)


@pytest.fixture(scope="module")
def imported(dump, tmp_path_factory) -> Imported:
    log = tmp_path_factory.mktemp("import") / "slurm.jsonl"
    p = gl(
        "import", "slurm", "--sacct", dump.sacct, "--sinfo", dump.sinfo,
        "--out", log, "-o", "json",
    )  # fmt: skip
    events = [json.loads(line)["event"] for line in log.read_text().splitlines()]
    return Imported(json.loads(p.stdout), log, events)


@pytest.fixture(scope="module")
def whatif(imported, tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("whatif")
    gl(
        "whatif", imported.log, "--out", d / "report.html", "--json", d / "whatif.json",
        "--variant", "no-preemption: policy.preemption=false",
    )  # fmt: skip
    assert (d / "report.html").stat().st_size > 0
    return json.loads((d / "whatif.json").read_text())


# -- the workload really ran as planned ---------------------------------------------------------


def test_sacct_records_the_workload(dump, runs):
    """Given the workload, sacct holds every case the importers must handle."""
    j = dump.jobs
    assert dump.version.startswith("slurm-wlm 22.05") or "22.05" in dump.version
    states = {job: [r.state for r in rs] for job, rs in runs.items()}
    assert sorted(k for k in runs if k.startswith(f"{j['arr']}_")) == [
        f"{j['arr']}_{i}" for i in range(4)
    ]
    assert states[j["mpi"]] == ["COMPLETED"] and runs[j["mpi"]][0].fields["NNodes"] == "2"
    assert states[j["fail"]] == ["FAILED"]
    assert runs[j["fail"]][0].fields["ExitCode"] == "3:0"
    assert states[j["cancelled"]] == ["CANCELLED"] and runs[j["cancelled"]][0].started
    assert states[j["requeued"]] == ["REQUEUED", "COMPLETED"]
    assert states[j["victim"]] == ["PREEMPTED", "COMPLETED"]
    assert runs[j["urgent"]][0].fields["Partition"] == "high"
    never = [n for n in NEVER_STARTED if n in j]
    assert never == (["held", "later", "dep"] if dump.live else ["held", "later"])
    for name in never:
        assert states[j[name]] == ["CANCELLED"] and not runs[j[name]][0].started
    assert runs[j["held"]][0].fields["Eligible"] == "Unknown"
    assert runs[j["later"]][0].time("Eligible") > runs[j["later"]][0].time("End")
    assert runs[f"{j['arr']}_0"][0].typed == {"1g.10gb": 1}
    assert runs[j["mig3g"]][0].typed == {"3g.40gb": 1}
    sinfo = dump.sinfo.read_text()
    assert "n1|16|64000|gpu:4" in sinfo
    assert "n2|16|64000|gpu:1g.10gb:4,gpu:3g.40gb:1" in sinfo
    # in the committed dump the requeued job's re-run stands apart from its first run
    # (database order: the array's tasks came in between; a live run may or may not do so)
    first, again = (r.line for r in runs[j["requeued"]])
    assert again - first > 1 or dump.live


# -- what today's importer gets right -----------------------------------------------------------


def test_import_has_every_job_and_the_gpus_sacct_gives_whole_gpu_jobs(dump, runs, imported):
    """When the dump is imported, then there is one job per sacct job id (an array's tasks
    are the tasks of one array submission), and each job that asked for untyped GPUs has as
    many GPUs (members x GPUs per member) as sacct's gres/gpu."""
    j = dump.jobs
    jobs = imported.submitted()
    assert imported.summary["jobs"] == len(runs) == (15 if dump.live else 14)
    assert sorted(jobs) == sorted({submission(job) for job in runs})
    assert (imported.summary["arrays"], imported.summary["array_tasks"]) == (1, 4)
    whole = [job for job, rs in runs.items() if not rs[-1].typed]
    assert sorted(whole) == sorted(
        j[n] for n in ("cpuonly", "fail", "cancelled", "requeued", "victim", "urgent", *NEVER_STARTED)
        if n in j
    )  # fmt: skip
    for job in whole:
        spec = jobs[submission(job)]
        assert spec["resources"]["gpus"] * spec["replicas"] == runs[job][-1].gpus, job
    assert jobs[j["victim"]]["resources"]["gpus"] == 4
    assert jobs[j["mpi"]]["replicas"] == 2  # NNodes=2: a gang of two members
    assert {e["tenant"] for e in imported.of("TenantConfigured")} == {"physics", "bio"}
    nodes = imported.nodes()
    assert sorted(nodes) == ["n1", "n2"]
    assert len(nodes["n1"]["gpus"]) == 4  # sinfo gpu:4
    assert nodes["n1"]["cpu_milli"] == 16_000 and nodes["n1"]["memory_mib"] == 64_000


def test_jobs_cancelled_while_pending_are_cancelled_before_start(dump, runs, imported, request):
    """Given jobs cancelled while pending (held, future --begin, impossible dependency), then
    the importer cancels them before they start."""
    never = [dump.jobs[n] for n in NEVER_STARTED if n in dump.jobs]
    # (a job cancelled before slurmdbd had its record shows Start = End = the cancel time with
    # NodeList 'None assigned' and no AllocTRES: it never started)
    assert imported.summary["cancelled_before_start"] == len(never)


def test_the_submit_line_gives_the_dependency_sacct_cannot_print(dump, imported, tmp_path):
    """Given `dep`, submitted with `--dependency=afterok:<fail>` (sacct 22.05 has no
    `Dependency` column; the live dump has `SubmitLine`), when imported and replayed, then it
    depends on `fail` succeeding, and the replay withdraws it when `fail` fails as recorded."""
    header = dump.sacct.read_text().splitlines()[0].split("|")
    if "dep" not in dump.jobs:  # the committed dump predates `dep` and the SubmitLine column
        assert "SubmitLine" not in header
        return
    assert "SubmitLine" in header
    dep = imported.submitted()[dump.jobs["dep"]]
    assert dep["depends_on"] == [{"job": dump.jobs["fail"], "on": "succeeded"}]
    gl("replay", imported.log, "--out", tmp_path / "r.jsonl", "--json", tmp_path / "r.json")
    report = {job["id"]: job for job in json.loads((tmp_path / "r.json").read_text())["jobs"]}
    job = report[dump.jobs["dep"]]
    assert (job["state"], job["reason"], job["placements"]) == (
        "cancelled",
        "DependencyNeverSatisfied",
        [],
    )


def test_replay_and_whatif_run_every_job(runs, imported, whatif, tmp_path):
    """When the imported log is replayed and compared, then every sacct job is in both."""
    out = tmp_path / "replayed.jsonl"
    gl("replay", imported.log, "--out", out, "--json", tmp_path / "replay.json")
    report = json.loads((tmp_path / "replay.json").read_text())
    tasks = [job["id"] for job in report["jobs"] if "tasks" not in job]  # not the array's row
    assert sorted(tasks) == sorted(task_id(job) for job in runs)
    for name in ("recorded", "no-preemption"):
        assert whatif[name]["metrics"]["jobs"]["submitted"] == len(runs)


def test_headerless_dump_is_refused_in_one_line(dump, tmp_path):
    """Given `sacct --noheader` output, the importer answers exit 2, one line, no traceback."""
    p = gl(
        "import", "slurm", "--sacct", dump.dir / "sacct-noheader.txt",
        "--sinfo", dump.sinfo, "--out", tmp_path / "x.jsonl", ok=False,
    )  # fmt: skip
    if p.returncode == 0:
        return  # an importer that reads headerless dumps passes too (see the xfail below)
    assert p.returncode == 2
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


# -- what issue 36 asks for and today's importer does not do ------------------------------------


def test_requeued_and_preempted_runs_are_kept(dump, imported):
    s = imported.summary
    assert s["skipped_rows"] == 0, s["skipped"]
    assert s["requeued"] == 2  # job `requeued` (scontrol requeue) and `victim` (preempted)


def test_mig_gres_become_mig_instances_and_requests(dump, runs, imported):
    nodes = imported.nodes()
    n2 = nodes["n2"]["gpus"]
    assert n2 and all(g.get("sharing") == "mig" for g in n2)
    instances = Counter(p.split("@")[0] for g in n2 for p in g.get("mig_layout", ()))
    assert instances == Counter({"1g.10gb": 4, "3g.40gb": 1})
    whole = [g for n in nodes.values() for g in n["gpus"] if g.get("sharing") != "mig"]
    assert len(whole) == 4
    jobs = imported.submitted()
    for job, rs in runs.items():
        if len(rs[-1].typed) == 1 and rs[-1].fields["NNodes"] == "1":
            (profile,) = rs[-1].typed
            assert jobs[submission(job)]["resources"]["mig_profile"] == profile, job
            assert jobs[submission(job)]["resources"]["gpus"] == 0, job


def test_the_array_is_one_array_job_whose_tasks_keep_their_own_times(dump, runs, imported):
    """Given the array `--array=0-3` (task 3 waited for a free MIG slice), when imported, then
    it is one array job of 4 tasks each with its own run time, and the observed baseline has
    one record per task under the id the replay gives it (`2@3`), with sacct's times."""
    from gpuledger.replay import observed as obs

    arr = dump.jobs["arr"]
    spec = imported.submitted()[arr]
    tasks = sorted((k for k in runs if k.startswith(f"{arr}_")), key=lambda k: int(k.split("_")[1]))
    durations = [int(runs[t][-1].time("End") - runs[t][-1].time("Start")) for t in tasks]
    assert spec["array"] == {"count": 4, "max_running": None, "first": 0, "durations_s": durations}
    _, items = obs.read(obs.sidecar(imported.log))
    seen = {o.job: o for o in items}
    assert not any(k == arr for k in seen)  # the array itself was never a job of sacct's
    for t in tasks:
        o, r = seen[task_id(t)], runs[t][-1]
        assert (o.start_ms, o.end_ms, o.state) == (
            r.time("Start") * 1000,
            r.time("End") * 1000,
            r.state,
        )


def test_jobs_never_eligible_are_never_placed_in_replay(dump, imported, tmp_path):
    """Given jobs sacct shows never eligible (`--hold`: Eligible=Unknown; `--begin` after
    their End), when replayed, then they are cancelled and never placed (issue 41: a job that
    never ran is cancelled as it is submitted)."""
    gl("replay", imported.log, "--out", tmp_path / "r.jsonl", "--json", tmp_path / "r.json")
    report = {job["id"]: job for job in json.loads((tmp_path / "r.json").read_text())["jobs"]}
    for name in (n for n in NEVER_STARTED if n in dump.jobs):
        job = report[dump.jobs[name]]
        assert job["state"] == "cancelled" and not job["placements"], job


def test_partition_becomes_a_node_selector(dump, tmp_path):
    """Given sinfo with partitions (`%P`: low and high share n1 and n2), when imported, then
    each job selects its partition's nodes (shared partitions: `partition.<name>=true`)."""
    log = tmp_path / "p.jsonl"
    gl(
        "import", "slurm", "--sacct", dump.sacct,
        "--sinfo", dump.dir / "sinfo-partitions.txt", "--out", log,
    )  # fmt: skip
    imported = Imported({}, log, [json.loads(x)["event"] for x in log.read_text().splitlines()])
    jobs = imported.submitted()
    assert jobs[dump.jobs["urgent"]].get("node_selector") == {"partition.high": "true"}
    assert jobs[dump.jobs["victim"]].get("node_selector") == {"partition.low": "true"}
    labels = {n: node.get("labels") for n, node in imported.nodes().items()}
    assert labels == {n: {"partition.high": "true", "partition.low": "true"} for n in ("n1", "n2")}


def test_headerless_dump_says_the_header_is_missing(dump, imported, tmp_path):
    headerless = dump.dir / "sacct-noheader.txt"
    p = gl(
        "import", "slurm", "--sacct", headerless, "--sinfo", dump.sinfo,
        "--out", tmp_path / "x.jsonl", "-o", "json", ok=False,
    )  # fmt: skip
    if p.returncode == 0:
        assert json.loads(p.stdout)["jobs"] == imported.summary["jobs"]
    else:
        assert "header" in p.stderr.replace(str(headerless), "FILE").lower(), p.stderr


def observed_expectations(runs: dict[str, list[Run]]) -> dict:
    """The observed metrics computed straight from sacct, by issue 36's rules: wait = first
    start - first submit over jobs that started; GPU-hours = sum of gres/gpu x (End - Start)
    over every run (a preempted or requeued run included), clipped to [first time seen, last
    time seen] in the file (a MIG instance counts its compute slices out of 7)."""
    seen = [
        t
        for rs in runs.values()
        for r in rs
        for t in (r.time("Submit"), r.time("Start"), r.time("End"))
        if t is not None
    ]
    lo, hi = min(seen), max(seen)
    waits = []
    gpu_s = 0.0
    for rs in runs.values():
        started = [r for r in rs if r.started]
        if started:
            waits.append(started[0].time("Start") - rs[0].time("Submit"))
        for r in started:
            start, end = max(lo, r.time("Start")), min(hi, r.time("End") or hi)
            gpu_s += r.gpu_capacity * max(0.0, end - start)
    return {
        "jobs": len(runs),
        "never_placed": sum(1 for rs in runs.values() if not any(r.started for r in rs)),
        "failed": sum(1 for rs in runs.values() if rs[-1].state == "FAILED"),
        "preemptions": sum(1 for rs in runs.values() for r in rs if r.state == "PREEMPTED"),
        "wait_p50": nearest_rank(waits, 0.5),
        "wait_p99": nearest_rank(waits, 0.99),
        "gpu_hours": gpu_s / 3600,
    }


def test_observed_column_equals_what_sacct_says(dump, runs, whatif):
    want = observed_expectations(runs)
    assert want["never_placed"] == sum(n in dump.jobs for n in NEVER_STARTED)
    assert want["preemptions"] == 1
    obs = whatif.get("observed", {}).get("metrics", {})
    assert set(obs) >= set(whatif["recorded"]["metrics"]) | {"gpu_hours"}
    assert obs["jobs"]["submitted"] == want["jobs"]
    assert obs["jobs"]["failed"] == want["failed"] == 1
    assert obs["never_placed_by_class"]["batch"] == want["never_placed"]
    assert obs["preemptions"] == want["preemptions"]
    assert obs["wait_s_p50_by_class"]["batch"] == pytest.approx(want["wait_p50"], abs=1.0)
    assert obs["wait_s_p99_by_class"]["batch"] == pytest.approx(want["wait_p99"], rel=0.05, abs=1)
    assert obs["gpu_hours"] == pytest.approx(want["gpu_hours"], rel=0.01)
    for entry in whatif.values():
        assert "gpu_hours" in entry["metrics"]
