"""MIG instances as sources record them -> MIG GPUs with fixed layouts, and MIG requests.

Slurm (`sinfo` GRES `gpu:1g.10gb:14(S:0),gpu:3g.40gb:2(S:1)`) and Kubernetes (GPU feature
discovery's mixed strategy: `nvidia.com/mig-1g.10gb.count: 14` labels, or the
`nvidia.com/mig-1g.10gb` capacity) list a node's MIG *instances* per profile, not its GPUs.
`pack` rebuilds the GPUs: instances are placed largest first (memory slices, then compute,
then name), each on the first GPU where it fits (at the start that keeps most other slots
open: `placement.mig.best_start`), a new GPU opened when none has room; every GPU gets the
resulting fixed layout (`GpuInfo.mig_layout`, `3g.40gb@0`), checked with the same slot rules
as placement (`services/placement/mig.py`, `shared/reference/mig-profiles.md`). 14 x
`1g.10gb` + 2 x `3g.40gb` is 3 GPUs: two of seven `1g.10gb`, one of `3g.40gb@0 + 3g.40gb@4`.

The GPU model: the profile names alone do not say it (`1g.10gb` is an A100-80GB, H100-80GB
and A100-40GB name). The family is the first of `PREFERENCE` (A100-80GB, H100-80GB, H200-141GB,
A100-40GB: the two 80 GB parts share one geometry) offering every profile named, unless the
source names the model (a Kubernetes `nvidia.com/gpu.product`, a Slurm mapping's `mig_model`).

Impossible geometry is warned about, never skipped silently: a profile no family offers
(every instance of the node is then left out, named in the warning), or more GPUs than the
source says the node has (Kubernetes `nvidia.com/gpu.count`: the node is then partitioned on
demand instead of with the packed layouts).
"""

from __future__ import annotations

import re

import msgspec

from gpuledger import events as ev
from gpuledger.services.domain.inputs.gpu_models import CANONICAL
from gpuledger.services.placement.mig import FAMILIES, PROFILES, MigSlots, best_start

MIG_PROFILE = re.compile(r"^[1-7]g\.\d+gb(\+me)?$")
PREFERENCE = ("A100-80GB", "H100-80GB", "H200-141GB", "A100-40GB")
"""MIG families in the order one is chosen when only profile names are known."""


def is_profile(name: str) -> bool:
    """Whether a GRES type / resource suffix names a MIG profile (`1g.10gb`, `1g.10gb+me`)."""
    return bool(MIG_PROFILE.match(name.strip().lower()))


def family_for(profiles, model: str | None = None) -> str | None:
    """The MIG family offering every profile named: `model`'s when given (and it does),
    else the first of `PREFERENCE` that does; None when none does."""
    names = set(profiles)
    if model:
        from gpuledger.services.placement.mig import family

        fam = family(model)
        if fam is not None and names <= set(PROFILES[fam]):
            return fam
        if fam is not None:
            return None
    return next((f for f in PREFERENCE if names <= set(PROFILES[f])), None)


def pack(counts: dict[str, int], fam: str) -> list[tuple[str, ...]]:
    """Fixed layouts (`profile@start`, sorted by start) of the fewest GPUs first-fit
    decreasing finds for `counts` (profile -> instances) on GPUs of family `fam`."""
    table = PROFILES[fam]
    order = sorted(counts, key=lambda p: (-table[p].memory_slices, -table[p].compute_slices, p))
    gpus: list[tuple[MigSlots, list[tuple[int, str]]]] = []
    for name in order:
        prof = table[name]
        for _ in range(counts[name]):
            for i, (slots, inst) in enumerate(gpus):
                start = best_start(slots, prof, fam)
                if start is not None:
                    gpus[i] = (slots.with_instance(prof, start), [*inst, (start, name)])
                    break
            else:
                start = best_start(MigSlots(), prof, fam)
                assert start is not None  # an empty GPU holds any one profile
                gpus.append((MigSlots().with_instance(prof, start), [(start, name)]))
    return [tuple(f"{n}@{s}" for s, n in sorted(inst)) for _, inst in gpus]


def mig_gpus(
    node: str,
    counts: dict[str, int],
    first_index: int,
    warn: list[str],
    *,
    model: str | None = None,
    physical: int | None = None,
    where: str = "",
) -> tuple[ev.GpuInfo, ...]:
    """The MIG GPUs of `node` holding `counts` (profile -> instances), indexed from
    `first_index`; problems appended to `warn` (see the module doc)."""
    counts = {p.lower(): n for p, n in sorted(counts.items()) if n > 0}
    if not counts:
        return ()
    fam = family_for(counts, model)
    at = f"{where}: " if where else ""
    listed = ", ".join(f"{n} x {p}" for p, n in counts.items())
    if fam is None:
        offered = "; ".join(f"{f}: {', '.join(PROFILES[f])}" for f in FAMILIES)
        warn.append(
            f"{at}node {node}: MIG instances {listed} fit no GPU model "
            f"{'(' + model + ') ' if model else ''}(known profiles: {offered}); left out"
        )
        return ()
    layouts = pack(counts, fam)
    memory = CANONICAL.get(fam, 0)
    if physical is not None and physical > 0 and len(layouts) > physical:
        warn.append(
            f"{at}node {node}: MIG instances {listed} need {len(layouts)} {fam} GPUs, the node "
            f"has {physical}; its GPUs are partitioned on demand instead"
        )
        return tuple(_mig_gpu(node, first_index + i, fam, memory) for i in range(physical))
    return tuple(
        _mig_gpu(node, first_index + i, fam, memory, layout) for i, layout in enumerate(layouts)
    )


def _mig_gpu(
    node: str,
    index: int,
    fam: str,
    memory: int,
    layout: tuple[str, ...] | msgspec.UnsetType = msgspec.UNSET,
) -> ev.GpuInfo:
    """MIG GPU `index` of `node`, of model `fam`, partitioned as `layout` (unset: on demand)."""
    return ev.GpuInfo(
        index=index,
        uuid=f"GPU-{node}-{index}",
        model=fam,
        memory_mib=memory,
        clique=f"{node}-nvl0",
        sharing="mig",
        mig_layout=layout,
    )
