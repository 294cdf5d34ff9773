"""Run metrics of an event log, each defined once.

`simulate --json` (replay.report), `compare` (replay.compare) and the DuckDB views
`run_metrics` / `wait_by_class` (projections/views.sql) compute these numbers; the first two
call `measure`, the views implement the same definitions in SQL, and
tests/replay/test_metrics.py checks all three agree on the same log.

The job lifecycle comes from one place: the log is folded with `services.domain.fold.ledger.Ledger`
(`evolve`), and job states, placements and completions are read from its records.

Window: [time of the log's first event, time of its last event]. Every metric is a function
of the log alone (not of how long a simulation kept its clock running).

Definitions (the JSON keys are a contract: add, never rename):

- `gpu_allocation_pct`: 100 x integral(allocated milli-GPU dt) / integral(capacity milli-GPU
  dt) over the window. Allocated = the sum of active allocations (a share counts its milli, a
  whole GPU 1000, a MIG slice its sevenths); capacity = 1000 x the GPUs of registered nodes
  that are not lost (a re-registration replaces a node, a heartbeat revives a lost one, as the
  ledger folds them). None when the window holds no capacity.
- `sm_activity_pct`: 100 x the mean `sm_active` over every `GpuMetricsReported` sample that
  has one; None when there is none (simulated logs).
- `wait_s_p50_by_class` / `wait_s_p99_by_class`: wait = first placement - submission, per SLO
  class (the admitted class's `slo_class`, else the priority class), over admitted jobs placed
  at least once; `never_placed_by_class` counts jobs never placed that were admitted or
  cancelled before admission judged them (as the observed column counts jobs never started). Percentile q = the
  sorted values' element at index round(q x (n - 1)) (nearest rank, no interpolation).
- `wait_s_p50` / `wait_s_p99`: the same waits over every placed job; `wait_s_p50_by_tenant`,
  `..._by_partition`, `..._by_user` (and `p99`): the same per tenant, per partition / node pool
  (the job's `partition` node selector, or what the source recorded) and per user (what the
  source recorded, else the job's `user`; a job naming none is left out), in the shape of `..._by_class` (None for a group none of whose
  jobs was placed); a job with no value for a dimension is left out of it (`JobFacts.groups`,
  `spec_groups`).
- `preemptions`: `GangEvicted` events whose reason is one of `PREEMPTION_REASONS`;
  `preemptions_by_reason` splits them; `lost_gpu_hours` = the sum of their `lost_gpu_ms` /
  3.6e6; `preemptions_declined_by_reason` counts `PreemptionDeclined` by reason.
- `jobs`: jobs by final state (`unfinished` = neither completed, failed, rejected nor
  cancelled; an array counts as its tasks, one that never had any as its task count in its
  own state); `jobs_timeout`: those of `failed` stopped at their time limit; `jobs_completed`, `jct_s_mean` / `jct_s_p50` / `jct_s_p99`: completion time =
  completion - submission over completed jobs.
- `gpu_hours`: integral(allocated milli-GPU dt) / 1000 / 3.6e6 over the window (the GPU
  time the allocations held).
- `fairness_jain`: Jain's index (sum x)^2 / (n sum x^2) over the share attainment x of every
  leaf tenant (no sub-tenant in the fair-share updates) with a positive entitlement; share
  attainment = integral(its allocated milli-GPU dt) / integral(its latest `FairShareUpdated`
  fair share dt). None when no fair-share update gives a positive share.

The **observed** column (`measure_observed`) reads an import's observation sidecar
(`replay.observed`) with the same keys and definitions, over what the source recorded:

- window: [first time seen, last time seen] of the source (the sidecar header);
- wait = first observed start - submit, per SLO class, over jobs that started in the window;
  a job with no start is never placed; a job running when the trace began (start before the
  window) is left out of waits and of never-placed;
- `gpu_hours` = the sum over every run of the GPUs it held (its own when the source
  recorded them, e.g. a Slurm `gres=gpu:1` given a whole GPU, then a MIG slice after a
  requeue; else the job's) x (end - start), clipped to the window; a missing start (started before the window) is the window start, a missing end
  (running at the end) is the window end; `gpu_allocation_pct` = that GPU time over the
  imported nodes' capacity x the window;
- `preemptions`: runs the source recorded as `PREEMPTED` (earlier runs and final states);
  `lost_gpu_hours`: their GPU time since the last checkpoint under the import's checkpoint
  assumption (the whole run when there is none, else the run time modulo the interval);
- `jobs`: final states (COMPLETED -> completed; FAILED, TIMEOUT, NODE_FAIL, PREEMPTED,
  OUT_OF_MEMORY, BOOT_FAIL, DEADLINE -> failed; CANCELLED -> cancelled; else unfinished);
  `jobs_timeout`: TIMEOUT;
  completion time = end - submit of completed jobs;
- `events`, `sm_activity_pct`, `fairness_jain`: None (the source records none of these);
  `preemptions_declined_by_reason`, `share_attainment_by_tenant`: empty.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuledger import events as ev
from gpuledger.events import Event
from gpuledger.events.reasons import JobState
from gpuledger.services.domain.fold.acceptance import admit
from gpuledger.services.domain.fold.ledger import JobRecord, Ledger

PREEMPTION_REASONS = frozenset({"Priority", "Reclaim", "Backfill", "Defragment", "Consolidate"})
"""`GangEvicted` reasons that count as a preemption (the rest: cancels, node loss...)."""

FINISHED_STATES = ("completed", "failed", "rejected", "cancelled")
COUNTED_AS = {"timeout": "failed"}
"""Final states counted under another: a job stopped at its time limit counts as failed, as
the observed column counts Slurm's `TIMEOUT` (`_FAILED_STATES`)."""

