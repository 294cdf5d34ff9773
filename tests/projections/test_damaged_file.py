"""Issue 30: a truncated or overwritten projection file is one line naming the file and the
way out (`gpuledger project --rebuild`), never a traceback; the rebuild then works, since the
projection is only a fold of the log."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gpuledger import events as ev
from gpuledger.projections.store import Projector
from gpuledger.replay.logio import write_log
from gpuledger.services.cli.main import app


def the_log(tmp_path):
    entries = []
    for i in range(60):
        spec = ev.JobSpec(job_id=f"j{i}", tenant="a", resources=ev.Resources(gpus=1))
        e = ev.JobSubmitted(event_id=f"s{i}", job=spec)
        entries.append((i + 1, ev.subject_for(e), e))
    log = tmp_path / "log.jsonl"
    write_log(log, entries)
    db = tmp_path / "good.duckdb"
    pj = Projector(db)
    for seq, subject, e in entries:
        pj.apply(seq, subject, e)
    pj.commit()
    pj.close()
    return log, db.read_bytes()


DAMAGE = {
    "truncated": lambda data: data[: len(data) // 2],
    "header only": lambda data: data[:4096],
    "overwritten": lambda data: b"not a database " * 300,
}


@pytest.mark.parametrize("how", sorted(DAMAGE))
def test_a_damaged_projection_is_one_line_naming_the_file_and_the_rebuild(tmp_path, how):
    log, good = the_log(tmp_path)
    db = tmp_path / "p.duckdb"
    db.write_bytes(DAMAGE[how](good))
    # a truncated file may still answer what it holds whole; whatever reads a missing part,
    # and whatever cannot open it, ends in the one line (`jobs` reads every job's row)
    failed = []
    for args in (["jobs"], ["sql", "SELECT * FROM events"], ["why", "j1"]):
        r = CliRunner().invoke(app, [*args, "--db", str(db)])
        assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
        assert "Traceback" not in r.output
        if r.exit_code == 0:
            continue
        failed.append(args[0])
        lines = [ln for ln in r.output.splitlines() if ln.strip()]
        assert len(lines) == 1, (args, lines)
        assert str(db) in lines[0] and "gpuledger project --rebuild" in lines[0], lines[0]
    assert "jobs" in failed
    r = CliRunner().invoke(app, ["project", "--log", str(log), "--db", str(db)])
    assert r.exit_code != 0 and "Traceback" not in r.output
    assert "gpuledger project --rebuild" in r.output
    r = CliRunner().invoke(app, ["project", "--rebuild", "--log", str(log), "--db", str(db)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["sql", "SELECT count(*) AS n FROM jobs", "--db", str(db)])
    assert r.exit_code == 0 and "60" in r.output, r.output
