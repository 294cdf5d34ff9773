"""The projection's catalog: audit views, `COMMENT ON` every table and column, a `<table>_ts`
view per table with a TIMESTAMP beside each `_ms` time, and the Markdown list of every column
that docs/projections.md carries (`gpuledger schema --projection`)."""

from __future__ import annotations

import hashlib
import re
from importlib import resources
from pathlib import Path

DURATION_MS = {"progress_ms", "lost_gpu_ms"}
"""`_ms` columns that are quantities (a duration, GPU-milliseconds), not points in time."""

BEGIN = "<!-- BEGIN projection columns (generated: gpuledger schema --projection --update FILE) -->"
END = "<!-- END projection columns -->"


COMMON_COLUMNS = {
    "tenant": "Tenant path.",
    "job_id": "The job.",
    "allocation_id": "Placement id: <job>#<attempt>.",
    "rank": "Gang member rank (0-based).",
    "node": "Node name ('*' = all, where the view has a total row).",
    "clique": "NVLink clique ('*' = all, where the view has a total row).",
    "gpu_index": "GPU index on the node.",
    "uuid": "GPU UUID.",
    "gpu_uuid": "GPU UUID.",
    "model": "GPU model.",
    "memory_mib": "GPU memory, MiB.",
    "sharing": "exclusive, mig, mps, timeslice (GPU) or milli, mig, none (allocation).",
    "gpu_milli": "Capacity of the GPU held, milli-GPUs.",
    "borrowing": "The placement took the tenant above its guarantee.",
    "priority_class": "Priority class.",
    "reason": "CamelCase reason code.",
    "message": "Quantitative message.",
}
"""Meanings of columns that views repeat under the same name (applied to any view column
without a comment of its own)."""


def common_comments_sql(con) -> str:
    rows = con.execute(
        "SELECT c.table_name, c.column_name FROM duckdb_columns() c JOIN duckdb_views() v"
        " ON v.view_name = c.table_name AND v.schema_name = c.schema_name"
        " WHERE NOT v.internal AND c.schema_name = 'main' AND c.comment IS NULL"
    ).fetchall()
    return "\n".join(
        f"COMMENT ON COLUMN {t}.{c} IS {_q(COMMON_COLUMNS[c])};"
        for t, c in rows
        if c in COMMON_COLUMNS
    )


def _sql(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text()


def audit_sql() -> str:
    """The audit views and every comment, then the report's (`report.sql`: `gpuledger report`)."""
    return _sql("audit.sql") + "\n" + _sql("report.sql")


def is_time_column(name: str) -> bool:
    """An epoch-ms point in time (not a duration)."""
    return name.endswith("_ms") and name not in DURATION_MS


def digest(*texts: str) -> str:
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode())
        h.update(b"\0")
    return h.hexdigest()


def _q(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def base_tables(con) -> list[str]:
    return [
        t
        for (t,) in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE NOT internal AND schema_name = 'main'"
            " ORDER BY table_name"
        ).fetchall()
    ]


def columns(con, relation: str) -> list[tuple[str, str, str | None]]:
    """(name, type, comment) of a table's or view's columns, in order."""
    return con.execute(
        "SELECT column_name, data_type, comment FROM duckdb_columns()"
        " WHERE table_name = ? AND schema_name = 'main' ORDER BY column_index",
        [relation],
    ).fetchall()


def timestamp_views_sql(con) -> str:
    """`CREATE VIEW <t>_ts`: every column of <t>, and after each `_ms` time a TIMESTAMP
    column named without the suffix (`submitted_at_ms` -> `submitted_at`), with comments."""
    out: list[str] = []
    for t in base_tables(con):
        cols = columns(con, t)
        if not any(is_time_column(c) for c, _, _ in cols):
            continue
        select, comments = [], []
        for name, _typ, comment in cols:
            select.append(name)
            comments.append((name, comment or ""))
            if is_time_column(name):
                ts = name[: -len("_ms")]
                select.append(f"epoch_ms({name}) AS {ts}")
                comments.append(
                    (
                        ts,
                        re.sub(r",? ?epoch ms\b.*?(?=\.|$| \()", "", comment or "").rstrip(". ")
                        + f" (TIMESTAMP, UTC; {name} as a timestamp).",
                    )
                )
        view = f"{t}_ts"
        out.append(f"CREATE OR REPLACE VIEW {view} AS SELECT {', '.join(select)} FROM {t};")
        out.append(
            f"COMMENT ON VIEW {view} IS "
            + _q(f"{t} with a TIMESTAMP (UTC) column beside each epoch-ms time.")
            + ";"
        )
        out += [f"COMMENT ON COLUMN {view}.{c} IS {_q(text)};" for c, text in comments]
    return "\n".join(out)


