"""JSON Schema of the events a client may publish (CI systems validate against it)."""

from __future__ import annotations

from typing import Any, Union

import msgspec

from gpuledger.events.catalog import CLIENT_EVENTS, CONFIG_EVENTS


def client_schema() -> dict[str, Any]:
    """One JSON Schema document covering every client-publishable event (submissions,
    cancels, configuration)."""
    union = Union[tuple(CLIENT_EVENTS + CONFIG_EVENTS)]  # type: ignore[valid-type]  # noqa: UP007
    schema = msgspec.json.schema(union)
    schema["$comment"] = (
        "gpuledger client events. Publish JSON on gl.submit.<tenant>.<job> (JobSubmitted), "
        "gl.cancel.<tenant>.<job> (JobCancelled), gl.ctl.<tenant>.<job>.<Type> (JobHeld, "
        "JobReleased: a tenant's own job control) or gl.admin.<Type> (configuration), with a "
        "Nats-Msg-Id header for idempotent retries. "
        "Job ids are per tenant: a job id is created once in its tenant (another tenant may "
        "use the same id, and nothing tells either of the other). To get an error back when "
        "your tenant has taken it, publish submissions with the header "
        "'Nats-Expected-Last-Subject-Sequence: 0': JetStream then "
        "answers a second submission with error 10071 'wrong last sequence' (a retry of the "
        "same content is yours to recognise; `gpuledger submit` does it and exits 1 with "
        "JobIdConflict only for other content). Without those headers JetStream acks every "
        "publish; admission then answers a second submission with other content with "
        "RequestRefused (reason JobIdConflict) on gl.admission.<job>.RequestRefused, shown by "
        "`gpuledger why <job>`, and the first job stands. A publish that reuses a "
        "Nats-Msg-Id within the stream's duplicate window is dropped by JetStream whatever its "
        "content (its ack says duplicate: true): derive the Msg-Id from the content and put "
        "your tenant in it (the window is the stream's, shared by every tenant), or send "
        "the header above, which makes JetStream refuse it with 10071 instead. "
        "A submission that does not match "
        "this schema is rejected: JobRejected (reason InvalidSpec, the decode error in the "
        "message) for the tenant and job its subject names. A cancel of a job its tenant does "
        "not have is answered with RequestRefused (UnknownJob) and changes nothing. "
        "occurred_at_ms may be left out: a missing value, or one more than 300000 ms (5 min) "
        "from the stream's receive time, is replaced by the receive time."
    )
    return schema