_ALLOC_EVENTS = (ev.GangPlaced, ev.GangCompleted, ev.GangFailed, ev.GangEvicted)
_NODE_EVENTS = (ev.NodeRegistered, ev.NodeLost, ev.NodeHeartbeat)


def percentile(values: list[float], q: float) -> float | None:
    """The sorted values' element at index round(q x (n - 1)); None for no values."""
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def jain(values: Iterable[float]) -> float | None:
    """Jain's fairness index (sum x)^2 / (n sum x^2); None for no values, 1.0 for all zeros."""
    xs = list(values)
    if not xs:
        return None
    sq = sum(x * x for x in xs)
    return 1.0 if sq == 0 else sum(xs) ** 2 / (len(xs) * sq)


def pct_text(value: float | None) -> str:
    """`70.9%`, or `n/a` for a metric with no value."""
    return "n/a" if value is None else f"{value:.1f}%"


@dataclass
class Measured:
    """The metrics of one log, the folded ledger they were read from, and the series the
    `compare` plots draw."""

    metrics: dict[str, Any]
    ledger: Ledger | None
    allocation: list[tuple[float, float]] = field(default_factory=list)
    """(t_s, allocation %) after every change."""
    utilisation: list[tuple[float, float]] = field(default_factory=list)
    """(t_s, mean SM activity % of the GPUs reported so far) at every metrics report."""
    waits: dict[str, list[float]] = field(default_factory=dict)
    """Per SLO class, every placed job's wait in seconds (sorted)."""
    jobs: JobFacts | None = None
    """Per job: what the fidelity report joins observed and replayed runs on."""


@dataclass
class JobFacts:
    """Per job id (an array's tasks, not the array): its wait (placed jobs), its completion
    time (completed jobs) and the groups its waits are reported under."""

    wait_s: dict[str, float] = field(default_factory=dict)
    completion_s: dict[str, float] = field(default_factory=dict)
    groups: dict[str, dict[str, str]] = field(default_factory=dict)
    """Job -> {dimension: value} over `DIMENSIONS` (a dimension with no value is absent)."""
    unmeasured: set[str] = field(default_factory=set)
    """Jobs that started, but before the window: no wait to measure (observed only)."""


DIMENSIONS = ("tenant", "partition", "user")
"""The dimensions waits are reported by besides the SLO class (`wait_s_p50_by_<dimension>`)."""

PARTITION_LABEL = "partition"
"""The node label a partition / node pool selector uses (`{partition: a100}` or, for
overlapping partitions, `{partition.debug: "true"}`: replay.importers.labels)."""


