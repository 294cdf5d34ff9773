"""Issue 30: importers skip a hostile row with its file and line, and never print a
traceback: binary bytes, NaN and infinite numbers, over-long fields, absurd quantities (Slurm's
1e23 GPUs), nested JSON. A node inventory that declares more GPUs than a node may hold
(docs/inputs.md) is one error line, before any GPU is built."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuledger.replay.importers.common import MAX_FIELD, TraceImportError
from gpuledger.replay.importers.csvtrace import import_csv
from gpuledger.replay.importers.kubernetes import import_kubernetes
from gpuledger.replay.importers.slurm import import_slurm
from gpuledger.services.cli.main import app

FIX = Path(__file__).resolve().parents[1] / "fixtures"


def slurm_rows(tmp_path: Path, extra: dict[str, bytes]) -> tuple[Path, dict[str, int]]:
    """The fixture's header and first job, then one copy of that job per `extra` edit
    (a `str.replace` on the row, or a whole raw row), each with its own job id."""
    header, row = (FIX / "slurm" / "sacct.txt").read_bytes().splitlines()[:2]
    lines, at = [header, row], {}
    for i, (name, edit) in enumerate(extra.items(), 2):
        jid = str(2000 + i).encode()
        if isinstance(edit, tuple):
            new = row.replace(edit[0], edit[1]).replace(b"1001|1001", jid + b"|" + jid, 1)
        else:
            new = edit
        lines.append(new)
        at[name] = i + 1
    path = tmp_path / "sacct.txt"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path, at


HOSTILE_SLURM = {
    "1e23 GPUs": ((b"gres/gpu=8", b"gres/gpu=100000000000000000000000"), "at most 1024 per node"),
    "NaN CPUs": ((b"cpu=32", b"cpu=nan"), "out of range"),
    "infinite CPUs": ((b"cpu=32", b"cpu=inf"), "out of range"),
    "absurd memory": ((b"mem=256G", b"mem=99999999999999999999T"), "out of range"),
    "absurd node count": ((b"|1|gpu-a01|", b"|99999999999999999999|gpu-a01|"), "at most 100,000"),
    "over-long field": ((b"train-llm", b"x" * (MAX_FIELD + 1)), "characters (at most 65,536)"),
    "binary": (b"2042|2042|\xff\xfe\x00|alice", "(binary data?)"),
}


def test_slurm_skips_hostile_rows_with_file_and_line(tmp_path):
    path, at = slurm_rows(tmp_path, {k: v for k, (v, _) in HOSTILE_SLURM.items()})
    result = import_slurm(path, tmp_path / "out.jsonl", sinfo=FIX / "slurm" / "sinfo.txt")
    skipped = result.summary["skipped"]
    for name, (_, reason) in HOSTILE_SLURM.items():
        where = f"{path}:{at[name]}"
        hits = [r for r, s in skipped.items() if reason in r and where in s["first"]]
        assert hits, (name, where, skipped)
    assert result.summary["jobs"] == 1  # the fixture's own job, nothing of the rest
    assert result.summary["skipped_rows"] == len(HOSTILE_SLURM)


def test_slurm_nodes_with_more_gpus_than_a_node_may_hold_are_one_error(tmp_path):
    sinfo = tmp_path / "sinfo.txt"
    sinfo.write_text("gpu-z|64|1000|gpu:a100:100000000000\n")
    path, _ = slurm_rows(tmp_path, {})
    with pytest.raises(TraceImportError, match=rf"{sinfo}:1: GRES .*more than 1024 GPUs"):
        import_slurm(path, tmp_path / "out.jsonl", sinfo=sinfo)
    r = CliRunner().invoke(
        app,
        [
            "import",
            "slurm",
            "--sacct",
            str(path),
            "--sinfo",
            str(sinfo),
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert [ln for ln in r.output.splitlines() if ln.strip()] == [
        f"error: {sinfo}:1: GRES 'gpu:a100:100000000000': more than 1024 GPUs on one node"
        " (docs/inputs.md)"
    ]


def test_csv_skips_binary_and_over_long_rows_with_file_and_line(tmp_path):
    rows = (FIX / "csv" / "jobs.csv").read_bytes().splitlines()
    trace = tmp_path / "jobs.csv"
    bad_bytes = rows[1].replace(b"j-0001,alice", b"j-9001,\xff\xfe")
    long_field = rows[1].replace(b"j-0001,alice", b"j-9002," + b"a" * (MAX_FIELD + 1))
    trace.write_bytes(b"\n".join([rows[0], rows[1], bad_bytes, long_field]) + b"\n")
    result = import_csv(
        trace,
        tmp_path / "out.jsonl",
        mapping=FIX / "csv" / "mapping.yaml",
        nodes_file=FIX / "csv" / "nodes.yaml",
    )
    skipped = result.summary["skipped"]
    assert skipped["bytes that are not UTF-8 text (binary data?)"]["first"] == [f"{trace}:3"]
    assert skipped["a field of 65,537 characters (at most 65,536)"]["first"] == [f"{trace}:4"]


CSV_NUMBERS = {
    "no GPU count (NaN)": ((b",8,,A100", b",nan,,A100"), "gpus: NaN is no GPU count"),
    "1e308 GPUs": ((b",8,,A100", b",1e308,,A100"), "gpus: out of range: '1e308'"),
    "infinite GPUs": ((b",8,,A100", b",inf,,A100"), "gpus: out of range: 'inf'"),
    "1e308 GiB of memory": ((b",32,256", b",32,1e308"), "mem_gb: out of range: '1e308'"),
    "2^40 GiB of memory": (
        (b",32,256", b",32,1099511627776"),
        "mem_gb: out of range: 1.09951e+12 Gi",
    ),
}


def test_csv_skips_a_row_with_a_missing_or_absurd_number_and_imports_the_rest(tmp_path):
    # given the fixture's first job, then one copy of it per hostile number
    header, row = (FIX / "csv" / "jobs.csv").read_bytes().splitlines()[:2]
    lines = [header, row]
    for i, (old, new) in enumerate(v[0] for v in CSV_NUMBERS.values()):
        lines.append(row.replace(b"j-0001", f"j-9{i:03}".encode()).replace(old, new))
    trace = tmp_path / "jobs.csv"
    trace.write_bytes(b"\n".join(lines) + b"\n")
    # when it is imported
    result = import_csv(
        trace,
        tmp_path / "out.jsonl",
        mapping=FIX / "csv" / "mapping.yaml",
        nodes_file=FIX / "csv" / "nodes.yaml",
    )
    # then the good job is imported and every hostile row is skipped with its reason and line
    # (none of them read as a 0-GPU job, none of them stops the import)
    assert result.summary["jobs"] == 1
    skipped = result.summary["skipped"]
    for line, (_, reason) in enumerate(CSV_NUMBERS.values(), 3):
        (hit,) = [k for k in skipped if k.startswith(reason)]
        assert skipped[hit]["first"] == [f"{trace}:{line}"]


@pytest.mark.parametrize(
    "head", [b"\x7fELF\x02\x01\x01\x00\x00", b"job_id,us\xffer"], ids=["binary file", "not UTF-8"]
)
def test_a_csv_whose_header_is_not_text_is_one_line_that_never_echoes_its_bytes(tmp_path, head):
    trace = tmp_path / "t.csv"
    trace.write_bytes(head + b"\n1,2\n")
    r = CliRunner().invoke(
        app,
        ["import", "csv", str(trace), "--mapping", str(FIX / "csv" / "mapping.yaml"),
         "--config-nodes", str(FIX / "csv" / "nodes.yaml"), "--out", str(tmp_path / "o.jsonl")],
    )  # fmt: skip
    assert r.exit_code == 2
    assert r.output.strip().startswith(f"error: {trace}:1: the header holds ")
    assert "(binary data?): not a CSV trace" in r.output
    assert "ELF" not in r.output and "\udcff" not in r.output and "\x00" not in r.output
    assert not (tmp_path / "o.jsonl").exists()


def test_kubernetes_skips_a_nested_or_misshapen_pod_with_its_line(tmp_path):
    pods = json.loads((FIX / "kubernetes" / "pods.json").read_text())
    nested: dict = {}
    cursor = nested
    for _ in range(200):
        cursor["x"] = {}
        cursor = cursor["x"]
    good = next(
        p
        for p in pods["items"]
        if not any(r.get("kind") == "DaemonSet" for r in p["metadata"].get("ownerReferences", []))
        and "kubernetes.io/config.mirror" not in p["metadata"].get("annotations", {})
    )
    deep = {**good, "metadata": {**good["metadata"], "name": "deep", "annotations": nested}}
    misshapen = {**good, "metadata": {**good["metadata"], "name": "odd"}, "spec": ["not", "a"]}
    pods["items"] = [good, deep, misshapen]
    path = tmp_path / "pods.json"
    path.write_text(json.dumps(pods, indent=1))
    result = import_kubernetes(
        path, tmp_path / "out.jsonl", nodes=FIX / "kubernetes" / "nodes.json"
    )
    reasons = result.summary["skipped"]
    nested_reason = next(r for r in reasons if "nested more than 64 levels" in r)
    odd_reason = next(r for r in reasons if r.startswith("not a pod"))
    assert all(w.startswith(f"{path}:") for w in reasons[nested_reason]["first"])
    assert all(w.startswith(f"{path}:") for w in reasons[odd_reason]["first"])
