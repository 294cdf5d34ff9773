"""How the read commands print: kubectl-like tables, ages, JSON and YAML."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Any

import typer


class Output(StrEnum):
    table = "table"
    wide = "wide"
    json = "json"
    yaml = "yaml"


OutputOption = Annotated[Output, typer.Option("-o", "--output", help="table, wide, json or yaml.")]
"""`-o/--output` of the listing commands (`jobs`, `nodes`, `tenants`)."""
NoHeadersOption = Annotated[bool, typer.Option("--no-headers", help="Leave out the header line.")]


def humanize_ms(ms: int | float | None) -> str:
    """kubectl-like age: `45s`, `3m`, `2h`, `5d` (`<unknown>` when not known)."""
    if ms is None:
        return "<unknown>"
    s = max(0, int(ms // 1000))
    if s < 120:
        return f"{s}s"
    if s < 3600 * 2:
        return f"{s // 60}m"
    if s < 86400 * 2:
        return f"{s // 3600}h"
    return f"{s // 86400}d"


def render_table(
    headers: list[str], rows: list[list[Any]], *, no_headers: bool = False, upper: bool = True
) -> str:
    """Aligned columns with upper-case headers, like kubectl: the layout of a rich table with
    no box, three spaces between columns, cells as plain text (never markup) and never
    wrapped, whatever the terminal's width; trailing spaces removed. Cell widths are rich's
    (`cell_len`: wide characters count twice). Laid out here rather than by rich's Table,
    which takes about a millisecond per row: `render_table_rich` is the specification, and a
    test holds the two equal."""
    from rich.cells import cell_len

    head = [h.upper() for h in headers] if upper else list(headers)
    lines = [] if no_headers else [head]
    lines += [["<none>" if v is None else str(v) for v in r] for r in rows]
    if not lines:
        return ""
    if any(not v.isprintable() for r in lines for v in r):
        return render_table_rich(headers, rows, no_headers=no_headers, upper=upper)  # \n, \t
    widths = [0] * len(head)
    for r in lines:
        widths = [max(w, cell_len(v)) for w, v in zip(widths, r, strict=True)]
    out = []
    for r in lines:
        cells = [v + " " * (w - cell_len(v)) for v, w in zip(r, widths, strict=True)]
        out.append("   ".join(cells).rstrip())
    return "\n".join(out)


def render_table_rich(
    headers: list[str], rows: list[list[Any]], *, no_headers: bool = False, upper: bool = True
) -> str:
    """`render_table` as rich lays it out (the specification of its layout; slower)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    head = [h.upper() for h in headers] if upper else list(headers)
    table = Table(
        box=None,
        show_header=not no_headers,
        header_style="",
        pad_edge=False,
        padding=(0, 3, 0, 0),
        show_edge=False,
    )
    for h in head:
        table.add_column(Text(h), no_wrap=True, overflow="ignore")
    for r in rows:
        table.add_row(*(Text("<none>" if v is None else str(v)) for v in r))
    console = Console(
        width=1_000_000, color_system=None, force_terminal=False, highlight=False, soft_wrap=True
    )
    with console.capture() as captured:
        console.print(table)
    return "\n".join(line.rstrip() for line in captured.get().splitlines())


def _json_default(o: Any) -> Any:
    return str(o)


def _emit_structured(data: Any, fmt: str) -> None:
    if fmt == "yaml":
        import yaml

        typer.echo(
            yaml.safe_dump(
                json.loads(json.dumps(data, default=_json_default)), sort_keys=False
            ).rstrip()
        )
    else:
        typer.echo(json.dumps(data, indent=2, default=_json_default))


def _structured_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "now_ms"} for r in rows]


def _print_rows(rows, table_fn, output: Output, no_headers: bool) -> None:
    if output in (Output.json, Output.yaml):
        _emit_structured(_structured_rows(rows), output.value)
        return
    headers, lines = table_fn(rows, output == Output.wide)
    if lines or not no_headers:
        typer.echo(render_table(headers, lines, no_headers=no_headers))
