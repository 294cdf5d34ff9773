"""Reason codes and job states are StrEnums that are their wire strings: given an event
built with enum members, when it is encoded, then the bytes are those of the plain strings,
and a decoded (plain) string compares equal to the member."""

from enum import StrEnum

from gpuledger import events as ev
from gpuledger.events import reasons
from gpuledger.events.reasons import DeclineReason, ExclusionReason, JobState, PendingReason


def declined(reason, code):
    return ev.PreemptionDeclined(
        job_id="j",
        reason=reason,
        message="m",
        details={"excluded": [{"job": "v", "reason": code}]},
        event_id="e",
    )


def test_an_event_with_enum_codes_encodes_to_the_same_bytes_as_with_strings():
    with_enums = declined(DeclineReason.MinRuntime, ExclusionReason.MinRuntime)
    plain = declined("MinRuntime", "MinRuntime")
    assert ev.encode(with_enums) == ev.encode(plain)
    back = ev.decode(ev.encode(with_enums))
    assert type(back.reason) is str and back.reason == DeclineReason.MinRuntime
    assert back == with_enums


def test_every_code_is_its_own_name_and_the_vocabularies_are_closed():
    for enum in (
        reasons.PendingReason,
        reasons.PreemptionReason,
        reasons.ExclusionReason,
        reasons.DeclineReason,
        reasons.RejectReason,
        reasons.EndReason,
        reasons.JobState,
    ):
        assert issubclass(enum, StrEnum)
        assert all(m.value == m.name for m in enum), enum
    assert f"{PendingReason.Resources}" == "Resources" and str(JobState.pending) == "pending"
    assert reasons.TERMINAL_STATES == {"completed", "failed", "rejected", "cancelled", "timeout"}
