"""Fixed MIG layouts (`GpuInfo.mig_layout`): parsing, validation and the layout a re-geometry
asks for. Pure.

A layout entry is `<profile>@<start>` (`3g.40gb@4`: an instance of `3g.40gb` on memory slices
4..7); in configuration files the start may be left out (`3g.40gb`), and is then the first
valid start still free, in file order.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuledger.services.placement import MigInstance, MigSlots, profile_for
from gpuledger.services.placement.mig import best_start


class LayoutError(ValueError):
    """A layout that is not valid for the GPU model (one line, naming the entry)."""


def parse_layout(model: str, entries: Iterable[str]) -> tuple[MigInstance, ...]:
    """The instances of `entries` on a GPU of `model`, sorted by start; raises LayoutError."""
    slots = MigSlots()
    out: list[MigInstance] = []
    for entry in entries:
        name, _, start_text = str(entry).partition("@")
        prof = profile_for(model, name)
        if prof is None:
            raise LayoutError(f"{entry!r}: {model} has no MIG profile {name!r}")
        if start_text:
            if not start_text.isdigit():
                raise LayoutError(f"{entry!r}: the start after '@' must be a memory slice number")
            start = int(start_text)
            if not slots.fits(prof, start):
                raise LayoutError(
                    f"{entry!r}: does not fit (valid starts {list(prof.starts)}, "
                    "no overlap, at most 7 compute slices, per-profile maximum)"
                )
        else:
            start = next((s for s in prof.starts if slots.fits(prof, s)), -1)
            if start < 0:
                raise LayoutError(f"{entry!r}: no room left on the GPU for it")
        slots = slots.with_instance(prof, start)
        out.append(MigInstance(prof.name, start))
    return tuple(sorted(out, key=lambda i: (i.start, i.profile)))


def layout_text(instances: Iterable[MigInstance]) -> tuple[str, ...]:
    """`<profile>@<start>` entries, sorted by start."""
    return tuple(
        f"{i.profile}@{i.start}" for i in sorted(instances, key=lambda i: (i.start, i.profile))
    )


def offers(model: str, layout: tuple[str, ...], profile: str) -> bool:
    """Whether a fixed layout has an instance of `profile` (empty = partitioned on demand)."""
    if not layout:
        return profile_for(model, profile) is not None
    return any(i.profile == profile for i in parse_layout(model, layout))


def target_layout(model: str, current: tuple[str, ...], profile: str) -> tuple[str, ...] | None:
    """The layout to give an idle GPU of `model` so it offers `profile`: one instance of it at
    the start that keeps the most other slots open, then as many of the current instances as
    still fit, in start order (the geometry changes no more than needed). None if the model
    has no such profile."""
    prof = profile_for(model, profile)
    if prof is None:
        return None
    slots = MigSlots()
    start = best_start(slots, prof, model)
    if start is None:
        return None
    slots = slots.with_instance(prof, start)
    keep = [MigInstance(prof.name, start)]
    for inst in parse_layout(model, current):
        p = profile_for(model, inst.profile)
        if p is not None and slots.fits(p, inst.start):
            slots = slots.with_instance(p, inst.start)
            keep.append(inst)
    return layout_text(keep)
