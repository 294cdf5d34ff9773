"""The command line as a user meets it: `--version`, completion, and help that reads as
paragraphs (a line of --help ends only where the next word would not have fitted)."""

from __future__ import annotations

import re
from importlib.metadata import version

import pytest
import typer
from typer.testing import CliRunner

from gpuledger.services.cli.helptext import reflow
from gpuledger.services.cli.main import app

WIDTH = 100
runner = CliRunner()


def all_command_paths() -> list[tuple[str, ...]]:
    """Every command and group of the tree, as argument paths (the root is ())."""
    out: list[tuple[str, ...]] = []

    def walk(cmd, path: tuple[str, ...]) -> None:
        out.append(path)
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                walk(sub, (*path, name))

    walk(typer.main.get_command(app), ())
    return out


def render_help(path: tuple[str, ...]) -> str:
    result = runner.invoke(
        app, [*path, "--help"], env={"COLUMNS": str(WIDTH), "TERMINAL_WIDTH": str(WIDTH)}
    )
    assert result.exit_code == 0, result.output
    return result.output


def _indent(row: str) -> int:
    return len(row) - len(row[1:].lstrip()) if row[1:].strip("│ ") else -1


def premature_breaks(text: str) -> list[str]:
    """Lines that end although the next line's first word would have fitted after them, inside
    plain paragraphs and inside the help column of rich's panels."""
    bad = []
    lines = text.splitlines()
    panels: list[list[str]] = []
    for above, below in zip(lines, lines[1:], strict=False):
        if above.startswith(" ") and below.startswith(" ") and above.strip() and below.strip():
            if re.match(r"\s*(Usage:|[-*•]\s)", below):
                continue
            if len(above.rstrip()) + 1 + len(below.split()[0]) <= WIDTH - 2:
                bad.append(f"{above.strip()!r} / {below.strip()!r}")
    for line in lines:
        if line.startswith("╭"):
            panels.append([])
        elif line.startswith("│") and panels:
            panels[-1].append(line.rstrip())
    for rows in panels:
        indents = [_indent(r) for r in rows if _indent(r) > 0]
        if not indents or max(indents) - min(indents) < 4:
            continue
        help_col = max(indents)  # where continuation rows (blank left columns) start
        for above, below in zip(rows, rows[1:], strict=False):
            if _indent(below) != help_col:
                continue
            end = below.rfind("│")
            left, right = above[help_col:end].rstrip(), below[help_col:end].strip()
            if not left or not right or right.startswith("["):
                continue
            if re.match(r"[-\w.]+\s+<", right):
                continue  # a row of its own (name, metavar) after a `*` required one
            if len(left) + 1 + len(right.split()[0]) <= end - help_col - 1:
                bad.append(f"{left!r} / {right!r}")
    return bad


def test_every_command_is_reachable_and_the_tree_is_complete():
    names = {" ".join(p) for p in all_command_paths()}
    for expected in [
        "up",
        "submit",
        "cancel",
        "status",
        "simulate",
        "check",
        "schema",
        "why",
        "jobs",
        "sql",
        "tenants",
        "project",
        "nodes",
        "nodes discover",
        "export",
        "verify",
        "replay",
        "compare",
        "import alibaba-openb",
        "bench openb",
        "demo",
        "run",
        "apply",
    ]:
        assert expected in names


@pytest.mark.parametrize("path", all_command_paths(), ids=lambda p: " ".join(p) or "gpuledger")
def test_help_breaks_lines_only_where_the_terminal_width_forces_it(path):
    assert premature_breaks(render_help(path)) == []


def test_the_check_sees_a_docstring_broken_mid_sentence():
    demo = typer.Typer()

    @demo.command()
    def up() -> None:
        """Run everything.

        Services are supervised: one that crashes is restarted with back-off (1 s doubling to
        30 s) and reported in one line.
        """

    @demo.command()
    def other() -> None:
        """Another command."""

    text = runner.invoke(demo, ["up", "--help"], env={"COLUMNS": str(WIDTH)}).output
    assert premature_breaks(text) != []


def test_reflow_joins_the_lines_of_a_paragraph_and_keeps_paragraphs_and_list_items():
    doc = "Summary line\ncontinued.\n\nSecond paragraph\nwraps here.\n- item one\n- item two\n"
    assert (
        reflow(doc)
        == "Summary line continued.\n\nSecond paragraph wraps here.\n- item one\n- item two"
    )


def test_version_prints_the_installed_distribution_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"gpuledger {version('gpuledger')}"


def test_shell_completion_is_offered():
    text = render_help(())
    assert "--install-completion" in text and "--show-completion" in text


def test_every_command_sits_in_one_help_panel_and_the_panels_come_in_order():
    # issue 32: 31 commands grouped as run, submit, inspect, replay, operate
    root = typer.main.get_command(app)
    panels = {name: cmd.rich_help_panel for name, cmd in root.commands.items()}
    assert set(panels.values()) == {"Run", "Submit", "Inspect", "Replay", "Operate"}, {
        n: p for n, p in panels.items() if p is None
    }
    assert panels["submit"] == "Submit" and panels["jobs"] == "Inspect"
    assert panels["status"] == "Operate" and panels["up"] == "Run"
    assert panels["bench"] == "Operate" and panels["import"] == "Replay"  # groups too
    text = render_help(())
    titles = re.findall(r"^╭─ (\w+) ", text, re.M)
    assert titles == ["Options", "Run", "Submit", "Inspect", "Replay", "Operate"]
