"""The reference pages are what the code says: ``docs/reference/*.md`` equal what
``scripts/gen_reference.py`` writes from click, the settings model, the OpenAPI document and
the registry. A new command, option, setting, route, family or tick fails here until
``make reference`` is run and its pages are committed."""

from __future__ import annotations

import difflib

from scripts import gen_reference


def test_the_committed_reference_pages_are_the_generated_ones() -> None:
    generated = gen_reference.pages()
    stale = gen_reference.stale_pages(generated)
    diffs = []
    for name in stale:
        path = gen_reference.PAGES_DIR / name
        committed = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
        diff = difflib.unified_diff(
            committed, generated[name].splitlines(), f"committed {name}", f"generated {name}", n=1
        )
        diffs.append("\n".join(list(diff)[:40]))
    assert not stale, "run `make reference` and commit docs/reference/:\n" + "\n".join(diffs)


def test_every_setting_has_a_description() -> None:
    from shared.config import Settings

    assert [name for name, field in Settings.model_fields.items() if not field.description] == []


def test_a_page_differing_from_the_code_is_reported(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "cli.md").write_text("# CLI reference\n\nold text\n", encoding="utf-8")
    assert gen_reference.stale_pages({"cli.md": "# CLI reference\n", "x.md": "x"}, tmp_path) == [
        "cli.md",
        "x.md",
    ]