def partition_of(selector) -> str | None:
    """The partition a job's node selector names, or None."""
    for k, v in sorted((selector or {}).items()):
        if k == PARTITION_LABEL:
            return v
        if k.startswith(PARTITION_LABEL + ".") and v == "true":
            return k.split(".", 1)[1]
    return None


def spec_groups(spec) -> dict[str, str]:
    """The groups a submitted job's waits fall under, as its spec says: tenant, partition,
    user (a job naming none, `-`, is left out of the users' split)."""
    out = {"tenant": spec.tenant}
    partition = partition_of(spec.node_selector or None)
    if partition is not None:
        out["partition"] = partition
    if spec.user:
        out["user"] = spec.user
    return out


def wait_metrics(facts: JobFacts) -> dict[str, Any]:
    """`wait_s_p50`, `wait_s_p99` and their `_by_<dimension>` splits over `facts`."""
    all_waits = sorted(facts.wait_s.values())
    out: dict[str, Any] = {
        "wait_s_p50": percentile(all_waits, 0.5),
        "wait_s_p99": percentile(all_waits, 0.99),
    }
    for dim in DIMENSIONS:
        split: dict[str, list[float]] = {}
        for job, groups in facts.groups.items():
            value = groups.get(dim)
            if value is not None:  # a group none of whose jobs started: None, as by class
                bucket = split.setdefault(value, [])
                if job in facts.wait_s:
                    bucket.append(facts.wait_s[job])
        for q, name in ((0.5, "p50"), (0.99, "p99")):
            out[f"wait_s_{name}_by_{dim}"] = {g: percentile(split[g], q) for g in sorted(split)}
    return out


