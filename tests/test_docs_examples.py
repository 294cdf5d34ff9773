"""The documentation's examples are executed: every command shown with its output in the README
and in docs/ runs here and its output is compared (wall-clock times, rates and ids normalised).

Parsing is Sybil's (Markdown fenced blocks):

- a ```console block holds `$ gpuledger ...` commands (a trailing backslash continues one on
  the next line), each followed by the output it prints (stdout and stderr, in order); a line
  `...` in the output stands for any number of lines;
- a ```yaml block whose first line is `# NAME.yaml` is written to NAME.yaml, so a command can
  read the file the page shows (the README's cluster.yaml and job.yaml);
- an HTML comment `<!-- invisible-code-block: python ... -->` runs a hidden check with the
  helpers of this module in its namespace.

Each page runs in order in its own temporary folder, in which `examples/`, `tests/`, `deploy/`
and `replay/` point at the repository's. A shown command that is not in a ```console block
fails `test_every_shown_output_is_executed`, so no example escapes the suite.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from sybil import Example, Sybil
from sybil.parsers.abstract import AbstractCodeBlockParser
from sybil.parsers.markdown import CodeBlockParser
from sybil.parsers.markdown.lexers import DirectiveInHTMLCommentLexer

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md"))]
LINKED = ("examples", "tests", "deploy", "replay")
TIMEOUT_S = 300

# what depends on the wall clock or the machine, never on the decisions
_NORMALISE = [
    (re.compile(r"\bin \d+(\.\d+)?\s*(s|ms)\b"), "in <T>"),
    (re.compile(r"\bseconds=\d+(\.\d+)?"), "seconds=<T>"),
    (re.compile(r"\(\d[\d,]*(\.\d+)? events/s\)"), "(<N> events/s)"),
    (
        re.compile(r"\b(19[89]\d|2\d{3})-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:\d\d)?"),
        "<TIME>",
    ),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "<UUID>"),
    (re.compile(r"\b[0-9a-f]{32,}\b"), "<ID>"),
]


def normalise(text: str) -> list[str]:
    lines = []
    for line in text.splitlines():
        for pattern, repl in _NORMALISE:
            line = pattern.sub(repl, line)
        lines.append(line.rstrip())
    while lines and not lines[-1]:
        lines.pop()
    return lines


def matches(expected: list[str], actual: list[str]) -> bool:
    """Line by line; an expected line `...` matches any number of lines."""
    pattern = "".join(r"(?:.*\n)*?" if e == "..." else re.escape(e) + r"\n" for e in expected)
    return re.fullmatch(pattern, "".join(a + "\n" for a in actual)) is not None


def split_session(source: str) -> list[tuple[str, list[str]]]:
    """`$ command` lines (with `\\` continuations) and the output lines after each."""
    steps: list[tuple[str, list[str]]] = []
    lines = source.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith("$ "):
            raise ValueError(f"console block: expected a '$ ' command, got {line!r}")
        command = line[2:]
        while command.endswith("\\") and i + 1 < len(lines):
            i += 1
            command = command[:-1] + " " + lines[i].strip()
        i += 1
        output = []
        while i < len(lines) and not lines[i].startswith("$ "):
            output.append(lines[i])
            i += 1
        steps.append((command, output))
    return steps


def run_gpuledger(command: str, cwd: Path) -> str:
    argv = shlex.split(command)
    if not argv or argv[0] != "gpuledger":
        raise ValueError(f"only gpuledger commands run in the docs' tests: {command!r}")
    env = {
        **os.environ,
        "COLUMNS": "100",
        "NO_COLOR": "1",
        "TERM": "dumb",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("GPULEDGER_NATS_URL", None)
    env.pop("GPULEDGER_CREDS", None)
    done = subprocess.run(
        [sys.executable, "-m", "gpuledger.services.cli", *argv[1:]],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=TIMEOUT_S,
    )
    return done.stdout


UPDATE = os.environ.get("GPULEDGER_UPDATE_DOCS") == "1"
"""`GPULEDGER_UPDATE_DOCS=1 pytest tests/test_docs_examples.py` writes what each command printed
into its page instead of failing (blocks holding a `...` line are never rewritten): review the
diff with git before committing it."""


def evaluate_console(example: Example) -> str | None:
    cwd = example.namespace["cwd"]
    failures, rewritten = [], []
    for command, expected in split_session(example.parsed):
        actual = run_gpuledger(command, cwd)
        want, got = normalise("\n".join(expected)), normalise(actual)
        if not matches(want, got):
            diff = "\n".join(difflib.unified_diff(want, got, "documented", "printed", lineterm=""))
            failures.append(f"$ {command}\n{diff}")
        rewritten.append((expected, _keep_documented(expected, actual)))
    if failures and UPDATE and all("..." not in e for e, _ in rewritten):
        _rewrite_block(Path(example.path), example.parsed, rewritten)
        return None
    return failures[0] if failures else None


def _keep_documented(expected: list[str], actual: str) -> list[str]:
    """The printed lines, except that a line equal to a documented one once normalised keeps
    the documented text (its times and rates do not churn)."""
    printed = [line.rstrip() for line in actual.rstrip().splitlines()]
    want, got = normalise("\n".join(expected)), normalise("\n".join(printed))
    out = list(printed)
    matcher = difflib.SequenceMatcher(a=want, b=got, autojunk=False)
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            out[block.b + k] = expected[block.a + k].rstrip()
    return out


def _rewrite_block(path: Path, source: str, outputs: list[tuple[list[str], list[str]]]) -> None:
    """Replace each step's documented output in `source` (one block of `path`) by what it
    printed, keeping the command lines as written."""
    lines, out, step = source.splitlines(), [], -1
    i = 0
    while i < len(lines):
        if lines[i].startswith("$ "):
            step += 1
            out.append(lines[i])
            while lines[i].endswith("\\") and i + 1 < len(lines):
                i += 1
                out.append(lines[i])
            out.extend(outputs[step][1])
        i += 1
    text = path.read_text()
    assert text.count(source) >= 1, f"{path}: block not found for rewriting"
    path.write_text(text.replace(source, "\n".join(out) + "\n", 1))


def evaluate_yaml(example: Example) -> None:
    first = example.parsed.splitlines()[0] if example.parsed else ""
    name = re.fullmatch(r"#\s*([\w.-]+\.ya?ml)\s*", first)
    if name:
        (example.namespace["cwd"] / name.group(1)).write_text(example.parsed)


def simulate_job(config: str, job: str, cwd: Path | None = None) -> str:
    """What happens to the job file `job` on the cluster of `config` in the simulator:
    `placed`, or the job's final state and reason."""
    here = Path(cwd) if cwd is not None else Path.cwd()
    doc = yaml.safe_load((here / config).read_text())
    spec = yaml.safe_load((here / job).read_text())
    doc["timeline"] = [{"at": 0, "submit": spec}]
    scenario = here / "_scenario.yaml"
    scenario.write_text(yaml.safe_dump(doc))
    report = json.loads(run_gpuledger(f"gpuledger simulate {scenario.name} -q --json -", here))
    (entry,) = [j for j in report["jobs"] if j["id"] == spec["id"]]
    return "placed" if entry["placements"] else f"{entry['state']}: {entry['reason']}"


