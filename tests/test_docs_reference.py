"""The generated reference pages of the documentation site are current: docs/configuration.md
(from the input files' schema) and docs/cli.md (from the typer commands). A stale page fails
with the command that regenerates it."""

from __future__ import annotations

import pytest

from gpuledger.services.cli import docsref

REGENERATE = "python -m gpuledger.services.cli.docsref --update"


@pytest.mark.parametrize("page", sorted(docsref.PAGES))
def test_generated_page_is_current(page: str) -> None:
    committed = (docsref.DOCS / page).read_text()
    assert committed == docsref.PAGES[page](), f"docs/{page} is stale: run {REGENERATE}"


def test_configuration_reference_names_every_key_of_every_input_shape() -> None:
    from gpuledger.services.domain.inputs import schema as inputs

    text = docsref.configuration_md()
    for shape in (inputs.FileDoc, inputs.NodeDoc, inputs.TenantDoc, inputs.JobDoc):
        for field in shape.__struct_fields__:
            key = "class" if field == "klass" else field
            assert f"| `{key}` |" in text, f"{shape.__name__}.{key} missing"
    assert (
        "| `min_runtime_s` | integer ≥ 0, ≤ 1099511627776 | `300` |" in text
    )  # policy keys, with defaults


def test_cli_reference_lists_every_command_and_option() -> None:
    text = docsref.cli_md()
    for heading in ("## `gpuledger simulate`", "## `gpuledger submit`", "## `gpuledger why`"):
        assert heading in text
    assert "| `--quiet`, `-q` | flag | No timeline on stdout. |" in text


def test_check_mode_names_a_stale_page(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(docsref, "DOCS", tmp_path)
    (tmp_path / "configuration.md").write_text("old\n")
    (tmp_path / "cli.md").write_text(docsref.cli_md())
    assert docsref.main(["--check"]) == 1
    assert "docs/configuration.md is stale" in capsys.readouterr().out
