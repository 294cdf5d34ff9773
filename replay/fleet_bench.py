"""Fleet-scale placement benchmark: decisions per second and p99 time per decision.

Fleet: 500 nodes x 8 H100 (4,000 GPUs), each node one NVLink clique of 8, 16 nodes per
leaf switch; 400 nodes exclusive, 50 mps (fractions), 50 MIG. Queue: 10,000 jobs drawn
with ``random.Random(seed)``: whole-GPU jobs (1/2/4/8 GPUs), fractional shares from 40
tenants, MIG slices, CPU-only tasks and gangs of 2-32 members. Each job is one decision:
``Fleet.place`` (with the full explanation on failure, as the scheduler runs it) and, when
placed, ``Fleet.allocate``. Placed jobs leave after a random number of later decisions, so
the fleet runs at a realistic steady load with a mix of successes and failures. Release
time is not counted (it is event folding, not deciding).
"""

from __future__ import annotations

import random
import statistics
import time
from collections import Counter
from collections.abc import Callable

import msgspec

from gpuledger.services.placement import (
    Fleet,
    GangRequest,
    GpuSpec,
    MemberRequest,
    NodeSpec,
    Placement,
    TypicalTask,
)
from gpuledger.services.runtime.gctune import fewer_gc_passes

MIG_PROFILES = ("1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb")


class PolicyResult(msgspec.Struct):
    policy: str
    decisions: int
    placed: int
    decisions_per_s: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    mean_gpu_allocated_pct: float
    reasons: dict[str, int]
    cpu_decisions_per_s: float = 0.0
    """Decisions per second of this process's CPU time (``time.process_time``): the rate on
    one core with the machine's other load taken out (wall-clock figures above include it)."""
    cpu_p50_ms: float = 0.0
    cpu_p99_ms: float = 0.0
    """Percentiles of the CPU time per decision (wall-clock ones include preemption by other
    processes on a shared machine)."""
    occupancy_pct: float = 0.0
    """Mean GPU milli allocated (%) after warm-up (decisions past the longest lifetime)."""
    failed: int = 0


class FleetBenchReport(msgspec.Struct):
    nodes: int
    gpus: int
    jobs: int
    seed: int
    results: list[PolicyResult]
    lifetime_scale: float = 1.0
    """Job lifetimes (in decisions) relative to the 500-node run: nodes / 500."""


def fleet_nodes(n_nodes: int = 500, per_leaf: int = 16) -> list[NodeSpec]:
    out = []
    for i in range(n_nodes):
        name = f"node-{i:04d}"
        sharing = "mig" if i % 10 == 9 else "mps" if i % 10 == 8 else "exclusive"
        gpus = tuple(
            GpuSpec(g, f"{name}-gpu{g}", "H100", 81_920, f"{name}/nvswitch", sharing)
            for g in range(8)
        )
        out.append(
            NodeSpec(name, 224_000, 2_000_000, gpus, leaf_switch=f"leaf-{i // per_leaf:02d}")
        )
    return out


def job_queue(
    n_jobs: int = 10_000, seed: int = 7, lifetime_scale: float = 1.0
) -> list[tuple[GangRequest, int]]:
    """(gang, lifetime in decisions) pairs; lifetimes 35-600 decisions x ``lifetime_scale``
    (the jobs themselves do not depend on the scale)."""
    rng = random.Random(seed)
    out = []
    for k in range(n_jobs):
        tenant = f"tenant-{rng.randrange(40):02d}"
        roll = rng.random()
        replicas = 1
        if roll < 0.40:
            n = rng.choices((1, 2, 4, 8), (50, 20, 15, 15))[0]
            member = MemberRequest(gpus=n, cpu_milli=12_000 * n, memory_mib=65_536 * n)
        elif roll < 0.62:
            member = MemberRequest(
                gpu_milli=rng.choice((250, 500, 750)), cpu_milli=4_000, memory_mib=16_384
            )
        elif roll < 0.80:
            member = MemberRequest(
                mig_profile=rng.choice(MIG_PROFILES), cpu_milli=4_000, memory_mib=16_384
            )
        elif roll < 0.88:
            member = MemberRequest(cpu_milli=rng.choice((2_000, 8_000, 16_000)), memory_mib=8_192)
        else:
            replicas = rng.randint(2, 32)
            n = rng.choice((1, 2, 4, 8))
            member = MemberRequest(gpus=n, cpu_milli=12_000 * n, memory_mib=65_536 * n)
        lifetime = max(1, round(rng.randint(35, 600) * lifetime_scale))
        out.append((GangRequest(f"job-{k:05d}", tenant, member, replicas), lifetime))
    return out


