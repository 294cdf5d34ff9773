"""Slurm's node states (sinfo's state column, `--node-states`) and reservations (`scontrol
show reservation`, `--reservations`) imported as the operator's cordons and windows.

Fixtures (tests/fixtures/slurm/): `sinfo-states-real.txt`, `reservations-real.txt` and
`reservations-real-oneline.txt` are what the real Slurm 22.05 of tests/slurm/realslurm.py
printed after `scontrol update nodename=n2 state=drain reason=...`, `... nodename=n1
state=down`, and `scontrol create reservation` of `maint_fw` (flags=maint,ignore_jobs,
nodes=n1), `ml_demo` (accounts=root, no MAINT) and `maint_all` (flags=maint, nodes=ALL);
`sinfo-states.txt` and `reservations.txt` are hand-written in the same shapes over the nodes
of `sinfo.txt`, with the awkward cases (suffixes, an unknown state, a bad time, an overlap,
an unknown node, a name that is no subject token)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuledger import events as ev
from gpuledger.replay.importers.common import TraceImportError
from gpuledger.replay.importers.slurm import import_slurm
from gpuledger.replay.importers.slurm_node_states import classify
from gpuledger.replay.logio import read_log
from gpuledger.replay.whatif import external_inputs, replay
from gpuledger.services.cli.main import app

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
REAL = Path(__file__).resolve().parents[1] / "fixtures" / "slurm-real"
HOUR_MS = 3600_000


def imported(tmp_path, sacct=FIX / "sacct.txt", **kw):
    out = tmp_path / "slurm.jsonl"
    result = import_slurm(sacct, out, **kw)
    return result.summary, [e for _, _, e in read_log(out)]


def of(log, cls):
    return [e for e in log if isinstance(e, cls)]


@pytest.mark.parametrize(
    "state, kind",
    [
        ("drained", "drained"),  # %T
        ("drain", "drained"),  # %t
        ("draining", "drained"),
        ("drng", "drained"),
        ("DRAINED", "drained"),
        ("fail", "drained"),  # to fail soon, at the administrator's request
        ("mixed+drain", "drained"),  # a combined state
        ("down", "down"),
        ("down*", "down"),
        ("drained*", "down"),  # `*`: not responding, no new work
        ("idle*", "down"),
        ("inval", "down"),
        ("future", "down"),
        ("idle", "up"),
        ("idle~", "up"),  # powered off: Slurm powers it up for work
        ("idle#", "up"),
        ("mix-", "up"),  # planned by backfill
        ("allocated+", "up"),  # some jobs completing
        ("mixed$", "up"),  # in a MAINT reservation: `--reservations` carries it
        ("alloc@", "up"),
        ("idle%", "up"),
        ("idle!", "up"),
        ("reserved", "up"),
        ("resting", None),
        ("", None),
        ("*", None),
    ],
)
def test_every_state_and_suffix_sinfo_documents(state, kind):
    assert classify(state) == kind


def test_the_real_slurm_outputs_import_as_cordons_and_windows(tmp_path):
    """Given what a real Slurm printed for a drained n2, a down n1 and three reservations,
    when imported with --node-states and --reservations, then n2 is drained and n1 down from
    the trace's first event, both MAINT reservations are windows and the account's
    reservation a window held for that account's tenant."""
    summary, log = imported(
        tmp_path,
        sacct=REAL / "sacct.txt",
        sinfo=FIX / "sinfo-states-real.txt",
        node_states=True,
        reservations=FIX / "reservations-real.txt",
    )
    first = min(e.occurred_at_ms for e in log)
    cordons = {e.node: e for e in of(log, ev.NodeCordoned)}
    assert {n: (e.drain, e.force, e.reason) for n, e in cordons.items()} == {
        "n1": (True, True, "Slurm down (sinfo at export)"),
        "n2": (True, False, "Slurm drained (sinfo at export)"),
    }
    windows = {e.window_id: e for e in of(log, ev.MaintenanceScheduled)}
    assert {w: (e.nodes, e.tenant) for w, e in windows.items()} == {
        "maint_fw": (("n1",), msgspec_unset()),
        "ml_demo": (("n1",), "root"),
        "maint_all": (("n1", "n2"), msgspec_unset()),  # Nodes=n[1-2] (ALL)
    }
    fw = windows["maint_fw"]
    assert (fw.start_ms, fw.end_ms - fw.start_ms) == (1893996000000, 4 * HOUR_MS)  # 2030-01-07T06
    assert {e.occurred_at_ms for e in [*cordons.values(), *windows.values()]} == {first}
    assert (summary["nodes_drained"], summary["nodes_down"]) == (1, 1)
    assert (summary["maintenance_windows"], summary["tenant_windows"]) == (2, 1)
    assert summary["skipped_rows"] == 0


