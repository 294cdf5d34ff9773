"""The FGD paper's evaluation protocol, run through the placement engine (`Fleet.place`).

Per seed: inflate and shuffle the tasks, draw one random node order (the tie order of all
policies), then try each task once in order; a task that does not fit fails for good, and
tasks never depart. After each task: arrived % = requested GPU of all tasks tried so far /
capacity, allocated % = allocated GPU / capacity. Headline: unallocated % = 100 -
allocated % at the first task where arrived % reaches 100. At that point the idle GPU is
also split (`Fleet.idle_breakdown`): stranded % = idle GPU whose node lacks the CPU or
memory for every typical task that could use it, in % of capacity.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable

import msgspec

from gpuledger.services.placement import Fleet, Placement
from gpuledger.services.runtime.gctune import fewer_gc_passes

from .trace import Node, Task
from .workload import inflate, typical_tasks

CURVE_POINTS = 131  # arrived 0..130 %


class SeedResult(msgspec.Struct, frozen=True):
    seed: int
    unallocated_at_100: float
    curve: list[float]  # unallocated % at the first task reaching arrived p, p = 0..130
    placements: int
    tasks: int
    wall_s: float
    stranded_at_100: float = 0.0  # % of capacity idle for lack of CPU/memory on its node


class Report(msgspec.Struct):
    policy: str
    pods_file: str
    seeds: list[int]
    unallocated_at_100: dict[str, float]
    curve: list[list[float]]
    placements: int
    wall_s: float
    placements_per_s: float
    per_seed: list[SeedResult] = []
    stranded_at_100: dict[str, float] = {}  # mean, sd of SeedResult.stranded_at_100


def run_seed(
    nodes: list[Node], tasks: list[Task], policy: str, seed: int, factor: float
) -> SeedResult:
    """One seed of the protocol for one policy."""
    with fewer_gc_passes():
        return _run_seed(nodes, tasks, policy, seed, factor)


def _run_seed(
    nodes: list[Node], tasks: list[Task], policy: str, seed: int, factor: float
) -> SeedResult:
    started = time.perf_counter()
    specs = [n.spec() for n in nodes]
    capacity = 1000 * sum(n.num_gpu for n in nodes)
    stream = inflate(tasks, capacity, factor, seed)
    order = [n.name for n in nodes]
    random.Random(f"node-order-{seed}").shuffle(order)
    fleet = Fleet(specs, typical_tasks=typical_tasks(tasks), node_order=order)
    arrived = allocated = placements = 0
    curve: list[float | None] = [None] * CURVE_POINTS
    at_100: float | None = None
    stranded: float | None = None
    for k, task in enumerate(stream):
        gang = task.gang(f"{task.name}#{k}")
        arrived += task.gpu_request_milli
        result = fleet.place(gang, policy, explain=False)
        if isinstance(result, Placement):
            fleet.allocate(gang.job_id, gang.tenant, result, gang)
            allocated += task.gpu_request_milli
            placements += 1
        unalloc = 100.0 - 100.0 * allocated / capacity
        pct = int(100 * arrived // capacity)
        for p in range(min(pct, CURVE_POINTS - 1), -1, -1):
            if curve[p] is not None:
                break
            curve[p] = unalloc
        if at_100 is None and arrived >= capacity:
            at_100 = unalloc
            stranded = 100.0 * fleet.idle_breakdown()[2] / capacity
    final = 100.0 - 100.0 * allocated / capacity
    if stranded is None:
        stranded = 100.0 * fleet.idle_breakdown()[2] / capacity
    filled = [final if v is None else v for v in curve]
    return SeedResult(
        seed,
        final if at_100 is None else at_100,
        filled,
        placements,
        len(stream),
        time.perf_counter() - started,
        stranded,
    )


def run(
    nodes: list[Node],
    tasks: list[Task],
    policy: str,
    seeds: list[int],
    factor: float,
    pods_file: str = "",
    progress: Callable[[SeedResult], None] | None = None,
    workers: int = 1,
) -> Report:
    """All seeds for one policy (``workers`` > 1 runs seeds in parallel processes)."""
    started = time.perf_counter()
    if workers > 1 and len(seeds) > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(run_seed, nodes, tasks, policy, s, factor) for s in seeds]
            results = []
            for fut in futures:
                results.append(fut.result())
                if progress:
                    progress(results[-1])
    else:
        results = []
        for s in seeds:
            results.append(run_seed(nodes, tasks, policy, s, factor))
            if progress:
                progress(results[-1])
    wall = time.perf_counter() - started
    heads = [r.unallocated_at_100 for r in results]
    strands = [r.stranded_at_100 for r in results]
    curve = [
        [float(p), statistics.median(r.curve[p] for r in results)] for p in range(CURVE_POINTS)
    ]
    placements = sum(r.placements for r in results)
    busy = sum(r.wall_s for r in results)
    return Report(
        policy=policy,
        pods_file=pods_file,
        seeds=list(seeds),
        unallocated_at_100={
            "mean": statistics.fmean(heads),
            "sd": statistics.stdev(heads) if len(heads) > 1 else 0.0,
            "median": statistics.median(heads),
        },
        curve=curve,
        placements=placements,
        wall_s=wall,
        placements_per_s=placements / busy if busy else 0.0,
        per_seed=results,
        stranded_at_100={
            "mean": statistics.fmean(strands),
            "sd": statistics.stdev(strands) if len(strands) > 1 else 0.0,
        },
    )
