"""A real Slurm's drained node and reservations go through `gpuledger import slurm
--node-states --reservations` (marker `slurm`): the commands that wrote
tests/fixtures/slurm/sinfo-states-real.txt and reservations-real.txt, run again, read as
the committed fixtures are (tests/whatif/test_import_slurm_controls.py)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from gpuledger import events as ev
from gpuledger.replay.importers.slurm import import_slurm
from gpuledger.replay.logio import read_log

pytestmark = pytest.mark.slurm

REAL = Path(__file__).parents[1] / "fixtures" / "slurm-real"


def test_a_drained_node_and_reservations_of_a_real_slurm_import(real_slurm, tmp_path):
    """Given n2 drained and a MAINT reservation on n1 and one for account root, when sinfo
    and scontrol's output are imported, then n2 is cordoned (drained), the MAINT reservation
    is a window and the account's a window held for tenant root."""
    run = real_slurm.run
    run("scontrol", "update", "nodename=n2", "state=drain", "reason=firmware")
    run(
        "scontrol",
        "create",
        "reservation",
        "reservationname=glt_fw",
        "starttime=2030-01-07T06:00:00",
        "endtime=2030-01-07T10:00:00",
        "nodes=n1",
        "users=root",
        "flags=maint,ignore_jobs",
    )
    run(
        "scontrol",
        "create",
        "reservation",
        "reservationname=glt_ml",
        "starttime=2030-01-08T09:00:00",
        "duration=02:00:00",
        "nodes=n1",
        "accounts=root",
        "flags=ignore_jobs",
    )
    try:
        sinfo = tmp_path / "sinfo.txt"
        sinfo.write_text(run("sinfo", "--Node", "--noheader", "--format=%N|%c|%m|%G|%P|%T"))
        resv = tmp_path / "reservations.txt"
        resv.write_text(run("scontrol", "show", "reservation"))
    finally:
        run("scontrol", "delete", "reservationname=glt_fw", check=False)
        run("scontrol", "delete", "reservationname=glt_ml", check=False)
        run("scontrol", "update", "nodename=n2", "state=resume", check=False)
    out = tmp_path / "slurm.jsonl"
    summary = import_slurm(
        REAL / "sacct.txt", out, sinfo=sinfo, node_states=True, reservations=resv
    ).summary
    log = [e for _, _, e in read_log(out)]
    cordons = {e.node: e.reason for e in log if isinstance(e, ev.NodeCordoned)}
    assert cordons == {"n2": "Slurm drained (sinfo at export)"}
    windows = {
        e.window_id: (e.nodes, e.tenant) for e in log if isinstance(e, ev.MaintenanceScheduled)
    }
    assert windows == {"glt_fw": (("n1",), msgspec.UNSET), "glt_ml": (("n1",), "root")}
    assert (summary["nodes_drained"], summary["maintenance_windows"]) == (1, 1)
    assert summary["skipped_rows"] == 0
