"""Typed errors of the placement engine (bugs or stale inputs, never "does not fit")."""

from __future__ import annotations


class PlacementError(Exception):
    """Base class of placement engine errors."""


class PlacementConflict(PlacementError):
    """An allocation would double-book a GPU, slice or share, or exceed CPU/memory."""


class UnknownAllocation(PlacementError, KeyError):
    """No allocation with that id."""


class UnknownNode(PlacementError, KeyError):
    """No node with that name."""


class UnknownPolicy(PlacementError, KeyError):
    """No scorer registered under that name."""
