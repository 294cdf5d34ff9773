"""The configuration in force, folded from configuration events, with its digest.

Priority classes start from the default ladder (`train` 50, `interactive` 75, `build` 100
non-preemptible, `inference` 125 non-preemptible); configuration events add or override.
The digest is recorded on every decision so a replay knows which configuration decided.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TypeVar

import msgspec

from gpuledger.events import (
    Event,
    Policy,
    PolicyConfigured,
    PriorityClassConfigured,
    ScheduleConfigured,
    TenantConfigured,
)
from gpuledger.services.domain.policy.schedules import SCHEDULE_PREFIX, cron_problem

_E = TypeVar("_E", bound=Event)

DEFAULT_CLASSES: tuple[PriorityClassConfigured, ...] = (
    PriorityClassConfigured(
        name="train",
        value=50,
        preemptible=True,
        slo_class="batch",
        description="Training and batch work",
    ),
    PriorityClassConfigured(
        name="interactive",
        value=75,
        preemptible=True,
        slo_class="interactive",
        description="Notebooks and dev work",
        allow_timeslice=True,
    ),
    PriorityClassConfigured(
        name="build", value=100, preemptible=False, slo_class="build", description="CI builds"
    ),
    PriorityClassConfigured(
        name="inference",
        value=125,
        preemptible=False,
        slo_class="latency-critical",
        description="Latency-critical inference",
    ),
)


DIGEST_OPTIONAL: dict[str, object] = {
    "consolidation": False,
    "consolidation_max_moves": 2,
    "mig_regeometry": False,
    "mig_regeometry_window_s": 3600,
    "mig_regeometry_per_window": 1,
}
"""Policy fields added after logs existed (issue 16): left out of the digest while at these
defaults, so an older configuration keeps its digest (and its decisions their bytes)."""


@dataclass
class ConfigState:
    """Tenants, priority classes and policy currently in force."""

    tenants: dict[str, TenantConfigured] = field(default_factory=dict)
    classes: dict[str, PriorityClassConfigured] = field(
        default_factory=lambda: {c.name: c for c in DEFAULT_CLASSES}
    )
    policy: Policy = field(default_factory=Policy)
    schedules: dict[str, ScheduleConfigured] = field(default_factory=dict)
    """Time-of-day policies by name (services/domain/policy/schedules.py)."""
    fired: dict[str, int] = field(default_factory=dict)
    """Per schedule: when its last change was published (the `occurred_at_ms` of the last
    configuration event correlated `schedule:<name>`); a refold sees the same, so a schedule
    never fires twice for one time. Not part of the digest (it is bookkeeping, not policy)."""
    digest: str = ""

    def __post_init__(self) -> None:
        self.digest = self._digest()

    def apply(
        self,
        event: TenantConfigured | PriorityClassConfigured | PolicyConfigured | ScheduleConfigured,
    ) -> None:
        """Fold one configuration event and refresh the digest."""
        if config_problem(event) is not None:
            return  # refused: what is in force stays (decode already refuses it on the bus)
        match event:
            case TenantConfigured():
                self.tenants[event.tenant] = _strip(event)
            case PriorityClassConfigured():
                self.classes[event.name] = _strip(event)
            case PolicyConfigured():
                self.policy = event.policy
            case ScheduleConfigured():
                new = _strip(event)
                if self.schedules.get(event.name) != new:
                    # a changed schedule puts its latest fire time's values in force again
                    self.fired.pop(event.name, None)
                self.schedules[event.name] = new
        if not isinstance(event, ScheduleConfigured):
            self.note_fired(event)
        self.digest = self._digest()

    def note_fired(self, event: Event) -> None:
        """Record that a schedule published `event` (a configuration change or a service's
        `ServiceScaled`, correlation id `schedule:<name>`), so it does not fire again for the
        same time."""
        if event.correlation_id.startswith(SCHEDULE_PREFIX):
            name = event.correlation_id[len(SCHEDULE_PREFIX) :]
            self.fired[name] = max(self.fired.get(name, event.occurred_at_ms), event.occurred_at_ms)

    def grace_ms(self, job_grace_s: int | None, class_name: str) -> int:
        """Checkpoint grace: the job's own, else its class's, else the policy default."""
        if job_grace_s is not None:
            return job_grace_s * 1000
        cls = self.classes.get(class_name)
        if cls is not None and cls.grace_s is not None:
            return cls.grace_s * 1000
        return self.policy.default_grace_s * 1000

    def _digest(self) -> str:
        policy = msgspec.to_builtins(self.policy)
        for name, default in DIGEST_OPTIONAL.items():
            if policy.get(name) == default:  # absent at its default: older digests stay the same
                del policy[name]
        doc = {
            "tenants": [self.tenants[k] for k in sorted(self.tenants)],
            "classes": [self.classes[k] for k in sorted(self.classes)],
            "policy": policy,
        }
        if self.schedules:  # absent when there are none: digests of older logs stay the same
            doc["schedules"] = [self.schedules[k] for k in sorted(self.schedules)]
        canon = msgspec.json.encode(doc)
        return hashlib.sha256(canon).hexdigest()[:16]


def config_problem(
    event: TenantConfigured | PriorityClassConfigured | PolicyConfigured | ScheduleConfigured,
) -> str | None:
    """Why a configuration event cannot be in force (a value outside a closed set, a negative
    quantity, a schedule's unreadable cron expression or unknown zone), or None. Events built
    in Python skip decode-time validation, so the fold checks again with the same types."""
    try:
        msgspec.convert(msgspec.to_builtins(event), type(event))
    except msgspec.ValidationError as exc:
        return str(exc)
    if isinstance(event, ScheduleConfigured):
        return cron_problem(event.cron, event.timezone)
    return None


def _strip(event: _E) -> _E:
    """Configuration content without its envelope, so the digest depends on content only."""
    return msgspec.structs.replace(
        event, event_id="", occurred_at_ms=0, causation_id="", correlation_id="", producer=""
    )


@dataclass(frozen=True)
class DefragSettings:
    """The defragmentation fields of a policy, as plain values (read once per decide)."""

    consolidation: bool = False
    max_moves: int = 2
    mig_regeometry: bool = False
    window_ms: int = 3_600_000
    per_window: int = 1


def defrag_settings(policy: Policy) -> DefragSettings:
    """Consolidation and MIG re-geometry settings in force."""
    return DefragSettings(
        consolidation=bool(policy.consolidation),
        max_moves=int(policy.consolidation_max_moves),
        mig_regeometry=bool(policy.mig_regeometry),
        window_ms=int(policy.mig_regeometry_window_s) * 1000,
        per_window=int(policy.mig_regeometry_per_window),
    )
