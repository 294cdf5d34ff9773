"""The task stream of one seed (inflation, shuffle) and the typical tasks FGD weighs.

Inflation: keep every task, then append copies drawn uniformly with replacement until the
next copy would push the requested GPU past ``inflate`` x capacity; if the trace already
exceeds that target, drop random tasks until it does not. Then shuffle. Randomness comes
from ``random.Random(seed)`` in this replay layer, never from the engine.
"""

from __future__ import annotations

import random
import statistics
from collections import Counter

from gpuledger.services.placement import TypicalTask

from .trace import Task


def inflate(tasks: list[Task], capacity_milli: int, factor: float, seed: int) -> list[Task]:
    """The seed's task order after inflation to ``factor`` x capacity and a shuffle."""
    rng = random.Random(seed)
    target = factor * capacity_milli
    out = list(tasks)
    total = sum(t.gpu_request_milli for t in out)
    if total > target:
        while total > target and out:
            t = out.pop(rng.randrange(len(out)))
            total -= t.gpu_request_milli
    else:
        while True:
            t = tasks[rng.randrange(len(tasks))]
            if total + t.gpu_request_milli > target:
                break
            out.append(t)
            total += t.gpu_request_milli
    rng.shuffle(out)
    return out


def typical_tasks(tasks: list[Task], coverage: float = 0.95) -> tuple[TypicalTask, ...]:
    """Distinct (cpu_milli, num_gpu, gpu_milli, gpu_spec) shapes, memory excluded and
    CPU-only tasks included, most frequent first (ties: the larger shape first), taken
    until their cumulative count reaches ``coverage`` (including the crossing shape).
    Each shape's ``memory_mib`` is the lower median of its tasks' memory (FGD's measure
    ignores it; `default`'s counts it)."""
    counts = Counter((t.cpu_milli, t.num_gpu, t.gpu_milli, t.gpu_spec) for t in tasks)
    memories: dict[tuple, list[int]] = {}
    for t in tasks:
        memories.setdefault((t.cpu_milli, t.num_gpu, t.gpu_milli, t.gpu_spec), []).append(
            t.memory_mib
        )
    ranked = sorted(
        counts.items(),
        key=lambda kv: (-kv[1], -kv[0][1] * max(kv[0][2], 1), -kv[0][2], -kv[0][0], kv[0][3]),
    )
    total = sum(counts.values())
    out: list[TypicalTask] = []
    acc = 0
    for (cpu, n, milli, spec), c in ranked:
        memory = statistics.median_low(memories[(cpu, n, milli, spec)])
        out.append(TypicalTask(cpu, n, milli, spec, c, memory))
        acc += c
        if acc >= coverage * total:
            break
    return tuple(out)
