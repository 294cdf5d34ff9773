"""MIG profile facts: profile ids, names per GPU model, and placement sizes.

Pure. NVML's ``NVML_GPU_INSTANCE_PROFILE_*`` constants are *indexes* into the profile
table; the profile *id* used for placements comes back in the profile info's ``id``
(see shared/reference/mig-profiles.md). Placements count memory slices (8 per GPU).
The driver's own profile names are preferred; this table is the fallback and the
documentation of what we expect.
"""

from __future__ import annotations

MEMORY_SLICES_PER_GPU = 8
COMPUTE_SLICES_PER_GPU = 7

# profile id -> (memory slices, compute slices)
PROFILE_SLICES: dict[int, tuple[int, int]] = {
    19: (1, 1),
    20: (1, 1),
    15: (2, 1),
    14: (2, 2),
    9: (4, 3),
    5: (4, 4),
    0: (8, 7),
}

_NAMES_80GB: dict[int, str] = {
    19: "1g.10gb",
    20: "1g.10gb+me",
    15: "1g.20gb",
    14: "2g.20gb",
    9: "3g.40gb",
    5: "4g.40gb",
    0: "7g.80gb",
}
"""The profile names of the 80 GB GPUs (A100-80GB and H100-80GB name theirs alike)."""

_NAMES: dict[str, dict[int, str]] = {
    "A100-40GB": {
        19: "1g.5gb",
        20: "1g.5gb+me",
        15: "1g.10gb",
        14: "2g.10gb",
        9: "3g.20gb",
        5: "4g.20gb",
        0: "7g.40gb",
    },
    "A100-80GB": _NAMES_80GB,
    "H100-80GB": _NAMES_80GB,
    # Assumed equal to H100's ids (same die); verify on real hardware.
    "H200-141GB": {
        19: "1g.18gb",
        20: "1g.18gb+me",
        15: "1g.35gb",
        14: "2g.35gb",
        9: "3g.71gb",
        5: "4g.71gb",
        0: "7g.141gb",
    },
}


def profile_name(model: str, profile_id: int) -> str | None:
    """The conventional profile name for ``profile_id`` on ``model``, or None if unknown."""
    return _NAMES.get(model, {}).get(profile_id)


def clean_profile_name(nvml_name: str) -> str:
    """NVML names profiles ``"MIG 1g.5gb"``; gpuledger uses ``"1g.5gb"``."""
    name = nvml_name.strip()
    if name.upper().startswith("MIG "):
        name = name[4:].strip()
    return name
