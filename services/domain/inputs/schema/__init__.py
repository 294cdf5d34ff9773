"""The one strict schema of everything a user writes: cluster configuration, scenario and
job files (YAML or JSON), one concern a module: the field types (units.py), the shapes of a
configuration (config.py), a job (job.py) and a whole file (files.py), the error lines
(errors.py), the checks beyond the shapes (job_checks.py, file_checks.py, references.py) and
the entry points (validate.py). Every name is importable from here.

Each document shape is a msgspec Struct with `forbid_unknown_fields`; enums are closed
(`Literal`); quantities and times are non-negative with known units (`500m`, `36Gi`, `2h`);
`msgspec.convert` does the checking and its `ValidationError` paths become the project's
error lines (`tenants[1].guarantee: unknown key (did you mean 'guaranteed'?)`). On top of the
shapes: duplicates (node names, tenants, classes, job ids) and references (tenant, class, GPU
model, MIG profile, node, cancelled job) are checked against the same file.

Built-in priority classes (`train`, `interactive`, `build`, `inference`) may only be
redefined with `override: true` on the entry, so a copy-paste cannot silently change them.
Parent tenants are optional (the quota tree skips missing levels), so they are not required.
"""

from __future__ import annotations

from gpuledger.services.domain.inputs.schema.config import (
    ClassChangeDoc,
    ClassDoc,
    ClusterDoc,
    NodeDoc,
    PolicyDoc,
    ReservationDoc,
    ScheduleDoc,
    ServiceChangeDoc,
    TenantChangeDoc,
    TenantDoc,
)
from gpuledger.services.domain.inputs.schema.errors import (
    InputError,
    _suggest,
    collect,
    convert,
)
from gpuledger.services.domain.inputs.schema.files import (
    EntryDoc,
    FileDoc,
    file_schema,
)
from gpuledger.services.domain.inputs.schema.job import (
    ArrayDoc,
    CheckpointDoc,
    DependencyDoc,
    JobDoc,
    SpreadDoc,
)
from gpuledger.services.domain.inputs.schema.references import (
    check_references,
)
from gpuledger.services.domain.inputs.schema.units import (
    ARRAY_RE,
    MAX_FLEET_GPUS,
    MAX_FRIENDLY,
    MAX_GPUS_PER_NODE,
    MAX_NODES,
    MAX_REPLICAS,
    MAX_SECONDS,
    Cores,
    Duration,
    GpuCount,
    NonNegInt,
    PositiveInt,
    Replicas,
    Seconds,
    Sharing,
    Size,
    Strict,
)
from gpuledger.services.domain.inputs.schema.validate import (
    kind_of,
    validate_file,
    validate_job,
    yaml_on,
)

__all__ = [
    "ARRAY_RE",
    "ArrayDoc",
    "CheckpointDoc",
    "ClassChangeDoc",
    "ClassDoc",
    "ClusterDoc",
    "Cores",
    "DependencyDoc",
    "Duration",
    "EntryDoc",
    "FileDoc",
    "GpuCount",
    "InputError",
    "JobDoc",
    "MAX_FLEET_GPUS",
    "MAX_FRIENDLY",
    "MAX_GPUS_PER_NODE",
    "MAX_NODES",
    "MAX_REPLICAS",
    "MAX_SECONDS",
    "NodeDoc",
    "NonNegInt",
    "PolicyDoc",
    "PositiveInt",
    "Replicas",
    "ReservationDoc",
    "ScheduleDoc",
    "Seconds",
    "ServiceChangeDoc",
    "Sharing",
    "Size",
    "SpreadDoc",
    "Strict",
    "TenantChangeDoc",
    "TenantDoc",
    "_suggest",
    "check_references",
    "collect",
    "convert",
    "file_schema",
    "kind_of",
    "validate_file",
    "validate_job",
    "yaml_on",
]
