"""The baseline's gap to what happened, per metric (issue 41's acceptance numbers): a real
Slurm dump imported with the site's files (`--slurm-conf --qos --assoc`, so the `slurm`
profile with the site's values), replayed under that recorded configuration, and compared
with the observed column (the import's observation sidecar, i.e. what sacct says).

Metrics and tolerances (the goal; `within` says whether a number meets it):
- final states (completed / failed incl. timeout / cancelled) and jobs never started: exact;
- preemptions: within 1;
- GPU-hours: within 2 %;
- waits (first start - submit, jobs that started) p50 and p99, overall and per account:
  within max(30 %, 15 s).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from gpuledger.replay import observed as obs
from gpuledger.replay.importers.slurm import import_slurm
from gpuledger.replay.logio import read_log
from gpuledger.replay.metrics import job_counts, measure, measure_observed, percentile
from gpuledger.replay.whatif import external_inputs, replay

STATES = ("completed", "failed", "cancelled")


@dataclass(frozen=True)
class Gap:
    metric: str
    observed: float | None
    baseline: float | None
    tolerance: str

    @property
    def within(self) -> bool:
        o, b = self.observed, self.baseline
        if o is None or b is None:
            return o == b
        if self.tolerance == "exact":
            return o == b
        if self.tolerance == "±1":
            return abs(b - o) <= 1
        if self.tolerance == "2 %":
            return abs(b - o) <= 0.02 * abs(o)
        return abs(b - o) <= max(0.30 * abs(o), 15.0)  # max(30 %, 15 s)

    def row(self) -> str:
        def f(x: float | None) -> str:
            return "—" if x is None else f"{x:g}"

        mark = "yes" if self.within else "**no**"
        return f"| {self.metric} | {f(self.observed)} | {f(self.baseline)} | {self.tolerance} | {mark} |"


def waits(pairs: list[tuple[str, float]]) -> dict[str, list[float]]:
    """(tenant, wait s) -> waits by tenant plus `all`, each sorted."""
    out: dict[str, list[float]] = defaultdict(list)
    for tenant, w in pairs:
        out[tenant].append(w)
        out["all"].append(w)
    return {k: sorted(v) for k, v in out.items()}


def import_with_site(
    dump: Path, out: Path, sacct: str = "sacct.txt", sinfo: str = "sinfo-partitions.txt"
) -> None:
    """`gpuledger import slurm` of a dump folder with the site's slurm.conf, QOS and accounts."""
    import_slurm(
        dump / sacct,
        out,
        sinfo=dump / sinfo,
        slurm_conf=dump / "slurm.conf",
        qos=dump / "qos.txt",
        assoc=dump / "assoc.txt",
    )


def gaps(dump: Path, work: Path) -> list[Gap]:
    """Import `dump` (sacct.txt, sinfo-partitions.txt, slurm.conf, qos.txt, assoc.txt) into
    `work`, replay it under the recorded configuration and measure the gap per metric."""
    log = work / "slurm.jsonl"
    import_with_site(dump, log)
    header, observations = obs.read(obs.sidecar(log))
    seen = list(observations)
    observed = measure_observed(header, iter(seen)).metrics
    sim = replay(external_inputs(list(read_log(log))))
    base = measure(sim.log).metrics
    counts = job_counts(sim.ledger)
    out = [Gap(f"jobs {s}", observed["jobs"][s], counts.get(s, 0), "exact") for s in STATES]
    out.append(
        Gap(
            "jobs never started",
            sum(observed["never_placed_by_class"].values()),
            sum(base["never_placed_by_class"].values()),
            "exact",
        )
    )
    out.append(Gap("preemptions", observed["preemptions"], base["preemptions"], "±1"))
    out.append(
        Gap("GPU-hours", round(observed["gpu_hours"], 4), round(base["gpu_hours"], 4), "2 %")
    )
    seen_waits = waits(
        [
            (o.tenant, (o.first_start - o.submit_ms) / 1000)
            for o in seen
            if o.first_start is not None and not o.started_before
        ]
    )
    replay_waits = waits(
        [
            (j.tenant, (j.placements[0][0] - j.submitted_ms) / 1000)
            for j in sim.ledger.jobs.values()
            if j.placements  # an array's own record is never placed: its tasks are
        ]
    )
    for who in sorted(seen_waits, key=lambda k: (k != "all", k)):
        for q, label in ((0.5, "p50"), (0.99, "p99")):
            out.append(
                Gap(
                    f"wait {label} {who} (s)",
                    percentile(seen_waits[who], q),
                    percentile(replay_waits.get(who, []), q),
                    "max(30 %, 15 s)",
                )
            )
    return out


def per_job_wait_error(dump: Path, work: Path) -> tuple[float | None, float | None, int]:
    """|replay wait - observed wait| over the jobs that started in both (the import in
    `work` by `gaps`): (median, mean, jobs)."""
    header, observations = obs.read(obs.sidecar(work / "slurm.jsonl"))
    seen = {
        o.job: (o.first_start - o.submit_ms) / 1000
        for o in observations
        if o.first_start is not None and not o.started_before
    }
    sim = replay(external_inputs(list(read_log(work / "slurm.jsonl"))))
    errors = sorted(
        abs((j.placements[0][0] - j.submitted_ms) / 1000 - seen[j.job_id])
        for j in sim.ledger.jobs.values()
        if j.placements and j.job_id in seen
    )
    if not errors:
        return None, None, 0
    return percentile(errors, 0.5), sum(errors) / len(errors), len(errors)
