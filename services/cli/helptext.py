"""Help texts that render as paragraphs: docstrings are hard-wrapped at the source's line length,
while rich re-wraps at the terminal's width, so every single line break inside a paragraph would
show up as a break mid-sentence. `reflow_tree` joins them once, for the whole command tree."""

from __future__ import annotations

import inspect
import re
from typing import Any, get_args, get_origin

import typer
from typer.models import ParameterInfo

# A line that starts a list item keeps its own line.
_ITEM = re.compile(r"^\s*([-*•]|\d+[.)])\s")


def reflow(text: str | None) -> str | None:
    """Join the lines of each paragraph (blank lines separate paragraphs; list items and lines
    after a click `\\b` marker stay as written); everything after a `\\f` is dropped as click does."""
    if not text:
        return text
    text = inspect.cleandoc(text).partition("\f")[0]
    out = []
    for para in re.split(r"\n\s*\n", text):
        if para.startswith("\b"):
            out.append(para)
            continue
        lines: list[str] = []
        for line in para.splitlines():
            if lines and not _ITEM.match(line):
                lines[-1] = f"{lines[-1].rstrip()} {line.strip()}"
            else:
                lines.append(line.rstrip())
        out.append("\n".join(lines))
    return "\n\n".join(out).strip()


def _parameter_infos(callback: Any) -> list[ParameterInfo]:
    infos = []
    if callback is None:
        return infos
    for p in inspect.signature(callback).parameters.values():
        if isinstance(p.default, ParameterInfo):
            infos.append(p.default)
        ann = p.annotation
        if get_origin(ann) is not None and hasattr(ann, "__metadata__"):
            infos.extend(m for m in ann.__metadata__ if isinstance(m, ParameterInfo))
        elif isinstance(ann, str) and "Annotated" in ann:
            hints = getattr(callback, "__annotations__", {})
            del hints  # string annotations are resolved by typer itself; their infos live in
            # the resolved Annotated below
            try:
                resolved = inspect.get_annotations(callback, eval_str=True).get(p.name)
            except Exception:  # noqa: BLE001 - an unresolvable hint is typer's error to report
                resolved = None
            if resolved is not None and hasattr(resolved, "__metadata__"):
                infos.extend(m for m in get_args(resolved)[1:] if isinstance(m, ParameterInfo))
    return infos


def _reflow_callback(callback: Any) -> None:
    for info in _parameter_infos(callback):
        info.help = reflow(info.help)


def reflow_tree(app: typer.Typer) -> typer.Typer:
    """Reflow the help of every command, group and parameter under APP (idempotent); returns APP."""
    if app.registered_callback is not None:
        cb = app.registered_callback
        if isinstance(cb.help, str):
            cb.help = reflow(cb.help)
        elif not isinstance(app.info.help, str):  # typer falls back to the callback's docstring
            cb.help = reflow(inspect.getdoc(cb.callback))
        _reflow_callback(cb.callback)
    app.info.help = reflow(app.info.help) if isinstance(app.info.help, str) else app.info.help
    for cmd in app.registered_commands:
        cmd.help = reflow(cmd.help or inspect.getdoc(cmd.callback))
        _reflow_callback(cmd.callback)
    for group in app.registered_groups:
        if isinstance(group.help, str):
            group.help = reflow(group.help)
        reflow_tree(group.typer_instance)
    return app