def msgspec_unset():
    import msgspec

    return msgspec.UNSET


def test_scontrol_oneliner_output_reads_as_the_multi_line_one(tmp_path):
    def windows(path):
        _, log = imported(
            tmp_path, sacct=REAL / "sacct.txt", sinfo=REAL / "sinfo.txt", reservations=path
        )
        return of(log, ev.MaintenanceScheduled)

    assert windows(FIX / "reservations-real-oneline.txt") == windows(FIX / "reservations-real.txt")


def test_states_are_read_only_when_asked(tmp_path):
    """sinfo is a snapshot at export time: without --node-states its state column changes
    nothing."""
    summary, log = imported(tmp_path, sinfo=FIX / "sinfo-states.txt")
    assert of(log, ev.NodeCordoned) == []
    assert "nodes_drained" not in summary and summary["nodes"] == 7


def test_hand_written_states_with_suffixes_and_an_unreadable_one(tmp_path):
    summary, log = imported(tmp_path, sinfo=FIX / "sinfo-states.txt", node_states=True)
    assert {e.node: e.reason for e in of(log, ev.NodeCordoned)} == {
        "gpu-a02": "Slurm draining (sinfo at export)",
        "gpu-a03": "Slurm drained* (sinfo at export)",
        "gpu-v01": "Slurm down* (sinfo at export)",
    }
    assert (summary["nodes_drained"], summary["nodes_down"]) == (1, 2)
    unread = "cannot read node state 'resting' (--node-states: %T, sixth column)"
    assert summary["skipped"][unread]["first"] == [f"{FIX / 'sinfo-states.txt'}:7"]


def test_hand_written_reservations_each_imported_or_skipped_with_its_line(tmp_path):
    summary, log = imported(
        tmp_path, sinfo=FIX / "sinfo.txt", reservations=FIX / "reservations.txt"
    )
    windows = {e.window_id: (e.nodes, e.tenant) for e in of(log, ev.MaintenanceScheduled)}
    assert windows == {
        "fw_a01": (("gpu-a01",), msgspec_unset()),
        "chem_demo": (("gpu-a03",), "chem"),  # Accounts=chem, no MAINT
        "rack_v": (("gpu-v01",), msgspec_unset()),  # gpu-v09 is not a node of sinfo
    }
    path = str(FIX / "reservations.txt")
    skipped = {d["first"][0]: r for r, d in summary["skipped"].items() if path in d["first"][0]}
    assert {int(k.rsplit(":", 1)[1]): v for k, v in skipped.items()} == {
        13: "reservation fw_overlap overlaps fw_a01 on gpu-a01: not imported",
        19: "reservation bad_times: cannot read a time: hour must be in 0..23",
        23: "reservation rack_v: node gpu-v09 not in the node inventory",
        27: "cannot read reservation name: invalid reservation 'fw.v2': only letters,"
        " digits and _-:+@=,~ are allowed (no '.', '*', '>', spaces)",
    }
    assert (summary["maintenance_windows"], summary["tenant_windows"]) == (2, 1)


def test_a_reservation_for_users_when_tenants_are_accounts_is_skipped_with_why(tmp_path):
    text = (
        "ReservationName=alice_demo StartTime=2024-03-01T12:00:00 EndTime=2024-03-01T13:00:00"
        " Duration=01:00:00 Nodes=gpu-a01 NodeCnt=1 CoreCnt=64 Features=(null)"
        " PartitionName=(null) Flags=SPEC_NODES TRES=cpu=64 Users=alice Groups=(null)"
        " Accounts=(null) Licenses=(null) State=INACTIVE BurstBuffer=(null) Watts=n/a\n"
        "ReservationName=two StartTime=2024-03-01T14:00:00 EndTime=2024-03-01T15:00:00"
        " Nodes=gpu-a01 Flags=SPEC_NODES Users=(null) Accounts=chem,physics\n"
    )
    (tmp_path / "resv.txt").write_text(text)
    summary, log = imported(tmp_path, sinfo=FIX / "sinfo.txt", reservations=tmp_path / "resv.txt")
    assert of(log, ev.MaintenanceScheduled) == []
    mine = {r: d["first"] for r, d in summary["skipped"].items() if "resv.txt" in d["first"][0]}
    at = str(tmp_path / "resv.txt")
    assert mine == {
        "reservation without MAINT held for Users=alice: a window is held for one tenant"
        " (tenants from account)": [f"{at}:1"],
        "reservation without MAINT held for Accounts=chem,physics: a window is held for one"
        " tenant (tenants from account)": [f"{at}:2"],
    }