class Integrals:
    """The time-weighted quantities, integrated between consecutive event times while the
    ledger folds the log. `seen(event)` after each event is folded into `ledger`, whoever
    folds it: `measure` here, or a replay's own fold (`Simulator.on_event`), which then needs
    no second fold of its log (the same numbers: the simulator folds every event with the
    same `Ledger.fold`, and a fold it refuses stops the replay). Each `on_*` step handles one
    kind of event."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.start_ms: int | None = None
        self.last_t = 0
        self.n_events = 0
        self.capacity = self.allocated = 0
        self.area = self.cap_area = 0.0
        self.node_cap: dict[str, int] = {}
        self.tenant_alloc: dict[str, int] = {}
        self.alloc_since: dict[str, int] = {}
        self.received: dict[str, float] = defaultdict(float)
        self.fair: dict[str, int] = {}
        self.fair_since = 0
        self.entitled: dict[str, float] = defaultdict(float)
        self.leaf_tenants: set[str] = set()
        self.preempted: dict[str, int] = defaultdict(int)
        self.declined: dict[str, int] = defaultdict(int)
        self.lost_ms = 0
        self.sm_sum = 0.0
        self.sm_n = 0
        self.latest_sm: dict[str, float] = {}
        self.latest_sum = 0.0
        self.alloc_series: list[tuple[float, float]] = []
        self.util_series: list[tuple[float, float]] = []

    def advance(self, t: int) -> None:
        """Integrate allocation and capacity up to `t` (the window opens at the first event)."""
        self.n_events += 1
        if self.start_ms is None:
            self.start_ms = self.last_t = t
        if t > self.last_t:
            dt = t - self.last_t
            self.area += self.allocated * dt
            self.cap_area += self.capacity * dt
            self.last_t = t

    def seen(self, e: Event) -> None:
        """Integrate up to `e`, then let the step for its kind read the state it left."""
        self.advance(e.occurred_at_ms)
        if isinstance(e, _ALLOC_EVENTS):
            self.on_allocation(e)
        elif isinstance(e, _NODE_EVENTS):
            self.on_node(e)
        elif isinstance(e, ev.FairShareUpdated):
            self.on_fair_share(e)
        elif isinstance(e, ev.GpuMetricsReported):
            self.on_gpu_metrics(e)
        elif isinstance(e, ev.PreemptionDeclined):
            self.declined[e.reason] += 1

    def _point(self) -> None:
        pct = 100 * self.allocated / self.capacity if self.capacity else 0.0
        self.alloc_series.append((self.last_t / 1000, pct))

    def on_allocation(self, e: Event) -> None:
        """After the fold: count a preemption; move the tenant's allocated milli."""
        if isinstance(e, ev.GangEvicted) and e.reason in PREEMPTION_REASONS:
            self.preempted[e.reason] += 1
            self.lost_ms += e.lost_gpu_ms
        rec = self.ledger.allocations.get(e.allocation_id)
        if rec is None:
            return
        tenant = rec.tenant
        now_milli = self.ledger.tenant_gpu_milli.get(tenant, 0)
        old_milli = self.tenant_alloc.get(tenant, 0)
        if now_milli != old_milli:
            self.received[tenant] += old_milli * (
                self.last_t - self.alloc_since.get(tenant, self.last_t)
            )
            self.alloc_since[tenant] = self.last_t
            self.tenant_alloc[tenant] = now_milli
            self.allocated += now_milli - old_milli
            self._point()

    def on_node(self, e: Event) -> None:
        """After the fold: the node's capacity is its GPUs unless it is lost."""
        name = e.node.name if isinstance(e, ev.NodeRegistered) else e.node
        rec = self.ledger.nodes.get(name)
        cap = 0 if rec is None or rec.lost else 1000 * len(rec.info.gpus)
        old = self.node_cap.get(name, 0)
        if cap != old:
            self.capacity += cap - old
            self.node_cap[name] = cap
            self._point()

    def on_fair_share(self, e: ev.FairShareUpdated) -> None:
        """Bank the entitlement so far; the leaf tenants' new shares hold from now on."""
        tenants = {s.tenant for s in e.shares}
        parents: set[str] = set()
        for path in tenants:
            while "/" in path:
                path = path.rsplit("/", 1)[0]
                parents.add(path)
        leaves = tenants - parents
        self.leaf_tenants |= leaves
        for tenant, share in self.fair.items():
            self.entitled[tenant] += share * (self.last_t - self.fair_since)
        self.fair_since = self.last_t
        self.fair = {s.tenant: s.fair_share_gpu_milli for s in e.shares if s.tenant in leaves}

    def on_gpu_metrics(self, e: ev.GpuMetricsReported) -> None:
        for s in e.samples:
            if s.sm_active is None:
                continue
            self.sm_sum += s.sm_active
            self.sm_n += 1
            key = s.mig_uuid or s.uuid
            self.latest_sum += s.sm_active - self.latest_sm.get(key, 0.0)
            self.latest_sm[key] = s.sm_active
        if self.latest_sm:
            self.util_series.append(
                (self.last_t / 1000, 100 * self.latest_sum / len(self.latest_sm))
            )

    def close(self) -> None:
        """Bank entitlement and received allocation up to the end of the window."""
        for tenant, share in self.fair.items():
            self.entitled[tenant] += share * (self.last_t - self.fair_since)
        for tenant, milli in self.tenant_alloc.items():
            self.received[tenant] += milli * (
                self.last_t - self.alloc_since.get(tenant, self.last_t)
            )

    def attainment(self) -> dict[str, float]:
        return {
            t: self.received.get(t, 0.0) / self.entitled[t]
            for t in sorted(self.entitled)
            if t in self.leaf_tenants and self.entitled[t] > 0
        }


def _fold(entries: Iterable[tuple[int, str, Event]], ledger: Ledger) -> Integrals:
    """One pass: fold each event, then let the integrals see the state it left (`advance`
    reads no state, so integrating after the fold is the same as before it)."""
    acc = Integrals(ledger)
    for seq, subject, e in entries:
        admit(ledger, seq, e, subject)  # the acceptance rules the live services apply
        acc.seen(e)
    return acc


def slo_class(job) -> str:
    """The class a job's waits are reported under."""
    return job.slo_class or job.spec.priority_class


def counted_jobs(ledger: Ledger):
    """The jobs metrics count: an array job counts as its tasks (each a job, as sacct lists
    them), not once more."""
    return [job for job in ledger.jobs.values() if not job.spec.array]


