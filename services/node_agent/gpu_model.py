"""Normalise NVML's raw GPU names into gpuledger model names such as ``H100-80GB``.

Pure. The model name is ``<FAMILY>-<GB>GB``: the family is the product token with vendor
words and form factors removed ("NVIDIA A100-SXM4-40GB" -> "A100"); the size is the
marketed memory size, taken from the raw name when the name states one that agrees with
the measured memory, otherwise the family's known marketed size nearest to the measured
memory, otherwise the measured memory rounded up to whole GiB. Invariant: the same
(raw name, memory) always gives the same model.
"""

from __future__ import annotations

import math
import re

from gpuledger.services.domain.inputs.gpu_models import resolve_node

# Words that never identify a product family.
_VENDOR_WORDS = frozenset({"NVIDIA", "TESLA", "GEFORCE", "QUADRO", "GENERATION"})
# Form factors and memory technologies: they do not change what a job can run on.
_FORM_FACTOR = re.compile(r"^(SXM\d*|PCIE|HBM\d*E?|NVL|NVLINK|MAXQ|MOBILE|LAPTOP|GPU)$")
_SIZE_TOKEN = re.compile(r"^(\d+)GB$")

# Marketed memory sizes (GB) per family, used to name sizes the raw name does not state.
KNOWN_SIZES_GB: dict[str, tuple[int, ...]] = {
    "H100": (80, 94, 96),
    "H200": (141,),
    "H800": (80,),
    "GH200": (96, 144),
    "A100": (40, 80),
    "A800": (40, 80),
    "A30": (24,),
    "A10": (24,),
    "A10G": (24,),
    "A40": (48,),
    "L4": (24,),
    "L40": (48,),
    "L40S": (48,),
    "V100": (16, 32),
    "T4": (16,),
}

# A stated or known size is accepted when it is within this fraction of the measured size.
_TOLERANCE = 0.10


def _tokens(raw_name: str) -> list[str]:
    return [t for t in re.split(r"[\s\-_]+", raw_name.upper()) if t]


def model_family(raw_name: str) -> str:
    """The product family of a raw NVML name: ``"NVIDIA H100 80GB HBM3"`` -> ``"H100"``."""
    kept = [
        t
        for t in _tokens(raw_name)
        if t not in _VENDOR_WORDS and not _FORM_FACTOR.match(t) and not _SIZE_TOKEN.match(t)
    ]
    return "".join(kept) or "UNKNOWN"


def _close(size_gb: int, measured_gib: float) -> bool:
    return abs(size_gb - measured_gib) <= _TOLERANCE * size_gb


def memory_size_gb(raw_name: str, memory_mib: int) -> int:
    """The marketed memory size in GB for a GPU (see the module docstring for the rule)."""
    measured = memory_mib / 1024
    family = model_family(raw_name)
    for token in _tokens(raw_name):
        m = _SIZE_TOKEN.match(token)
        if m and _close(int(m.group(1)), measured):
            return int(m.group(1))
    candidates = [s for s in KNOWN_SIZES_GB.get(family, ()) if _close(s, measured)]
    if candidates:
        return min(candidates, key=lambda s: (abs(s - measured), s))
    return max(1, math.ceil(measured))


def normalise_model(raw_name: str, memory_mib: int) -> str:
    """``"NVIDIA A100-SXM4-40GB"``, 40960 MiB -> ``"A100-40GB"``; ``"NVIDIA H200"`` -> ``"H200-141GB"``.

    The derived name goes through the GPU model vocabulary (`services.domain.inputs.gpu_models`), so
    the agent registers the name importers and configurations use (a derived name the
    vocabulary does not know is kept as derived)."""
    derived = f"{model_family(raw_name)}-{memory_size_gb(raw_name, memory_mib)}GB"
    return resolve_node(derived, memory_mib)
