"""`render_table` lays tables out exactly as rich's Table does (`render_table_rich`, the
specification), only faster: any headers and cells, wide characters, missing values, with or
without the header line."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuledger.services.cli.output import render_table, render_table_rich

CELL = st.text(
    alphabet=st.sampled_from(["a", "Z", "1", " ", "-", "é", "日", "本", "😀", "\n", "\t"]),
    max_size=6,
)


@st.composite
def tables(draw):
    cols = draw(st.integers(1, 5))
    headers = draw(st.lists(CELL, min_size=cols, max_size=cols))
    rows = draw(
        st.lists(
            st.lists(
                st.one_of(st.none(), st.integers(-5, 500), CELL), min_size=cols, max_size=cols
            ),
            max_size=6,
        )
    )
    return headers, rows


@settings(max_examples=300)
@given(tables(), st.booleans(), st.booleans())
def test_render_table_is_richs_layout(table, no_headers, upper):
    headers, rows = table
    assert render_table(headers, rows, no_headers=no_headers, upper=upper) == render_table_rich(
        headers, rows, no_headers=no_headers, upper=upper
    )


def test_a_table_of_jobs():
    out = render_table(["name", "state"], [["job-1", "running"], ["日本", None]])
    assert out.splitlines() == ["NAME    STATE", "job-1   running", "日本    <none>"]
