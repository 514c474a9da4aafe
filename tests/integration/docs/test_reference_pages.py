"""The generated files are what the code says: ``docs/reference/*.md`` and the chart's queue
lists equal what ``scripts/gen_reference.py`` writes from click, the settings model, the
OpenAPI document and the registry. A new command, option, setting, route, family or tick
fails here until ``make reference`` is run and what it wrote is committed."""

from __future__ import annotations

import difflib

from scripts import gen_reference


def test_the_committed_generated_files_are_what_the_code_says() -> None:
    generated = gen_reference.outputs()
    stale = gen_reference.stale_files(generated)
    diffs = []
    for name in stale:
        path = gen_reference.ROOT / name
        committed = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
        diff = difflib.unified_diff(
            committed, generated[name].splitlines(), f"committed {name}", f"generated {name}", n=1
        )
        diffs.append("\n".join(list(diff)[:40]))
    assert not stale, "run `make reference` and commit what it wrote:\n" + "\n".join(diffs)


def test_every_setting_has_a_description() -> None:
    from shared.config import Settings

    assert [name for name, field in Settings.model_fields.items() if not field.description] == []


def test_a_file_differing_from_the_code_is_reported(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "cli.md").write_text("# CLI reference\n\nold text\n", encoding="utf-8")
    assert gen_reference.stale_files({"cli.md": "# CLI reference\n", "x.md": "x"}, tmp_path) == [
        "cli.md",
        "x.md",
    ]


def test_the_chart_values_get_each_tiers_queues_and_keep_the_rest() -> None:
    text = (
        "workerDefaults:\n  queues: []\n"
        "tiers:\n  fast:\n    replicas: 2\n    queues:\n      - old.fast\n"
        "    resources: {}\n  slow:\n    queues:\n      - a.slow\n      - b.slow\n"
        "# a comment\nafter: 1\n"
    )
    written = gen_reference.chart_values(text, {"fast": ["x.fast", "y.fast"], "slow": []})
    assert written == (
        "workerDefaults:\n  queues: []\n"
        "tiers:\n  fast:\n    replicas: 2\n    queues:\n      - x.fast\n      - y.fast\n"
        "    resources: {}\n  slow:\n    queues:\n"
        "# a comment\nafter: 1\n"
    )
