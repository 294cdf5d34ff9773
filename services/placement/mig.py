"""MIG profiles and slot arithmetic (facts from shared/reference/mig-profiles.md).

A MIG GPU has 8 memory slices and 7 compute slices. An instance of a profile occupies
memory slices ``[start, start + size)`` at one of the profile's valid starts. A layout is
valid when memory ranges do not overlap, compute slices add up to at most 7, no profile
exceeds its per-GPU maximum, and at most one ``+me`` instance exists.

Profile names depend on the GPU model (``1g.10gb`` is profile 19 on H100 but 15 on
A100-40GB), so names are resolved per model family. Slot state is an immutable value
(`MigSlots`), which makes tentative placement and undo trivial.
"""

from __future__ import annotations

import msgspec

MEMORY_SLICES = 8
COMPUTE_SLICES = 7
FAMILIES = ("A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB")


class MigProfile(msgspec.Struct, frozen=True):
    """One MIG profile as NVML knows it (``profile_id`` is NVML's ``info.id``)."""

    name: str
    profile_id: int
    memory_slices: int
    compute_slices: int
    max_per_gpu: int
    starts: tuple[int, ...]
    media_extensions: bool = False

    @property
    def milli_equivalent(self) -> int:
        """GPU milli accounted for this instance: its share of the 7 compute slices."""
        return self.compute_slices * 1000 // COMPUTE_SLICES


# (names per family in FAMILIES order, id, memory slices, compute slices, max, starts, +me)
_ROWS: tuple[tuple[tuple[str, str, str, str], int, int, int, int, tuple[int, ...], bool], ...] = (
    (("1g.5gb", "1g.10gb", "1g.10gb", "1g.18gb"), 19, 1, 1, 7, (0, 1, 2, 3, 4, 5, 6), False),
    (
        ("1g.5gb+me", "1g.10gb+me", "1g.10gb+me", "1g.18gb+me"),
        20,
        1,
        1,
        1,
        (0, 1, 2, 3, 4, 5, 6),
        True,
    ),
    (("1g.10gb", "1g.20gb", "1g.20gb", "1g.35gb"), 15, 2, 1, 4, (0, 2, 4, 6), False),
    (("2g.10gb", "2g.20gb", "2g.20gb", "2g.35gb"), 14, 2, 2, 3, (0, 2, 4), False),
    (("3g.20gb", "3g.40gb", "3g.40gb", "3g.71gb"), 9, 4, 3, 2, (0, 4), False),
    (("4g.20gb", "4g.40gb", "4g.40gb", "4g.71gb"), 5, 4, 4, 1, (0,), False),
    (("7g.40gb", "7g.80gb", "7g.80gb", "7g.141gb"), 0, 8, 7, 1, (0,), False),
)

PROFILES: dict[str, dict[str, MigProfile]] = {
    family: {
        names[i]: MigProfile(names[i], pid, mem, comp, mx, starts, me)
        for names, pid, mem, comp, mx, starts, me in _ROWS
    }
    for i, family in enumerate(FAMILIES)
}
"""Profiles by family, then by name."""

_ROW_OF_ID = {row[1]: i for i, row in enumerate(_ROWS)}


def family(model: str) -> str | None:
    """The MIG family of a GPU model name (``H100``, ``NVIDIA H100 80GB HBM3``...), or None."""
    m = model.upper().replace(" ", "").replace("-", "")
    if "H200" in m:
        return "H200-141GB"
    if "H100" in m:
        return "H100-80GB"
    if "A100" in m:
        return "A100-80GB" if "80G" in m else "A100-40GB"
    return None


def profile_for(model: str, name: str) -> MigProfile | None:
    """Resolve a profile name for a GPU model; None if the model offers no such profile."""
    fam = family(model)
    return None if fam is None else PROFILES[fam].get(name)


def slot_text(profile: MigProfile) -> str:
    """``{0,4}:4`` — the valid starts and the size, as in operator messages."""
    return "{" + ",".join(map(str, profile.starts)) + "}:" + str(profile.memory_slices)


class MigSlots(msgspec.Struct, frozen=True):
    """Occupancy of one MIG GPU: memory-slice bitmask, compute used, instances per profile."""

    mask: int = 0
    compute: int = 0
    counts: tuple[int, ...] = (0,) * len(_ROWS)

    @property
    def free_memory_slices(self) -> int:
        return MEMORY_SLICES - bin(self.mask).count("1")

    @property
    def empty(self) -> bool:
        return self.mask == 0

    def fits(self, profile: MigProfile, start: int) -> bool:
        """True if an instance of ``profile`` at ``start`` keeps the layout valid."""
        if start not in profile.starts:
            return False
        bits = ((1 << profile.memory_slices) - 1) << start
        if start + profile.memory_slices > MEMORY_SLICES or self.mask & bits:
            return False
        if self.compute + profile.compute_slices > COMPUTE_SLICES:
            return False
        row = _ROW_OF_ID[profile.profile_id]
        if self.counts[row] >= profile.max_per_gpu:
            return False
        if profile.media_extensions and self.counts[row] >= 1:
            return False
        return True

    def with_instance(self, profile: MigProfile, start: int) -> MigSlots:
        """The occupancy after adding an instance; ValueError if it does not fit."""
        if not self.fits(profile, start):
            raise ValueError(f"MIG {profile.name}@{start} does not fit")
        row = _ROW_OF_ID[profile.profile_id]
        counts = tuple(c + (i == row) for i, c in enumerate(self.counts))
        bits = ((1 << profile.memory_slices) - 1) << start
        return MigSlots(self.mask | bits, self.compute + profile.compute_slices, counts)

    def without_instance(self, profile: MigProfile, start: int) -> MigSlots:
        """The occupancy after removing an instance that is present."""
        row = _ROW_OF_ID[profile.profile_id]
        bits = ((1 << profile.memory_slices) - 1) << start
        if self.mask & bits != bits or self.counts[row] == 0:
            raise ValueError(f"MIG {profile.name}@{start} is not allocated")
        counts = tuple(c - (i == row) for i, c in enumerate(self.counts))
        return MigSlots(self.mask & ~bits, self.compute - profile.compute_slices, counts)


def _open_slots(slots: MigSlots, fam: str) -> int:
    """How many (profile, start) pairs still fit: a measure of remaining flexibility."""
    return sum(1 for p in PROFILES[fam].values() for s in p.starts if slots.fits(p, s))


def best_start(
    slots: MigSlots,
    profile: MigProfile,
    model: str,
    allowed: tuple[int, ...] | None = None,
) -> int | None:
    """The start to carve ``profile`` at: the one keeping the most other slots open
    (so a 1g goes to slice 6 and leaves room for a 4g at 0), lowest start on ties.
    ``allowed`` restricts starts (pre-created layouts). None if nothing fits."""
    fam = family(model)
    best: tuple[int, int] | None = None
    for start in profile.starts:
        if allowed is not None and start not in allowed:
            continue
        if not slots.fits(profile, start):
            continue
        left = _open_slots(slots.with_instance(profile, start), fam) if fam else 0
        if best is None or left > best[0]:
            best = (left, start)
    return None if best is None else best[1]
