"""gpuledger's event contract: envelope, v1 catalog, codec with upcasters, subjects, schema.

Pure data: imports msgspec and the standard library only.
"""

from gpuledger.events.catalog import *  # noqa: F403
from gpuledger.events.catalog import ALL_EVENTS, CLIENT_EVENTS, CONFIG_EVENTS, Policy
from gpuledger.events.codec import UndecodableEvent, decode, encode, from_builtins, to_builtins
from gpuledger.events.control import CONTROL_EVENTS
from gpuledger.events.envelope import Decision, Event
from gpuledger.events.ids import (
    InvalidId,
    derive_event_id,
    validate_job_id,
    validate_tenant,
    validate_token,
)
from gpuledger.events.received import MAX_CLIENT_SKEW_MS, at_receipt
from gpuledger.events.specs import (
    CheckpointPolicy,
    GpuInfo,
    GpuSample,
    JobSpec,
    MemberPlacement,
    NodeInfo,
    Resources,
    Spread,
    SubmitLimit,
    TenantShare,
    UserLimit,
    UserLimits,
)
from gpuledger.events.subjects import subject_for

__all__ = [
    "MAX_CLIENT_SKEW_MS",
    "at_receipt",
    "ALL_EVENTS",
    "CLIENT_EVENTS",
    "CONTROL_EVENTS",
    "CONFIG_EVENTS",
    "CheckpointPolicy",
    "Decision",
    "Event",
    "GpuInfo",
    "GpuSample",
    "InvalidId",
    "JobSpec",
    "MemberPlacement",
    "NodeInfo",
    "Policy",
    "Resources",
    "Spread",
    "TenantShare",
    "UserLimit",
    "SubmitLimit",
    "UserLimits",
    "UndecodableEvent",
    "decode",
    "derive_event_id",
    "encode",
    "from_builtins",
    "subject_for",
    "to_builtins",
    "validate_job_id",
    "validate_tenant",
    "validate_token",
]
