"""GPU health from NVML: what makes a GPU unhealthy, and the reason we report.

A GPU is unhealthy when NVML says it is lost, when any NVML call we need fails for a
reason other than "not supported", or when it has uncorrected volatile ECC errors (the
counter since the last driver load; a non-zero value means data was corrupted and the
GPU needs a reset). An unhealthy GPU receives no new placements; members already running
on it keep running and are reported (the agent never kills work on its own).

``error_reason`` is pure; ``device_health_reason`` reads NVML.
"""

from __future__ import annotations

from typing import Any


def error_code(err: BaseException) -> int | None:
    """The NVML return code carried by a ``pynvml.NVMLError``, None for other errors."""
    value = getattr(err, "value", None)
    return value if isinstance(value, int) else None


def error_reason(call: str, err: BaseException, *, lost_code: int = 15) -> str:
    """A short human reason for an NVML failure, e.g. ``"GPU is lost (nvmlDeviceGetName)"``.

    ``lost_code`` is ``NVML_ERROR_GPU_IS_LOST``. Pure: never calls NVML (``str()`` of an
    error with an unknown code would).
    """
    code = error_code(err)
    if code == lost_code:
        return f"GPU is lost ({call})"
    known = getattr(type(err), "_errcode_to_string", {})
    text = known.get(code) if code is not None else None
    if text is None:
        text = f"NVML error {code}" if code is not None else f"{type(err).__name__}: {err}"
    return f"NVML error in {call}: {text}"


def is_not_supported(nvml: Any, err: BaseException) -> bool:
    """True for errors that mean "this GPU does not offer that", not "this GPU is broken"."""
    return error_code(err) in (
        nvml.NVML_ERROR_NOT_SUPPORTED,
        nvml.NVML_ERROR_FUNCTION_NOT_FOUND,
    )


def ecc_reason(uncorrected_volatile: int) -> str | None:
    """The unhealthy reason for a count of uncorrected volatile ECC errors, None if zero."""
    if uncorrected_volatile > 0:
        return f"{uncorrected_volatile} uncorrected ECC error(s) since the last driver load"
    return None


def device_health_reason(nvml: Any, handle: Any) -> str | None:
    """Read the health of one GPU; None means healthy. Never raises NVML errors."""
    try:
        count = nvml.nvmlDeviceGetTotalEccErrors(
            handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
        )
    except nvml.NVMLError as err:
        if is_not_supported(nvml, err):  # ECC off or not offered (e.g. GeForce)
            return None
        return error_reason(
            "nvmlDeviceGetTotalEccErrors", err, lost_code=nvml.NVML_ERROR_GPU_IS_LOST
        )
    return ecc_reason(int(count))