def evaluate_python(example: Example) -> None:
    namespace = example.namespace
    cwd = namespace["cwd"]
    helpers: dict[str, Any] = {"simulate_job": lambda c, j: simulate_job(c, j, cwd)}
    exec(compile(example.parsed, str(example.path), "exec"), helpers)  # the docs' own checks


SYBIL = Sybil(
    parsers=[
        CodeBlockParser(language="console", evaluator=evaluate_console),
        CodeBlockParser(language="yaml", evaluator=evaluate_yaml),
        AbstractCodeBlockParser(
            [DirectiveInHTMLCommentLexer(directive=r"invisible-code-block", arguments=".+")],
            language="python",
            evaluator=evaluate_python,
        ),
    ],
    path=str(ROOT),
)


def _with_commands(path: Path) -> bool:
    text = path.read_text()
    return (
        re.search(r"^```console", text, re.MULTILINE) is not None or "invisible-code-block" in text
    )


@pytest.mark.parametrize(
    "page", [p for p in PAGES if _with_commands(p)], ids=lambda p: p.relative_to(ROOT).as_posix()
)
def test_documented_commands_print_what_the_page_shows(page: Path, tmp_path: Path) -> None:
    for name in LINKED:
        (tmp_path / name).symlink_to(ROOT / name)
    document = SYBIL.parse(page)
    document.namespace["cwd"] = tmp_path
    examples = list(document)
    assert examples, f"{page.name}: no examples parsed"
    for example in examples:
        example.evaluate()


_FENCE = re.compile(r"^(```+|~~~+)\s*([\w-]*)", re.MULTILINE)


def shown_outside_console(text: str) -> list[str]:
    """`$ ` command lines inside fenced blocks that are not ```console blocks."""
    found, language, fence = [], None, None
    for line in text.splitlines():
        m = _FENCE.match(line)
        if m and fence is None:
            fence, language = m.group(1), m.group(2)
            continue
        if fence is not None and line.startswith(fence):
            fence = language = None
            continue
        if fence is not None and language != "console" and line.startswith("$ "):
            found.append(line)
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_shown_output_is_executed(page: Path) -> None:
    assert shown_outside_console(page.read_text()) == []


def test_the_guard_sees_a_shown_command_outside_console_blocks() -> None:
    text = "```\n$ gpuledger jobs\nNAME\n```\n```console\n$ gpuledger check x.yaml\n```\n"
    assert shown_outside_console(text) == ["$ gpuledger jobs"]


def test_a_console_block_fails_when_the_output_differs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys.modules[__name__], "UPDATE", False)
    page = tmp_path / "page.md"
    page.write_text("```console\n$ gpuledger check nothing.yaml\nok nothing.yaml (config)\n```\n")
    document = SYBIL.parse(page)
    document.namespace["cwd"] = tmp_path
    (example,) = list(document)
    with pytest.raises(AssertionError, match="printed"):
        example.evaluate()


def test_normalising_hides_clock_and_ids_not_decisions() -> None:
    assert normalise("wrote 20 events in 0.23s: 6 nodes  ") == ["wrote 20 events in <T>: 6 nodes"]
    assert normalise("at 2026-11-27T09:00:01Z id 0123456789abcdef0123456789abcdef") == [
        "at <TIME> id <ID>"
    ]
    assert normalise("1970-01-01T00:00:29") == ["1970-01-01T00:00:29"]  # virtual time stays
    assert matches(["a", "...", "d"], ["a", "b", "c", "d"])
    assert not matches(["a", "...", "d"], ["a", "b", "c", "e"])