def unrecorded_tasks(ledger: Ledger) -> list[tuple[JobRecord, int, int]]:
    """Per admitted array with tasks that have no record (services/domain/fold/arrays.py):
    (the array, its tasks still unreleased: pending, those dropped when it was cancelled)."""
    return [
        (job, job.window.unreleased, job.window.dropped)
        for job in ledger.jobs.values()
        if job.window is not None
    ]


def job_counts(ledger: Ledger) -> dict[str, int]:
    """Jobs by final state, as the ledger's fold left them. An array that never had tasks
    (rejected, or cancelled before admission) counts as its tasks, in its state: the source
    lists them, and so does the observed column."""
    states: dict[str, int] = defaultdict(int)
    for job in counted_jobs(ledger):
        states[COUNTED_AS.get(job.state, job.state)] += 1
    for job in ledger.jobs.values():
        if job.spec.array and job.admitted_ms is None:
            states[COUNTED_AS.get(job.state, job.state)] += job.spec.array.count
    for _, unreleased, dropped in unrecorded_tasks(ledger):  # tasks with no record
        states[JobState.pending] += unreleased
        states[JobState.cancelled] += dropped
    return {
        "submitted": sum(states.values()),
        **{s: states.get(s, 0) for s in FINISHED_STATES},
        "unfinished": sum(v for k, v in states.items() if k not in FINISHED_STATES),
    }


def waits_by_class(ledger: Ledger) -> tuple[dict[str, list[float]], dict[str, int]]:
    """(sorted waits in seconds of placed jobs, count of never-placed jobs) per SLO class. A
    job never placed counts whether or not admission had judged it (a job cancelled the
    instant it is submitted, as the importers replay a job that never ran, counts as the
    observed column counts it), unless admission rejected it or has not judged it yet."""
    waits: dict[str, list[float]] = defaultdict(list)
    never: dict[str, int] = defaultdict(int)
    for job in counted_jobs(ledger):
        if job.placements:
            waits[slo_class(job)].append((job.placements[0][0] - job.submitted_ms) / 1000)
        elif job.admitted_ms is not None:
            never[slo_class(job)] += 1
        elif job.state == "cancelled":  # its class as admission would have reported it
            cls = ledger.config.classes.get(job.spec.priority_class)
            never[cls.slo_class if cls is not None else slo_class(job)] += 1
    for parent, unreleased, dropped in unrecorded_tasks(ledger):  # admitted, never placed
        never[slo_class(parent)] += unreleased + dropped
    for v in waits.values():
        v.sort()
    return dict(waits), dict(never)


def completion_times(ledger: Ledger) -> list[float]:
    """Completion - submission, in seconds, of every completed job."""
    return [
        (job.finished_ms - job.submitted_ms) / 1000
        for job in counted_jobs(ledger)
        if job.state == "completed" and job.finished_ms is not None
    ]


def job_facts(ledger: Ledger, groups: Mapping[str, dict[str, str]] | None = None) -> JobFacts:
    """Per admitted counted job: wait, completion time, groups (`groups` when it names the
    job, the source's record, else `spec_groups`)."""
    facts = JobFacts()
    for job in counted_jobs(ledger):
        if job.admitted_ms is None:
            continue  # rejected (or not yet admitted): no wait, as `waits_by_class`
        job_id = job.spec.job_id
        facts.groups[job_id] = (groups or {}).get(job_id) or spec_groups(job.spec)
        if job.placements:
            facts.wait_s[job_id] = (job.placements[0][0] - job.submitted_ms) / 1000
        if job.state == "completed" and job.finished_ms is not None:
            facts.completion_s[job_id] = (job.finished_ms - job.submitted_ms) / 1000
    return facts


def measure(
    entries: Iterable[tuple[int, str, Event]],
    ledger: Ledger | None = None,
    groups: Mapping[str, dict[str, str]] | None = None,
) -> Measured:
    """Fold a log (into `ledger`, a fresh one by default) and compute its metrics; `groups`:
    job -> its groups as the source recorded them (the observation sidecar), else the spec's."""
    ledger = Ledger() if ledger is None else ledger
    return measured(_fold(entries, ledger), groups)


