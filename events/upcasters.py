"""Upcasters: old event versions rewritten, as plain JSON objects, into current ones.

Each entry maps an old tag to a function that takes the decoded JSON object and returns the
object of the next version (with its new `type`). Chains are followed until a current tag is
reached, so decoding always yields current types. Old versions' golden fixtures stay in the
tests forever.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]


def _gpu_metrics_v1_to_v2(obj: dict[str, Any]) -> dict[str, Any]:
    """GpuMetricsReported.v1 carried `util_pct` (0-100, NVML utilisation rate per GPU).

    v2 reports `sm_active` as a 0..1 ratio and names its source; a v1 percentage was always
    NVML's utilisation rate, so it becomes `sm_active = util_pct / 100` with
    `util_source = "nvml_utilization"`.
    """
    samples = []
    for s in obj.get("samples", []):
        s = dict(s)
        pct = s.pop("util_pct", None)
        s["sm_active"] = None if pct is None else pct / 100
        s["util_source"] = None if pct is None else "nvml_utilization"
        samples.append(s)
    return {**obj, "type": "GpuMetricsReported.v2", "samples": samples}


UPCASTERS: dict[str, Upcaster] = {
    "GpuMetricsReported.v1": _gpu_metrics_v1_to_v2,
}
