"""The job and node control events (events/control.py, issue 42) as a contract: given each
type, then `gpuledger schema` lists it, it travels on the subject that names its actor (a
tenant's `gl.ctl.<tenant>.>`, the operator's `gl.admin.>`), and out-of-range values do not
decode."""

import json
import subprocess
import sys

import pytest

from gpuledger import events as ev
from gpuledger.events.control import NODE_CONTROL_EVENTS

JOB = dict(job_id="j1", tenant="org/a")


@pytest.mark.parametrize(
    "event, subject",
    [
        (ev.JobHeld(**JOB), "gl.ctl.org/a.j1.JobHeld"),
        (ev.JobHeld(**JOB, actor="operator"), "gl.admin.ctl.org/a.j1.JobHeld"),
        (ev.JobReleased(**JOB), "gl.ctl.org/a.j1.JobReleased"),
        (ev.JobRequeued(**JOB, actor="operator"), "gl.admin.ctl.org/a.j1.JobRequeued"),
        (ev.JobPriorityChanged(**JOB, nice=5), "gl.ctl.org/a.j1.JobPriorityChanged"),
        (ev.JobMovedToTop(**JOB), "gl.ctl.org/a.j1.JobMovedToTop"),
        (ev.NodeCordoned(node="n1", drain=True), "gl.admin.node.n1.NodeCordoned"),
        (ev.NodeUncordoned(node="n1"), "gl.admin.node.n1.NodeUncordoned"),
        (
            ev.MaintenanceScheduled(window_id="fw", nodes=("n1",), start_ms=1, end_ms=2),
            "gl.admin.maint.fw.MaintenanceScheduled",
        ),
        (ev.MaintenanceCancelled(window_id="fw"), "gl.admin.maint.fw.MaintenanceCancelled"),
    ],
)
def test_each_control_event_travels_on_the_subject_of_its_actor(event, subject):
    assert ev.subject_for(event) == subject
    assert type(event) in ev.CLIENT_EVENTS


def test_gpuledger_schema_lists_every_control_event():
    out = subprocess.run(
        [sys.executable, "-m", "gpuledger.services.cli", "schema"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    schema = json.loads(out)
    for cls in (*ev.CONTROL_EVENTS, *NODE_CONTROL_EVENTS):
        assert cls.__struct_config__.tag in json.dumps(schema), cls.__name__


@pytest.mark.parametrize(
    "doc",
    [
        {"type": "JobPriorityChanged.v1", **JOB, "priority": 1_000_001},
        {"type": "JobPriorityChanged.v1", **JOB, "nice": -1_000_001},
        {"type": "JobHeld.v1", **JOB, "actor": "root"},
        {"type": "JobHeld.v1", **JOB, "reason": "x" * 501},
        {"type": "NodeCordoned.v1", "node": "n1", "deadline_s": -1},
        {
            "type": "MaintenanceScheduled.v1",
            "window_id": "w",
            "nodes": ["n1"],
            "start_ms": -1,
            "end_ms": 5,
        },
    ],
    ids=["priority", "nice", "actor", "reason", "deadline", "window-start"],
)
def test_out_of_range_control_events_do_not_decode(doc):
    with pytest.raises(ev.UndecodableEvent):
        ev.decode(json.dumps(doc).encode())
