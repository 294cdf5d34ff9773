"""Fleet-scale placement benchmark: decisions per second and p99 time per decision.

Fleet: 500 nodes x 8 H100 (4,000 GPUs), each node one NVLink clique of 8, 16 nodes per
leaf switch; 400 nodes exclusive, 50 mps (fractions), 50 MIG. Queue: 10,000 jobs drawn
with ``random.Random(seed)``: whole-GPU jobs (1/2/4/8 GPUs), fractional shares from 40
tenants, MIG slices, CPU-only tasks and gangs of 2-32 members. Each job is one decision:
``Fleet.place`` (with the full explanation on failure, as the scheduler runs it) and, when
placed, ``Fleet.allocate``. Placed jobs leave after a random number of later decisions, so
the fleet runs at a realistic steady load with a mix of successes and failures. Release
time is not counted (it is event folding, not deciding).

``mix="openb"``: the nodes of the openb trace's GPU node list (1,213 nodes of 15 types,
`OPENB_NODE_MIX`) repeated to the size asked, every GPU of a node one clique, 1 node in 10
`mps`, the rest exclusive; MIG draws of the queue become GPU shares and whole-GPU members
ask 8 cores and 32 GiB per GPU (an openb G2 node has 12 cores and 48 GiB per GPU), so the
job stream is otherwise the same. Lifetimes scale with the fleet's GPUs (``gpus / 4000``,
equal to ``nodes / 500`` for the H100 fleet), so both mixes run near the same occupancy.
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
    """Job lifetimes (in decisions) relative to the 500-node run: GPUs / 4000."""
    mix: str = "h100"
    max_rss_mib: float = 0.0
    """Peak resident memory of this process at the end of the run (``getrusage``)."""


OPENB_NODE_MIX: tuple[tuple[int, int, int, int, str], ...] = (
    (549, 96_000, 393_216, 8, "G2"),
    (387, 104_000, 524_288, 2, "T4"),
    (107, 16_000, 122_880, 2, "P100"),
    (39, 128_000, 786_432, 8, "G3"),
    (28, 32_000, 131_072, 4, "V100M16"),
    (22, 64_000, 262_144, 2, "P100"),
    (21, 96_000, 786_432, 8, "V100M32"),
    (19, 8_000, 32_768, 1, "V100M16"),
    (17, 96_000, 393_216, 4, "T4"),
    (9, 48_000, 376_832, 4, "V100M32"),
    (7, 64_000, 262_144, 8, "V100M16"),
    (3, 8_000, 61_440, 1, "P100"),
    (2, 8_000, 61_440, 2, "P100"),
    (2, 128_000, 1_048_576, 1, "A10"),
    (1, 82_000, 344_064, 8, "V100M16"),
)
"""(count, cpu_milli, memory_mib, GPUs, model) of the openb GPU node list
(``openb_node_list_gpu_node.csv``: 1,213 nodes, 6,212 GPUs), counted from the CSV."""


def openb_nodes(n_nodes: int, per_leaf: int = 16) -> list[NodeSpec]:
    """``n_nodes`` nodes of the openb mix: the 1,213 types in proportion (each type spread
    evenly over the cycle, largest first), repeated; 1 node in 10 `mps`."""
    cycle: list[tuple[float, int, tuple[int, int, int, int, str]]] = []
    for t, row in enumerate(OPENB_NODE_MIX):
        count = row[0]
        cycle.extend(((k + 0.5) / count, t, row) for k in range(count))
    cycle.sort(key=lambda c: (c[0], c[1]))
    out = []
    for i in range(n_nodes):
        _, cpu, mem, n, model = cycle[i % len(cycle)][2]
        name = f"node-{i:05d}"
        sharing = "mps" if i % 10 == 8 else "exclusive"
        gpus = tuple(
            GpuSpec(g, f"{name}-gpu{g}", model, 32_768, f"{name}/nvlink", sharing) for g in range(n)
        )
        out.append(NodeSpec(name, cpu, mem, gpus, leaf_switch=f"leaf-{i // per_leaf:04d}"))
    return out


def openb_queue(queue: list[tuple[GangRequest, int]], seed: int) -> list[tuple[GangRequest, int]]:
    """The same stream for the openb mix: MIG members become shares, whole-GPU members ask
    8 cores and 32 GiB per GPU."""
    rng = random.Random(f"openb-{seed}")
    out = []
    for g, life in queue:
        m = g.member
        if m.kind == "mig":
            m = MemberRequest(
                gpu_milli=rng.choice((250, 500, 750)), cpu_milli=4_000, memory_mib=16_384
            )
        elif m.kind == "whole":
            m = MemberRequest(gpus=m.gpus, cpu_milli=8_000 * m.gpus, memory_mib=32_768 * m.gpus)
        out.append((GangRequest(g.job_id, g.tenant, m, g.replicas), life))
    return out


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
    mix: str = "h100",
) -> FleetBenchReport:
    """``n_jobs`` defaults to 20 per node; lifetimes scale with the fleet's GPUs / 4000
    (``mix``: ``h100`` or ``openb``; anything else raises ValueError)."""
    if mix not in ("h100", "openb"):
        raise ValueError(f"unknown node mix {mix!r}; known: h100, openb")
    nodes = fleet_nodes(n_nodes) if mix == "h100" else openb_nodes(n_nodes)
    gpus = sum(len(n.gpus) for n in nodes)
    scale = gpus / 4000
    if n_jobs is None:
        n_jobs = 20 * n_nodes
    queue = job_queue(n_jobs, seed, scale)
    if mix == "openb":
        queue = openb_queue(queue, seed)
    results = []
    for p in policies:
        results.append(run_policy(p, nodes, queue))
        if progress:
            progress(results[-1])
    return FleetBenchReport(n_nodes, gpus, n_jobs, seed, results, scale, mix, _max_rss_mib())


def _max_rss_mib() -> float:
    try:
        import resource
    except ImportError:  # not on this platform
        return 0.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
