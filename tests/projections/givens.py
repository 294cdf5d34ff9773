"""Givens shared by the projection tests (a helper, not a test module)."""

from __future__ import annotations

from gpuledger.events import Event, subject_for
from gpuledger.services.domain.inputs.configfile import config_events

TENANTS_WITH_LIMITS = {
    "tenants": [
        {"name": "a", "guaranteed": 4, "borrowing_limit": 2},
        {"name": "b", "guaranteed": 8, "lending_limit": "1500m"},
        {"name": "c", "guaranteed": 1},
    ]
}
"""Tenants configured with a borrowing limit (a), a lending limit (b), and neither (c)."""


def config_log(doc: dict) -> list[tuple[int, str, Event]]:
    """A configuration document's events as a log: (seq from 1, subject, event)."""
    return [(i, subject_for(e), e) for i, e in enumerate(config_events(doc), 1)]