def measured(acc: Integrals, groups: Mapping[str, dict[str, str]] | None = None) -> Measured:
    """The metrics of the log `acc` has seen, read from the ledger that folded it (once: it
    closes the window)."""
    acc.close()
    ledger = acc.ledger
    facts = job_facts(ledger, groups)
    waits, never = waits_by_class(ledger)
    classes = sorted(set(waits) | set(never))
    jct = completion_times(ledger)
    attainment = acc.attainment()
    end_ms = acc.last_t if acc.start_ms is not None else 0
    metrics: dict[str, Any] = {
        "events": acc.n_events,
        "start_s": (acc.start_ms or 0) / 1000,
        "end_s": end_ms / 1000,
        "jobs": job_counts(ledger),
        "gpu_allocation_pct": 100 * acc.area / acc.cap_area if acc.cap_area else None,
        "sm_activity_pct": 100 * acc.sm_sum / acc.sm_n if acc.sm_n else None,
        "wait_s_p50_by_class": {c: percentile(waits.get(c, []), 0.5) for c in classes},
        "wait_s_p99_by_class": {c: percentile(waits.get(c, []), 0.99) for c in classes},
        "never_placed_by_class": {c: never.get(c, 0) for c in classes},
        **wait_metrics(facts),
        "jobs_timeout": sum(1 for j in counted_jobs(ledger) if j.state == "timeout"),
        "preemptions": sum(acc.preempted.values()),
        "preemptions_by_reason": dict(sorted(acc.preempted.items())),
        "preemptions_declined_by_reason": dict(sorted(acc.declined.items())),
        "lost_gpu_hours": acc.lost_ms / 3_600_000,
        "gpu_hours": acc.area / 1000 / 3_600_000,
        "fairness_jain": jain(attainment.values()),
        "share_attainment_by_tenant": attainment,
        "jobs_completed": len(jct),
        "jct_s_mean": sum(jct) / len(jct) if jct else None,
        "jct_s_p50": percentile(jct, 0.5),
        "jct_s_p99": percentile(jct, 0.99),
    }
    return Measured(
        metrics=metrics,
        ledger=ledger,
        allocation=acc.alloc_series,
        utilisation=acc.util_series,
        waits=waits,
        jobs=facts,
    )


# ---------------------------------------------------------------------------- observed

