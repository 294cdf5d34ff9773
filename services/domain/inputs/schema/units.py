"""The field types every input document uses: quantities with units, durations, the
limits of sizes and counts, and `Strict`, the base of every shape (unknown keys are errors)."""

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from gpuledger.events.specs import MAX_COUNT, MAX_QUANTITY

# ------------------------------------------------------------------ quantities

_CORES_RE = r"^\d+(\.\d+)?m?$"
_SIZE_RE = r"^\d+(\.\d+)?\s*([KkMmGgTt]i?)?[Bb]?$"
_TIME_RE = r"^\d+(\.\d+)?\s*[smhdSMHD]?$"
ARRAY_RE = r"^\d+(-\d+)?(%\d+)?$"
"""Slurm's `--array` spelling: `0-99%8`, `1-10`, `7`."""
_HINTS = {
    ARRAY_RE: "use a range like 0-99%8 (at most 8 at once) or {count: 100, max_running: 8}",
    _CORES_RE: "use a count like 4, 0.5 or 500m",
    _SIZE_RE: "use a size like 512Mi, 36Gi or 1Ti (a bare number is MiB)",
    _TIME_RE: "use seconds or a duration like 90s, 10m, 2h, 1d",
}

# Upper bounds on every quantity a user document gives (docs/inputs.md), checked when the
# document is validated, before anything proportional to them (a node's GPUs, a gang's
# members) is built: a config node of a billion GPUs is one error line, not a memory error.
MAX_GPUS_PER_NODE = 1024
"""GPUs of one node, and whole GPUs of one member (a member runs on one node)."""
MAX_NODES = 100_000
"""Nodes of one configuration (`count` of a node entry, and all entries together)."""
MAX_FLEET_GPUS = 1 << 17
"""GPUs of one configuration, all nodes together: 131,072 (the seeds' envelope is 4,000)."""
MAX_REPLICAS = MAX_COUNT
"""Replicas (members) of one job: 1,048,576."""
MAX_SECONDS = 10 * 366 * 86_400
"""Durations (`duration`, checkpoint times, timeline `at`): ten years."""
MAX_FRIENDLY = MAX_QUANTITY
"""Any other quantity in its event unit (milli-cores, MiB): 2**40."""

NonNegInt = Annotated[int, Meta(ge=0, le=MAX_QUANTITY)]
PositiveInt = Annotated[int, Meta(ge=1, le=MAX_QUANTITY)]
Replicas = Annotated[int, Meta(ge=1, le=MAX_REPLICAS)]
GpuCount = Annotated[int, Meta(ge=0, le=MAX_GPUS_PER_NODE)]
Seconds = Annotated[int, Meta(ge=0, le=MAX_SECONDS)]
_Number = (
    Annotated[int, Meta(ge=0, le=MAX_QUANTITY)] | Annotated[float, Meta(ge=0, le=MAX_QUANTITY)]
)
Cores = _Number | Annotated[str, Meta(pattern=_CORES_RE, max_length=64)]
"""CPU cores or GPUs: `4`, `0.5`, `500m` (milli)."""
Size = _Number | Annotated[str, Meta(pattern=_SIZE_RE, max_length=64)]
"""Memory: `36Gi`, `512Mi`, `1Ti`; a bare number is MiB."""
Duration = (
    Seconds
    | Annotated[float, Meta(ge=0, le=MAX_SECONDS)]
    | Annotated[str, Meta(pattern=_TIME_RE, max_length=64)]
)
"""Seconds, or `90s`, `10m`, `2h`, `1d` (at most `MAX_SECONDS`)."""
Sharing = Literal["exclusive", "mig", "mps", "timeslice"]
"""How a GPU is shared: whole (`exclusive`), MIG instances, MPS or time-sliced fractions."""


class Strict(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """Base of every user document shape: unknown keys are errors."""
