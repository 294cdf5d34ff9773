"""Placement engine: where each member of a gang lands (pure; stdlib + numpy + msgspec).

Public API: the vocabulary in `model`, the `Fleet` index with `place` / `allocate` /
`release`, the scorer registry `SCORERS` and the typed errors.
"""

from .default import DefaultScorer
from .errors import (
    PlacementConflict,
    PlacementError,
    UnknownAllocation,
    UnknownNode,
    UnknownPolicy,
)
from .fleet import Fleet
from .fragmentation import Fragmentation, TypicalTask
from .index import Allocation
from .mig import PROFILES, MigProfile, MigSlots, profile_for
from .model import (
    GPU_MILLI,
    SHARING_MODES,
    GangRequest,
    GpuSpec,
    MemberAssignment,
    MemberRequest,
    MigInstance,
    NodeSpec,
    Placement,
    Unplaceable,
)
from .scorers import SCORERS, BestFit, Fgd, Packing, ScoreContext, Scorer
from .trial import TrialFleet

__all__ = [
    "GPU_MILLI",
    "PROFILES",
    "SCORERS",
    "SHARING_MODES",
    "Allocation",
    "BestFit",
    "DefaultScorer",
    "Fgd",
    "Fleet",
    "Fragmentation",
    "GangRequest",
    "GpuSpec",
    "MemberAssignment",
    "MemberRequest",
    "MigInstance",
    "MigProfile",
    "MigSlots",
    "NodeSpec",
    "Packing",
    "Placement",
    "PlacementConflict",
    "PlacementError",
    "ScoreContext",
    "Scorer",
    "TrialFleet",
    "TypicalTask",
    "UnknownAllocation",
    "UnknownNode",
    "UnknownPolicy",
    "Unplaceable",
    "profile_for",
]