def typical_of(queue: list[tuple[GangRequest, int]]) -> tuple[TypicalTask, ...]:
    """Typical member shapes of the queue (MIG excluded), most frequent first, to 95%."""
    counts = Counter()
    for g, _ in queue:
        m = g.member
        if m.kind == "mig":
            continue
        shape = (
            m.cpu_milli,
            m.gpus or (1 if m.gpu_milli else 0),
            m.gpu_milli or (1000 if m.gpus else 0),
        )
        counts[shape] += g.replicas
    total = sum(counts.values())
    out, acc = [], 0
    for (cpu, n, milli), c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        out.append(TypicalTask(cpu, n, milli, weight=c))
        acc += c
        if acc >= 0.95 * total:
            break
    return tuple(out)


def run_policy(
    policy: str, nodes: list[NodeSpec], queue: list[tuple[GangRequest, int]]
) -> PolicyResult:
    """One policy over the queue (young-generation GC passes spaced out, as in every replay:
    `services.runtime.gctune`)."""
    with fewer_gc_passes():
        return _run_policy(policy, nodes, queue)


def _run_policy(
    policy: str, nodes: list[NodeSpec], queue: list[tuple[GangRequest, int]]
) -> PolicyResult:
    warm = max((life for _, life in queue), default=0)
    fleet = Fleet(nodes, typical_tasks=typical_of(queue))
    capacity = fleet.capacity_gpus() * 1000
    leaving: dict[int, list[str]] = {}
    times: list[float] = []
    reasons: Counter[str] = Counter()
    placed = 0
    load: list[float] = []
    steady: list[float] = []
    clock = time.perf_counter
    cpu_clock = time.process_time
    cpu_times: list[float] = []
    for k, (gang, lifetime) in enumerate(queue):
        for alloc_id in leaving.pop(k, ()):
            fleet.release(alloc_id)
        c0 = cpu_clock()
        t0 = clock()
        result = fleet.place(gang, policy)
        if isinstance(result, Placement):
            fleet.allocate(gang.job_id, gang.tenant, result, gang)
        times.append(clock() - t0)
        cpu_times.append(cpu_clock() - c0)
        if isinstance(result, Placement):
            placed += 1
            leaving.setdefault(k + lifetime, []).append(gang.job_id)
        else:
            reasons[result.reason] += 1
        if k % 100 == 0:
            load.append(100 * sum(fleet.tenant_gpu_milli().values()) / capacity)  # type: ignore[union-attr]  # the bench's fleet tracks tenants
            if k >= warm:
                steady.append(load[-1])
    total = sum(times)
    times.sort()
    cpu_total = sum(cpu_times)
    cpu_times.sort()
    return PolicyResult(
        policy=policy,
        decisions=len(times),
        placed=placed,
        decisions_per_s=len(times) / total,
        p50_ms=1000 * times[len(times) // 2],
        p99_ms=1000 * times[min(len(times) - 1, int(len(times) * 0.99))],
        max_ms=1000 * times[-1],
        mean_gpu_allocated_pct=statistics.fmean(load),
        reasons=dict(sorted(reasons.items())),
        cpu_decisions_per_s=len(times) / cpu_total if cpu_total else 0.0,
        cpu_p50_ms=1000 * cpu_times[len(cpu_times) // 2],
        cpu_p99_ms=1000 * cpu_times[min(len(cpu_times) - 1, int(len(cpu_times) * 0.99))],
        occupancy_pct=statistics.fmean(steady) if steady else statistics.fmean(load),
        failed=len(times) - placed,
    )


def run(
    policies: list[str],
    n_nodes: int = 500,
    n_jobs: int | None = None,
    seed: int = 7,
    progress: Callable[[PolicyResult], None] | None = None,
) -> FleetBenchReport:
    """``n_jobs`` defaults to 20 per node; lifetimes scale with ``n_nodes / 500``."""
    nodes = fleet_nodes(n_nodes)
    scale = n_nodes / 500
    if n_jobs is None:
        n_jobs = 20 * n_nodes
    queue = job_queue(n_jobs, seed, scale)
    results = []
    for p in policies:
        results.append(run_policy(p, nodes, queue))
        if progress:
            progress(results[-1])
    return FleetBenchReport(n_nodes, 8 * n_nodes, n_jobs, seed, results, scale)
