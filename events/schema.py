"""JSON Schema of the events a client may publish (CI systems validate against it)."""

from __future__ import annotations

from typing import Any, Union

import msgspec

from events.catalog import CLIENT_EVENTS, CONFIG_EVENTS


def client_schema() -> dict[str, Any]:
    """One JSON Schema document covering every client-publishable event (submissions,
    cancels, configuration)."""
    union = Union[tuple(CLIENT_EVENTS + CONFIG_EVENTS)]  # type: ignore[valid-type]  # noqa: UP007
    schema = msgspec.json.schema(union)
    schema["$comment"] = (
        "gpuledger client events. Publish JSON on gl.submit.<tenant>.<job> (JobSubmitted), "
        "gl.cancel.<tenant>.<job> (JobCancelled) or gl.admin.<Type> (configuration), with a "
        "Nats-Msg-Id header for idempotent retries."
    )
    return schema