def test_no_job_is_placed_on_a_drained_or_down_node(tmp_path):
    """Given gpu-a02 draining, gpu-a03 not responding and gpu-v01 down at export, when the
    trace is replayed, then every job runs on gpu-a01 or cpu-01 or waits."""
    _, log = imported(tmp_path, sinfo=FIX / "sinfo-states.txt", node_states=True)
    sim = replay(external_inputs(enumerate_log(log)))
    nodes = {m.node for _, _, e in sim.log if isinstance(e, ev.GangPlaced) for m in e.members}
    assert nodes and nodes <= {"gpu-a01", "gpu-v02", "gpu-v03", "cpu-01"}
    # the 2-node job needs two A100 nodes: only gpu-a01 takes work, so it never starts
    assert str(sim.ledger.jobs["1002"].state) == "pending"
    assert sim.ledger.jobs["1002"].reason == "NodeCordoned"


def test_no_run_on_a_window_node_reaches_into_the_imported_window(tmp_path):
    """Given the MAINT reservation fw_a01 (gpu-a01, 11:00 to 15:00), when the trace is
    replayed, then no run on gpu-a01 reaches into it (a run's time limit is its latest end),
    and a job kept off it is told `Maintenance`."""
    _, log = imported(tmp_path, sinfo=FIX / "sinfo.txt", reservations=FIX / "reservations.txt")
    (w,) = [e for e in of(log, ev.MaintenanceScheduled) if e.window_id == "fw_a01"]
    limits = {e.job.job_id: e.job.time_limit_s for e in of(log, ev.JobSubmitted)}
    sim = replay(external_inputs(enumerate_log(log)))
    on_a01 = [
        (e.job_id, e.occurred_at_ms)
        for _, _, e in sim.log
        if isinstance(e, ev.GangPlaced) and any(m.node == "gpu-a01" for m in e.members)
    ]
    assert on_a01
    for job, at in on_a01:
        limit = limits[job.split("@")[0]]
        assert at >= w.end_ms or (limit is not None and at + limit * 1000 <= w.start_ms), job
    told = [
        e
        for _, _, e in sim.log
        if isinstance(e, ev.PendingReasonChanged) and e.reason == "Maintenance"
    ]
    assert told and "fw_a01" in told[0].message
    # the account's reservation chem_demo holds gpu-a03 (12:00 to 14:00) for tenant chem:
    # chem's 2-day job 1002 starts there at 09:10 (it is not planned down), another
    # tenant's run there would end before it
    (held,) = [e for e in of(log, ev.MaintenanceScheduled) if e.window_id == "chem_demo"]
    tenants = {e.job.job_id: e.job.tenant for e in of(log, ev.JobSubmitted)}
    on_a03 = [
        (e.job_id.split("@")[0], e.occurred_at_ms)
        for _, _, e in sim.log
        if isinstance(e, ev.GangPlaced) and any(m.node == "gpu-a03" for m in e.members)
    ]
    for job, at in on_a03:
        if tenants[job] != "chem":
            limit = limits[job]
            assert at >= held.end_ms or (
                limit is not None and at + limit * 1000 <= held.start_ms
            ), job
    assert ("1002", w.occurred_at_ms + 10 * 60_000) in on_a03 and tenants["1002"] == "chem"


def enumerate_log(events):
    return [(i, ev.subject_for(e), e) for i, e in enumerate(events, 1)]


def test_bad_flags_and_files_are_one_line(tmp_path):
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text("cluster:\n  nodes:\n    - {name: n1, gpus: 8}\n")
    with pytest.raises(TraceImportError, match="--node-states reads the state column of --sinfo"):
        import_slurm(FIX / "sacct.txt", tmp_path / "o.jsonl", nodes_file=nodes, node_states=True)
    with pytest.raises(TraceImportError, match="no state column"):
        import_slurm(
            FIX / "sacct.txt", tmp_path / "o.jsonl", sinfo=FIX / "sinfo.txt", node_states=True
        )
    with pytest.raises(TraceImportError, match="missing.txt"):
        import_slurm(
            FIX / "sacct.txt",
            tmp_path / "o.jsonl",
            sinfo=FIX / "sinfo.txt",
            reservations=tmp_path / "missing.txt",
        )
    assert not (tmp_path / "o.jsonl").exists()


def test_the_cli_summary_names_the_states_and_windows(tmp_path):
    args = [
        "import",
        "slurm",
        "--sacct",
        str(FIX / "sacct.txt"),
        "--sinfo",
        str(FIX / "sinfo-states.txt"),
        "--node-states",
        "--reservations",
        str(FIX / "reservations.txt"),
        "--out",
        str(tmp_path / "o.jsonl"),
    ]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert (
        "  from Slurm at export: nodes drained 1, down 2; maintenance windows 2,"
        " held for a tenant 1" in r.output
    )
    r = CliRunner().invoke(app, [*args, "-o", "json"])
    s = json.loads(r.output)
    assert (s["nodes_drained"], s["nodes_down"], s["maintenance_windows"]) == (1, 2, 2)
