"""GPU fragmentation of a node with respect to a workload of typical tasks (Weng et al.,
"Beware of Fragmentation", USENIX ATC '23). The one definition used by the `fgd` and
`default` scorers, in the engine and in the openb benchmark alike.

For one typical task, a node's fragmentation (GPU milli) is:
- all of its idle GPU milli if the task needs no GPU, or if the node cannot host it (no
  allowed GPU model, less free CPU than the task asks, less free memory than it asks when
  the measure counts memory, or fewer than ``num_gpu`` allowed GPUs, in one NVLink clique,
  whose free milli reaches the task's per-GPU milli);
- otherwise the idle milli of the GPUs that cannot serve it (free milli below the per-GPU
  request, or a model it does not allow).

A node's fragmentation F is the count-weighted sum over typical tasks, kept as an integer
scaled by the total weight W (so arithmetic is exact); ``F / W`` is the paper's value.
MIG GPUs take no part (their slices are not milli-divisible). Results are memoised on the
node's GPU layout, its free milli per GPU and its CPU bucket (F depends on free CPU only
through the sorted task CPU thresholds), and its memory bucket when memory counts.

``Fragmentation(tasks)`` is FGD's measure (host memory ignored, as in the paper);
``Fragmentation(tasks, memory=True)`` also counts the GPUs a node cannot use for a task for
lack of free memory (the `default` scorer's). `Fragmentation.idle_breakdown` splits a node's
idle GPU milli into usable, fragmented (no typical task fits the GPU) and *stranded* (a
typical task fits the GPU but the node lacks the CPU or memory for every such task).
"""

from __future__ import annotations

import math
from bisect import bisect_right

import msgspec

from .model import GPU_MILLI


class TypicalTask(msgspec.Struct, frozen=True):
    """A task shape of the workload and how often it occurs (``weight``, a count)."""

    cpu_milli: int
    num_gpu: int
    gpu_milli: int
    models: tuple[str, ...] = ()
    weight: int = 1
    memory_mib: int = 0
    """Host memory the shape asks (a representative value; FGD's measure ignores it)."""

    @property
    def per_gpu_milli(self) -> int:
        return 0 if self.num_gpu == 0 else (self.gpu_milli if self.num_gpu == 1 else GPU_MILLI)


# A node's GPU layout for fragmentation: groups of (clique ordinal, model), each a run of
# GPU positions; and its state: free milli per group, sorted (order inside a group is moot).
Layout = tuple[tuple[int, str, tuple[int, ...]], ...]


def layout_of(
    cliques: tuple[tuple[str, tuple[int, ...]], ...], models: list[str], mig: list[bool]
) -> Layout:
    """Group non-MIG GPU positions by (clique ordinal, model)."""
    out = []
    for ordinal, (_, positions) in enumerate(cliques):
        by_model: dict[str, list[int]] = {}
        for p in positions:
            if not mig[p]:
                by_model.setdefault(models[p], []).append(p)
        for model in sorted(by_model):
            out.append((ordinal, model, tuple(by_model[model])))
    return tuple(out)