def apply(con, base_sql: str) -> None:
    """Create the audit views, comments and `_ts` views unless the catalog already holds the
    ones of exactly this SQL (`base_sql` = schema and views text, part of the digest)."""
    want = digest(base_sql, audit_sql())
    con.execute(
        "CREATE TABLE IF NOT EXISTS projection_catalog (id INTEGER NOT NULL, digest VARCHAR)"
    )
    row = con.execute("SELECT digest FROM projection_catalog WHERE id = 1").fetchone()
    if row is not None and row[0] == want:
        return
    con.execute(audit_sql())
    common = common_comments_sql(con)
    if common:
        con.execute(common)
    con.execute(timestamp_views_sql(con))
    con.execute("DELETE FROM projection_catalog")
    con.execute("INSERT INTO projection_catalog VALUES (1, ?)", [want])


def is_current(con, base_sql: str) -> bool:
    # (looked up rather than caught: a failed statement would abort an open transaction)
    if not con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'projection_catalog'"
        " AND schema_name = 'main'"
    ).fetchone()[0]:
        return False
    row = con.execute("SELECT digest FROM projection_catalog WHERE id = 1").fetchone()
    return row is not None and row[0] == digest(base_sql, audit_sql())


def _cell(text: str | None) -> str:
    return (text or "").replace("|", "\\|").replace("\n", " ")


def markdown(con) -> str:
    """Every table and view with its comment, and each column's type and comment."""
    lines = [BEGIN, "", "#### Tables", ""]
    tables = con.execute(
        "SELECT table_name, comment FROM duckdb_tables() WHERE NOT internal AND schema_name = 'main'"
        " ORDER BY table_name"
    ).fetchall()
    views = con.execute(
        "SELECT view_name, comment FROM duckdb_views() WHERE NOT internal AND schema_name = 'main'"
        " ORDER BY view_name"
    ).fetchall()
    for title, rels in (("Tables", tables), ("Views", views)):
        if title == "Views":
            lines += [
                "#### Views",
                "",
                "`<table>_ts` views repeat a table with a TIMESTAMP column after each "
                "`_ms` time (`jobs_ts.submitted_at` beside `submitted_at_ms`); they are "
                "listed once here, not column by column.",
                "",
            ]
        for name, comment in rels:
            if title == "Views" and name.endswith("_ts") and name[:-3] in {t for t, _ in tables}:
                continue
            lines += [
                f"**`{name}`** — {_cell(comment)}",
                "",
                "| column | type | meaning |",
                "|---|---|---|",
            ]
            lines += [f"| `{c}` | {typ} | {_cell(cm)} |" for c, typ, cm in columns(con, name)]
            lines.append("")
    ts = sorted(n for n, _ in views if n.endswith("_ts"))
    lines += ["Timestamp views: " + ", ".join(f"`{n}`" for n in ts) + ".", "", END]
    return "\n".join(lines)


def catalog_markdown() -> str:
    """The Markdown of a fresh, empty projection (the schema as the projector creates it)."""
    import duckdb

    con = duckdb.connect(":memory:")
    try:
        base = _sql("schema.sql") + _sql("views.sql")
        con.execute(_sql("schema.sql"))
        con.execute(_sql("views.sql"))
        apply(con, base)
        return markdown(con)
    finally:
        con.close()


def update_doc(path: str | Path) -> bool:
    """Replace the generated section of `path` (between BEGIN and END); True if it changed."""
    p = Path(path)
    text = p.read_text()
    if BEGIN not in text or END not in text:
        raise ValueError(f"{p}: no generated section (lines {BEGIN!r} ... {END!r})")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    new = head + catalog_markdown() + tail
    if new != text:
        p.write_text(new)
        return True
    return False
