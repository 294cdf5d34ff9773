"""Pure event -> row mappers.

`Projection` folds events (in stream order) into a small projection state and records what
must be written to each table in a `Batch`:

- *append* tables get one tuple per fact (`events`, `job_transitions`, `decisions`,
  `pending_reasons`, `quota_usage`, `gpu_metrics`, `refusals`);
- *current-state* tables (`jobs`, `allocations`, `preemptions`, `nodes`, `gpus`, `tenants`,
  `priority_classes`) get keyed upserts: the batch keeps the latest version of every row it
  touched, and the writer replaces those keys (delete + insert) inside one transaction. A key
  mapped to None is a delete.

Only accepted events become facts: every event is first folded into the services' own
`Ledger` under the shared acceptance rules (`services.domain.fold.acceptance.admit`); a refused
one is kept in `events` and recorded in `refusals` (code, message) and changes nothing else,
so the projection never shows what the services refused.

The state is the current-state rows (all jobs, nodes, GPUs, tenants; allocation intervals
and preemptions still open) plus that ledger, so a restarted writer rebuilds it from the
tables it wrote and the events it projected (`Projection.load`). No I/O, no clock, no
database here: this module is tested alone.
"""

from gpuledger.projections.mappers.batch import Batch
from gpuledger.projections.mappers.projection import _HANDLERS, Projection, SequenceGap
from gpuledger.projections.mappers.rows import (
    ALL_TABLES,
    APPEND_COLUMNS,
    JSON_COLUMNS,
    ROW_CLASSES,
    AllocationRow,
    GpuRow,
    JobRow,
    JsonColumn,
    NodeRow,
    PreemptionRow,
    PriorityClassRow,
    Row,
    TenantRow,
    columns_of,
)

__all__ = [
    "ALL_TABLES",
    "APPEND_COLUMNS",
    "JSON_COLUMNS",
    "ROW_CLASSES",
    "_HANDLERS",
    "AllocationRow",
    "Batch",
    "GpuRow",
    "JobRow",
    "JsonColumn",
    "NodeRow",
    "PreemptionRow",
    "PriorityClassRow",
    "Projection",
    "Row",
    "SequenceGap",
    "TenantRow",
    "columns_of",
]