_FAILED_STATES = frozenset(
    {"FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}
)


def _state(state: str) -> str:
    """`CANCELLED by 0` -> `CANCELLED`."""
    return state.split()[0].upper() if state.strip() else ""


def observed_outcome(state: str) -> str:
    """The job count a source's final state falls under (see the module docstring)."""
    s = _state(state)
    if s == "COMPLETED":
        return "completed"
    if s in _FAILED_STATES:
        return "failed"
    if s == "CANCELLED":
        return "cancelled"
    return "unfinished"


def observed_groups(o) -> dict[str, str]:
    """The groups an observation's waits fall under, as the source recorded them."""
    out = {"tenant": o.tenant}
    for dim in ("partition", "user"):
        value = getattr(o, dim, None)
        if value:
            out[dim] = value
    return out


def _observed_runs(o: Any) -> list[tuple[int | None, int | None, str, int]]:
    """(start, end, state, GPU milli held) of each run of an observed job: its earlier runs
    (each with its own GPUs when the source recorded them), then its last one (a start of
    None: the window's start, for a job running when it began)."""
    ran = [
        (r.start_ms, r.end_ms, r.state, o.gpu_milli if r.gpu_milli is None else r.gpu_milli)
        for r in o.runs
        if r.start_ms is not None
    ]
    if o.start_ms is not None or o.started_before:
        ran.append((o.start_ms, o.end_ms, o.state, o.gpu_milli))
    return ran


def _allocation_series(deltas: list[tuple[int, int]], capacity: int) -> list[tuple[float, float]]:
    """Allocation % over time (s, %) from +/- milli-GPU steps, one point per instant (none
    without capacity). Sorts `deltas`."""
    series: list[tuple[float, float]] = []
    if capacity:
        deltas.sort()
        level = 0
        for i, (t, d) in enumerate(deltas):
            level += d
            if i + 1 == len(deltas) or deltas[i + 1][0] != t:
                series.append((t / 1000, 100 * level / capacity))
    return series


def measure_observed(
    header, observations: Iterable, groups: Mapping[str, dict[str, str]] | None = None
) -> Measured:
    """The observed column: `header` and `observations` of an observation sidecar
    (`replay.observed.read`), measured with this module's definitions (docstring above);
    `groups`: job -> its groups (default: `observed_groups`)."""
    w0, w1 = header.window_ms
    states: dict[str, int] = defaultdict(int)
    states_raw: dict[str, int] = defaultdict(int)
    waits: dict[str, list[float]] = defaultdict(list)
    never: dict[str, int] = defaultdict(int)
    jct: list[float] = []
    deltas: list[tuple[int, int]] = []
    gpu_ms = 0
    lost_gpu_ms = 0
    preempted = 0
    submitted = 0
    facts = JobFacts()

    def clipped(gpu_milli: int, start: int | None, end: int | None) -> int:
        nonlocal gpu_ms
        a = w0 if start is None else max(w0, start)
        b = w1 if end is None else min(w1, end)
        if b <= a or not gpu_milli:
            return 0
        gpu_ms += gpu_milli * (b - a)  # milli-GPU ms
        deltas.append((a, gpu_milli))
        deltas.append((b, -gpu_milli))
        return b - a

    for o in observations:
        submitted += 1
        outcome = observed_outcome(o.state)
        states_raw[_state(o.state)] += 1
        states[outcome] += 1
        cls = header.slo_classes.get(o.priority_class, o.priority_class)
        facts.groups[o.job] = (groups or {}).get(o.job) or observed_groups(o)
        first = o.first_start
        if o.started_before:
            facts.unmeasured.add(o.job)  # started before the window: no wait to measure
        elif first is None:
            never[cls] += 1
        else:
            waits[cls].append((first - o.submit_ms) / 1000)
            facts.wait_s[o.job] = (first - o.submit_ms) / 1000
        interval = o.checkpoint_s * 1000
        for start, end, state, gpu_milli in _observed_runs(o):
            span = clipped(gpu_milli, start, end)
            if _state(state) == "PREEMPTED":
                preempted += 1
                lost_gpu_ms += gpu_milli * (span % interval if interval > 0 else span)
        if outcome == "completed" and o.end_ms is not None:
            jct.append((o.end_ms - o.submit_ms) / 1000)
            facts.completion_s[o.job] = (o.end_ms - o.submit_ms) / 1000
    for v in waits.values():
        v.sort()
    classes = sorted(set(waits) | set(never))
    span_ms = max(0, w1 - w0)
    cap_area = header.capacity_gpu_milli * span_ms
    series = _allocation_series(deltas, header.capacity_gpu_milli)
    jct.sort()
    metrics: dict[str, Any] = {
        "events": None,
        "start_s": w0 / 1000,
        "end_s": w1 / 1000,
        "jobs": {
            "submitted": submitted,
            **{s: states.get(s, 0) for s in FINISHED_STATES},
            "unfinished": states.get("unfinished", 0),
        },
        "gpu_allocation_pct": 100 * gpu_ms / cap_area if cap_area else None,
        "sm_activity_pct": None,
        "wait_s_p50_by_class": {c: percentile(waits.get(c, []), 0.5) for c in classes},
        "wait_s_p99_by_class": {c: percentile(waits.get(c, []), 0.99) for c in classes},
        "never_placed_by_class": {c: never.get(c, 0) for c in classes},
        **wait_metrics(facts),
        "jobs_timeout": states_raw.get("TIMEOUT", 0),
        "preemptions": preempted,
        "preemptions_by_reason": {"PREEMPTED": preempted} if preempted else {},
        "preemptions_declined_by_reason": {},
        "lost_gpu_hours": lost_gpu_ms / 1000 / 3_600_000,
        "gpu_hours": gpu_ms / 1000 / 3_600_000,
        "fairness_jain": None,
        "share_attainment_by_tenant": {},
        "jobs_completed": len(jct),
        "jct_s_mean": sum(jct) / len(jct) if jct else None,
        "jct_s_p50": percentile(jct, 0.5),
        "jct_s_p99": percentile(jct, 0.99),
    }
    return Measured(metrics=metrics, ledger=None, allocation=series, waits=dict(waits), jobs=facts)
