"""The `slurm` queue-order and preemption profile's site values (`policy.profile: slurm`,
`policy.slurm`; issue 41): part of `Policy` (`events.catalog`), in a module of their own.
Written by `gpuledger import slurm --slurm-conf`; read by
`services.domain.policy.slurm_priority` and `services.preemption.rules`."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

QueueProfile = Literal["native", "slurm"]
"""Closed: how pending jobs are ordered and whom a blocked job may preempt."""
SlurmPreempt = Literal["none", "partition_prio", "qos"]
"""Closed: Slurm's `PreemptType` (`preempt/none`, `preempt/partition_prio`, `preempt/qos`)."""


class SlurmPartitionPolicy(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One Slurm partition as the `slurm` profile reads it."""

    tier: int = 1
    """`PriorityTier`: a higher tier's jobs are ordered first and (under `partition_prio`)
    preempt running jobs of lower tiers."""
    preemptable: bool = True
    """Its jobs may be preempted (`PreemptMode` other than `OFF`)."""


class SlurmQosPolicy(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One Slurm QOS (a priority class of the import) as the `slurm` profile reads it."""

    priority: int = 0
    """The QOS `Priority` (its multifactor factor is this over the largest QOS priority)."""
    preempt: tuple[str, ...] = ()
    """The classes (QOS) whose running jobs this one's pending jobs may preempt (`preempt/qos`)."""


class SlurmPolicy(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The site values of the `slurm` profile (`policy.profile: slurm`, docs/importers.md):
    Slurm's `priority/multifactor` (or `basic`) queue order and its preemption."""

    multifactor: bool = False
    """`PriorityType=priority/multifactor`; False (`priority/basic`): first come, first served
    within a partition tier."""
    weights: dict[str, int] = {}
    """`PriorityWeight*` by factor: `age`, `fairshare`, `jobsize`, `partition`, `qos`."""
    max_age_s: int = 7 * 86_400
    """`PriorityMaxAge`: the age factor reaches 1 after this long eligible."""
    calc_period_s: int = 300
    """`PriorityCalcPeriod`: Slurm recomputes job priorities (age, fair share) this often;
    between recomputations they stay as they were (time in whole periods since the epoch)."""
    preempt: SlurmPreempt = "none"
    time_limit_check_s: int = 30
    """How often Slurm's controller checks time limits (its `PERIODIC_TIMEOUT`, 30 s, not a
    slurm.conf key): a run is stopped at the first check once its limit plus `OverTimeLimit`
    has passed, not at that instant. Assumed: checks at whole multiples of it since the
    epoch (the controller's start sets the phase, and no dump records it). 0: at the limit."""
    backfill_interval_s: Annotated[int, msgspec.Meta(ge=0)] = 0
    """The site's `bf_interval` (`SchedulerParameters`): Slurm's backfill scheduler starts a
    job behind a waiting one of its partition only this often; between its cycles only the
    main scheduler starts jobs, in priority order up to a partition's first waiting job
    (stage `main_scheduler`). 0: every scheduling pass backfills (the native scheduler's)."""
    partitions: dict[str, SlurmPartitionPolicy] = {}
    """By partition name (a job's partition is read from its node selector, docs/node-labels.md)."""
    default_partition: str = ""
    """The partition of a job whose node selector names none."""
    qos: dict[str, SlurmQosPolicy] = {}
    """By priority class name."""