class Fragmentation:
    """F for a fixed set of typical tasks, memoised. Deterministic and free of I/O."""

    __transparent_memos__ = ("_memo",)
    """F per (layout, free capacity): a memo of a pure function (replay/readonly.py)."""

    def __init__(self, tasks: tuple[TypicalTask, ...], memory: bool = False) -> None:
        self.tasks = tasks
        self.memory = memory and any(t.memory_mib for t in tasks)
        """Whether host memory counts (``memory=True`` and some task asks memory)."""
        self.total_weight = sum(t.weight for t in tasks) or 1
        self.cpu_thresholds = sorted({t.cpu_milli for t in tasks})
        self.mem_thresholds = sorted({t.memory_mib for t in tasks}) if self.memory else []
        # score k (1..99) is reached when dF_scaled >= _thresholds[k-1]; see `score`.
        w = self.total_weight
        self._thresholds = [-math.log(100 / k - 1) * 1000 * w for k in range(1, 100)]
        self._memo: dict[tuple, int] = {}
        self._base: Fragmentation | None = None
        """The measure `scarcity_weighted` made this one from (None: this is it)."""
        self._profiles: dict[tuple, tuple[int, int, int]] = {}
        """(demand weight, CPU per GPU) per node type (`strand_profile`), filled by the fold
        (`remember_profile`), only read inside a decision."""

    @property
    def base(self) -> Fragmentation:
        """The same tasks before `scarcity_weighted` (stranding demand counts tasks, not
        scarcity weights). Not a reference to itself: that would be a reference cycle."""
        return self if self._base is None else self._base

    def scarcity_weighted(self, supply: dict[str, int]) -> Fragmentation:
        """The same typical tasks, each model-constrained one weighted up by how scarce its
        models are: ``weight * sqrt(total GPUs / GPUs of the models it allows)``, in integers
        (``supply``: GPU count per model in the fleet; tasks whose models are absent, and
        unconstrained ones, keep their weight). Returns ``self`` when nothing changes.
        (The square root measured better than the plain ratio on openb gpuspec25, seeds
        42-45: 4.48 against 4.73 % unallocated; without the weighting 5.59.)"""
        total = sum(supply.values())
        tasks = []
        for t in self.tasks:
            allowed = sum(supply.get(m, 0) for m in set(t.models)) if t.models else 0
            weight = t.weight
            if allowed:
                weight = max(1, t.weight * math.isqrt(1_000_000 * total // allowed) // 1000)
            tasks.append(
                t
                if weight == t.weight
                else TypicalTask(
                    t.cpu_milli, t.num_gpu, t.gpu_milli, t.models, weight, t.memory_mib
                )
            )
        if all(a is b for a, b in zip(tasks, self.tasks, strict=True)):
            return self
        weighted = Fragmentation(tuple(tasks), self.memory)
        weighted._base = self.base
        return weighted

    def host_bound(self, cpu_total: int, memory_total: int, gpu_milli_total: int) -> bool:
        """Whether the typical tasks ask as much CPU per GPU as the fleet has, or (when memory
        counts) as much memory per GPU: host resources, not GPUs, then run out first.
        Count-weighted over the typical GPU and CPU-only tasks; ``*_total``: the fleet's."""
        gpu_w = sum(t.weight * t.num_gpu * t.per_gpu_milli for t in self.tasks)
        if not gpu_w or not gpu_milli_total:
            return False
        cpu_w = sum(t.weight * t.cpu_milli for t in self.tasks)
        if cpu_w * gpu_milli_total >= cpu_total * gpu_w:
            return True
        mem_w = sum(t.weight * t.memory_mib for t in self.tasks)
        return self.memory and mem_w * gpu_milli_total >= memory_total * gpu_w

    def strand_profile(
        self, layout: Layout, cpu_capacity: int, memory_capacity: int = 0
    ) -> tuple[int, int, int]:
        """(demand weight, CPU milli per whole GPU, memory MiB per 1000 whole GPUs) of
        stranding on a node of this GPU layout, CPU and memory capacity (its *type*),
        memoised per type.

        Demand: the typical GPU tasks that could ever run on the type (a GPU model they
        allow, no more GPUs than it has, no more CPU than its capacity, and no more memory
        when the measure counts memory); weight = their count. The ratios are theirs
        (count-weighted CPU milli, memory MiB, per whole GPU asked), each capped at the
        type's own per GPU: an empty node of a CPU-lean type (2 P100 and 16 cores) has
        nothing stranded, so its GPUs are not filled first merely for being lean, which is
        what a fleet-wide ratio did (on model-constrained traces it handed scarce models to
        tasks that could run anywhere). The memory ratio is 0 unless memory counts.
        Computed afresh for a node type not remembered (`remember_profile`)."""
        key = (layout, cpu_capacity, memory_capacity if self.memory else 0)
        found = self._profiles.get(key)
        return found if found is not None else self._profile(*key)

    def remember_profile(self, layout: Layout, cpu_capacity: int, memory_capacity: int = 0) -> None:
        """Memoise `strand_profile` for a node type (called when the fleet folds a node in,
        so a decision only reads the memo)."""
        key = (layout, cpu_capacity, memory_capacity if self.memory else 0)
        if key not in self._profiles:
            self._profiles[key] = self._profile(*key)

    def _profile(
        self, layout: Layout, cpu_capacity: int, memory_capacity: int
    ) -> tuple[int, int, int]:
        models = {m for _, m, _ in layout}
        gpus = sum(len(g[2]) for g in layout)
        weight = gpu_w = cpu_w = mem_w = 0
        for t in self.tasks:
            if (
                not t.num_gpu
                or t.num_gpu > gpus
                or t.cpu_milli > cpu_capacity
                or (self.memory and t.memory_mib > memory_capacity)
                or (t.models and models.isdisjoint(t.models))
            ):
                continue
            weight += t.weight
            gpu_w += t.weight * t.num_gpu * t.per_gpu_milli
            cpu_w += t.weight * t.cpu_milli
            mem_w += t.weight * t.memory_mib
        ratio = mem_ratio = 0
        if gpu_w:
            ratio = min(1000 * cpu_w // gpu_w, 1000 * cpu_capacity // (GPU_MILLI * gpus))
            if self.memory:
                mem_ratio = min(1000 * mem_w // gpu_w, 1000 * memory_capacity // (GPU_MILLI * gpus))
        return weight, ratio, mem_ratio

    @staticmethod
    def stranded(
        ratio: int, idle_gpu_milli: int, free_cpu: int, mem_ratio: int = 0, free_mem: int = 0
    ) -> int:
        """Idle GPU milli that ``free_cpu`` cannot feed at ``ratio`` CPU milli per whole GPU,
        or ``free_mem`` at ``mem_ratio`` MiB per whole GPU (`strand_profile`; a zero ratio
        feeds everything): ``max(0, idle - min(free_cpu * 1000 / ratio, free_mem * 1000 /
        mem_ratio))``, in GPU milli."""
        fed = idle_gpu_milli
        if ratio:
            fed = min(fed, free_cpu * 1000 // ratio)
        if mem_ratio:
            fed = min(fed, free_mem * 1000 // mem_ratio)
        return max(0, idle_gpu_milli - fed)

    def idle_breakdown(
        self, layout: Layout, free_cpu: int, free_mem: int, free: list[int]
    ) -> tuple[int, int, int]:
        """(usable, fragmented, stranded) idle GPU milli of a node, per GPU position:
        *fragmented* if no typical GPU task could use the GPU (its model, per-GPU milli, or
        enough such GPUs in its clique), *stranded* if some could but the node lacks the
        free CPU, or the free memory (when memory counts), for every one of them, else
        *usable*. MIG GPUs take no part. The three sum to the node's idle (non-MIG) milli."""
        usable = fragmented = stranded = 0
        for ordinal, model, positions in layout:
            clique_free = [free[q] for o, _, ps in layout if o == ordinal for q in ps]
            for p in positions:
                v = free[p]
                if v <= 0:
                    continue
                gpu_fit = host_fit = False
                for t in self.tasks:
                    m = t.per_gpu_milli
                    if not t.num_gpu or v < m or (t.models and model not in t.models):
                        continue
                    if t.num_gpu > 1 and sum(1 for f in clique_free if f >= m) < t.num_gpu:
                        continue
                    gpu_fit = True
                    if t.cpu_milli <= free_cpu and (not self.memory or t.memory_mib <= free_mem):
                        host_fit = True
                        break
                if host_fit:
                    usable += v
                elif gpu_fit:
                    stranded += v
                else:
                    fragmented += v
        return usable, fragmented, stranded

    def cpu_bucket(self, cpu_milli: int) -> int:
        return bisect_right(self.cpu_thresholds, cpu_milli)

    def node_frag(self, layout: Layout, free_cpu: int, free: list[int], free_mem: int = 0) -> int:
        """Scaled F (x W) of a node whose GPU positions have ``free`` milli (``free_mem`` is
        read only when memory counts)."""
        bucket = bisect_right(self.cpu_thresholds, free_cpu)
        if self.memory:
            bucket = (bucket, bisect_right(self.mem_thresholds, free_mem))
        if len(layout) == 1:
            frees: tuple = (tuple(sorted([free[p] for p in layout[0][2]])),)
        else:
            frees = tuple(tuple(sorted([free[p] for p in g[2]])) for g in layout)
        key = (layout, bucket, frees)
        f = self._memo.get(key)
        if f is None:
            f = self._compute(layout, bucket, key[2])
            if len(self._memo) > 500_000:
                self._memo.clear()
            self._memo[key] = f
        return f

    def _compute(self, layout: Layout, bucket, frees: tuple[tuple[int, ...], ...]) -> int:
        idle = sum(sum(g) for g in frees)
        mem_ok_below = -1
        if self.memory:
            bucket, mbucket = bucket
            mem_ok_below = self.mem_thresholds[mbucket - 1] if mbucket else -1
        cpu_ok_below = self.cpu_thresholds[bucket - 1] if bucket else -1
        total = 0
        for t in self.tasks:
            if (
                t.num_gpu == 0
                or t.cpu_milli > cpu_ok_below
                or (self.memory and t.memory_mib > mem_ok_below)
            ):
                total += t.weight * idle
                continue
            m = t.per_gpu_milli
            usable = 0
            per_clique: dict[int, int] = {}
            for (ordinal, model, _), values in zip(layout, frees, strict=True):
                if t.models and model not in t.models:
                    continue
                for v in values:
                    if v >= m:
                        usable += v
                        per_clique[ordinal] = per_clique.get(ordinal, 0) + 1
            if max(per_clique.values(), default=0) < t.num_gpu:
                total += t.weight * idle
            else:
                total += t.weight * (idle - usable)
        return total

    def score(self, delta_scaled: int) -> int:
        """``floor(100 / (1 + exp(-dF / 1000)))`` for ``dF = delta_scaled / W``, computed
        against precomputed thresholds so per-decision arithmetic stays integer."""
        return bisect_right(self._thresholds, delta_scaled)

    def score_exact(self, delta_scaled: float) -> int:
        """The same value straight from the formula (for tests)."""
        return math.floor(100 / (1 + math.exp(-delta_scaled / self.total_weight / 1000)))
