"""Every payload is decoded under limits: whatever arrives, `decode` returns an event or raises
UndecodableEvent with a reason, and never anything else (issue 11, cases 1 and 3)."""

from __future__ import annotations

import json

import pytest

from gpuledger import events as ev
from gpuledger.events.limits import MAX_DEPTH, MAX_INT, MAX_PAYLOAD_BYTES
from gpuledger.events.specs import MAX_COUNT


def submission(**resources: object) -> dict:
    return {
        "type": "JobSubmitted.v1",
        "job": {"job_id": "j1", "tenant": "org/a", "resources": resources},
    }


def raw(doc: dict) -> bytes:
    return json.dumps(doc).encode()


def reason(data: bytes | str) -> str:
    with pytest.raises(ev.UndecodableEvent) as exc:
        ev.decode(data)
    return str(exc.value)


def test_fifty_thousand_levels_of_nesting_are_refused_with_the_limit_named() -> None:
    deep = b'{"type":"JobSubmitted.v1","x":' + b"[" * 50_000 + b"]" * 50_000 + b"}"
    assert reason(deep) == f"JSON nested deeper than {MAX_DEPTH} levels"


def test_nesting_just_under_the_limit_is_not_refused_for_its_depth() -> None:
    # a valid JobRejected whose details hold MAX_DEPTH - 2 levels: depth counted as 64 with the envelope
    details: object = 1
    for _ in range(MAX_DEPTH - 2):
        details = [details]
    doc = {
        "type": "JobRejected.v1",
        "job_id": "j",
        "tenant": "t",
        "reason": "InvalidSpec",
        "message": "m",
        "details": {"d": details},
    }
    event = ev.decode(raw(doc))
    assert isinstance(event, ev.JobRejected)


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    doc = submission(gpus=1)
    doc["job"]["command"] = ["[" * 5000 + "{" * 5000]
    assert ev.decode(raw(doc)).job.command == ("[" * 5000 + "{" * 5000,)


@pytest.mark.parametrize("gpus", ["1e30", "1" + "0" * 30, "-" + "9" * 40, "1" * 5000])
def test_numbers_beyond_the_integer_range_are_refused_with_where(gpus: str) -> None:
    data = (
        b'{"type":"JobSubmitted.v1","job":{"job_id":"j1","tenant":"t","resources":{"gpus":%s}}}'
        % gpus.encode()
    )
    why = reason(data)
    assert "gpus" in why or "out of range" in why or "float" in why


def test_an_envelope_integer_beyond_two_to_the_53_is_refused() -> None:
    doc = {"type": "JobCancelled.v1", "job_id": "j", "tenant": "t", "occurred_at_ms": MAX_INT + 1}
    assert "occurred_at_ms" in reason(raw(doc))
    doc["occurred_at_ms"] = MAX_INT
    assert ev.decode(raw(doc)).occurred_at_ms == MAX_INT


def test_a_long_digit_run_inside_a_string_is_not_a_number() -> None:
    doc = {"type": "JobCancelled.v1", "job_id": "j", "tenant": "t", "event_id": "run:" + "7" * 30}
    assert ev.decode(raw(doc)).event_id == "run:" + "7" * 30


def test_job_counts_have_magnitude_bounds_but_negative_values_reach_admission() -> None:
    assert "gpus" in reason(raw(submission(gpus=MAX_COUNT + 1)))
    assert ev.decode(raw(submission(gpus=MAX_COUNT))).job.resources.gpus == MAX_COUNT
    # admission explains a negative count itself (InvalidSpec), so decoding keeps it
    assert ev.decode(raw(submission(gpus=-1))).job.resources.gpus == -1


def test_oversized_payloads_are_refused_before_parsing() -> None:
    assert reason(b" " * (MAX_PAYLOAD_BYTES + 1)).startswith(
        f"payload of {MAX_PAYLOAD_BYTES + 1} bytes"
    )


@pytest.mark.parametrize(
    "data",
    [
        b"\xff\xfe\x00garbage",
        b'{"type":"JobSubmitted.v1","job":{"job_id":"\xff","tenant":"t"}}',
        b'{"type":"GpuMetricsReported.v1","node":"n","samples":5}',  # upcaster meets garbage
        b'{"type":"GpuMetricsReported.v1","node":"n","samples":[{"uuid":"u","util_pct":"x"}]}',
        b'{"type":"GpuMetricsReported.v2","node":"n","samples":[{"uuid":"u","sm_active":1e999}]}',
        b'{"type":"NoSuchEvent.v9"}',
        b"[]",
        b"NaN",
        '{"type": "JobCancelled.v1", "job_id": "\ud800"}',
    ],
)
def test_garbage_of_every_kind_is_undecodable_with_a_reason(data: bytes | str) -> None:
    assert reason(data)


def test_only_digit_runs_that_can_be_big_numbers_trigger_the_exact_walk() -> None:
    from gpuledger.events.limits import may_hold_big_numbers

    assert not may_hold_big_numbers(b'{"sm_active":0.8444218515250481234,"n":12}')
    assert may_hold_big_numbers(b'{"a":0.5,"n":12345678901234567}')
    assert may_hold_big_numbers(b'{"n":-12345678901234567}')
    assert may_hold_big_numbers(b'{"x":1.5e12345678901234567}')
    assert may_hold_big_numbers(b"12345678901234567")
    assert may_hold_big_numbers(b'{"x":12345678901234567.5}')
