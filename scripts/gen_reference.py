"""Write the files generated from the code: ``make reference``.

| page | source |
| --- | --- |
| ``docs/reference/cli.md`` | every ``speedtier`` command and option, from click |
| ``docs/reference/settings.md`` | every ``shared.config.Settings`` field and its ``description`` |
| ``docs/reference/http-api.md`` | every operation of the OpenAPI document the API serves |
| ``docs/reference/families.md`` | the registry: families, queues, caps, retries; the ticks |
| ``helm/speedtier/values.yaml`` | each tier's ``queues`` (its worker's, KEDA's triggers) |

``python -m scripts.gen_reference`` writes them; ``--check`` writes nothing and exits 1 naming
the files that differ (``tests/integration/docs/test_reference_pages.py`` runs the same
comparison, so a new setting, command, route or family fails CI until they are regenerated).
Nothing here connects to Redis or PostgreSQL: the platform is assembled against addresses
nobody listens on, and the output depends on the code only, never on the environment.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

from scripts.reference_cells import GENERATED
from scripts.reference_cells import cell as _cell
from scripts.reference_settings import settings_page

ROOT = Path(__file__).resolve().parent.parent
PAGES_DIR = ROOT / "docs" / "reference"
# --- CLI ---------------------------------------------------------------------------------


def _walk(
    command: click.Command, path: list[str], parent: click.Context | None
) -> Iterator[tuple[list[str], click.Command, click.Context]]:
    ctx = click.Context(command, info_name=path[-1], parent=parent)
    yield path, command, ctx
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from _walk(sub, [*path, name], ctx)


def _param_row(param: click.Parameter, ctx: click.Context) -> str:
    if isinstance(param, click.Option):
        names = ", ".join(f"`{opt}`" for opt in [*param.opts, *param.secondary_opts])
        kind = "flag" if param.is_flag else param.type.name.lower()
        default = param.default
        unset = type(default).__name__ == "Sentinel"  # click's UNSET: no default
        shown = "" if unset or default in (None, False, ()) or callable(default) else default
        helptext = param.help or ""
        if param.required:
            helptext = f"required. {helptext}"
        return f"| {names} | {_cell(kind)} | {_cell(shown)} | {_cell(helptext)} |"
    assert isinstance(param, click.Argument)
    metavar = param.make_metavar(ctx) if _metavar_takes_ctx() else param.make_metavar()  # type: ignore[call-arg]
    required = "required" if param.required else "optional"
    return f"| `{_cell(metavar)}` | argument | | {required} |"


def _metavar_takes_ctx() -> bool:
    import inspect

    return "ctx" in inspect.signature(click.Argument.make_metavar).parameters


def cli_page() -> str:
    from services.app.cli import main

    out = [
        "# CLI reference\n\n",
        GENERATED,
        "Every command of `speedtier`, with its options. `speedtier COMMAND --help` prints the "
        "same. Exit status: 0 success, 1 a failure the command names in one `Error:` line, "
        "2 a usage error.\n",
    ]
    for path, command, ctx in _walk(main, ["speedtier"], None):
        title = " ".join(path)
        out.append(f"\n## `{title}`\n\n")
        usage = " ".join(command.collect_usage_pieces(ctx))
        out.append(f"```\n{title} {usage}\n```\n\n")
        helptext = (command.help or "").strip()
        if helptext:
            out.append(click.unstyle(_dedent(helptext)) + "\n")
        params = [p for p in command.get_params(ctx) if "--help" not in p.opts]
        if params:
            out.append("\n| option | type | default | meaning |\n| --- | --- | --- | --- |\n")
            out.extend(_param_row(p, ctx) + "\n" for p in params)
        if isinstance(command, click.Group):
            subs = command.list_commands(ctx)
            out.append("\nCommands: " + ", ".join(f"`{s}`" for s in subs) + ".\n")
    return "".join(out)


def _dedent(text: str) -> str:
    import inspect

    return inspect.cleandoc(text).replace("\b\n", "")


# --- the platform: families, ticks, the HTTP API -----------------------------------------


def _platform() -> Any:
    """The production platform, assembled against addresses nobody listens on (nothing
    connects while it is built; the Redis persistence check's warning is silenced)."""
    from services.app.bootstrap import bootstrap
    from shared.config import load_settings

    logging.disable(logging.WARNING)
    try:
        settings = load_settings(
            environment="test",
            log_level="ERROR",
            redis_url="redis://127.0.0.1:9/0",
            database_url="postgresql://reference@127.0.0.1:9/reference",
            data_dir=tempfile.mkdtemp(prefix="speedtier-reference-"),
            redis_namespace="speedtier",
            windows={},
            flag_overrides={},
        )
        return bootstrap(settings, component="reference")
    finally:
        logging.disable(logging.NOTSET)


def _retry(policy: Any) -> str:
    if policy.backoff == "polynomial":
        backoff = "n^4 x 1000 + 2000 ms"
    else:
        backoff = f"{policy.base_seconds:g} s x 2^n"
    return f"{policy.max_attempts} attempts, {backoff}"


def families_page(platform: Any) -> str:
    from tiers.table import TIERS

    out = [
        "# Families, queues and ticks\n\n",
        GENERATED,
        "The registry of the assembled platform: every family (one kind of job), the queues "
        "it may use (`<family>.<tier>`), its per-group concurrency caps, retry policy, "
        "provider windows and kill switch. See [the concepts](../concepts/index.md) for what "
        "each column means.\n\n",
        "## Families\n\n",
        "| family | request kind | queues | group caps | retries | windows | kill switch |\n",
        "| --- | --- | --- | --- | --- | --- | --- |\n",
    ]
    for family in sorted(platform.registry, key=lambda f: f.name):
        caps = ", ".join(
            f"{tier}: {cap} per {'tier' if family.group_by == 'global' else 'organization'}"
            for tier, cap in sorted((family.group_caps or {}).items())
        )
        windows = ", ".join(
            f"{provider}: {rule.limit}/{rule.period_seconds:g} s"
            for provider, rule in sorted(family.windows.items())
        )
        queues = ", ".join(f"`{q}`" for q in family.queues())
        out.append(
            f"| `{family.name}` | `{family.kind}` | {queues} | {_cell(caps)} "
            f"| {_cell(_retry(family.retry))} | {_cell(windows)} "
            f"| {f'`{family.pause_flag}`' if family.pause_flag else ''} |\n"
        )
    out.append(
        "\n## Queues by tier\n\nWhat `speedtier queues --tier T` prints and the chart's "
        "`tiers.<tier>.queues` lists.\n\n| tier | queues |\n| --- | --- |\n"
    )
    for tier in TIERS:
        queues = ", ".join(f"`{q}`" for q in platform.registry.queues_of_tier(tier))
        out.append(f"| {tier} | {queues} |\n")
    out.append(
        "\n## Ticks\n\nCron in UTC. Each firing enqueues the tick's job with a slot id "
        "(`<name>-tick-<YYYY-MM-DDTHH:MMZ>`) on the maintenance tier.\n\n"
        "| tick | cron (UTC) | kill switch | what it does |\n| --- | --- | --- | --- |\n"
    )
    for tick in sorted(platform.ticks, key=lambda t: t.name):
        flag = f"`{tick.pause_flag}`" if tick.pause_flag else ""
        out.append(f"| `{tick.name}` | `{tick.cron}` | {flag} | {_cell(tick.description)} |\n")
    return "".join(out)


def _schema_name(schema: dict[str, Any] | None) -> str:
    if not schema:
        return ""
    ref = schema.get("$ref")
    if isinstance(ref, str):
        return f"`{ref.rsplit('/', 1)[-1]}`"
    if "oneOf" in schema or "anyOf" in schema:
        options = schema.get("oneOf") or schema.get("anyOf") or []
        return " or ".join(_schema_name(option) for option in options)
    return f"`{schema.get('type', 'object')}`"


def http_page(platform: Any) -> str:
    from services.app.api import create_app
    from services.app.api.openapi_document import build_document

    document = build_document(create_app(platform, warn_open=False))
    document["info"]["version"] = "(the package version)"
    out = [
        "# HTTP API reference\n\n",
        GENERATED,
        "From the OpenAPI 3.1 document the API serves at `GET /internal/openapi.json`. ",
        _cell(document["info"].get("description", "")),
        "\n",
    ]
    for path, operations in sorted(document["paths"].items()):
        for method, operation in operations.items():
            out.append(f"\n## `{method.upper()} {path}`\n\n")
            summary = operation.get("summary") or ""
            description = operation.get("description") or ""
            out.append(f"{summary}\n\n" if summary else "")
            out.append(f"{description}\n\n" if description else "")
            security = operation.get("security")
            if security:
                schemes = sorted({name for entry in security for name in entry})
                out.append("Authentication: " + ", ".join(f"`{s}`" for s in schemes) + ".\n\n")
            body = operation.get("requestBody", {}).get("content", {})
            for media, content in body.items():
                out.append(f"Body: `{media}` {_schema_name(content.get('schema'))}\n\n")
            params = operation.get("parameters") or []
            if params:
                out.append("| parameter | in | required | meaning |\n| --- | --- | --- | --- |\n")
                for param in params:
                    out.append(
                        f"| `{param['name']}` | {param['in']} | "
                        f"{'yes' if param.get('required') else 'no'} | "
                        f"{_cell(param.get('description', ''))} |\n"
                    )
                out.append("\n")
            out.append("| status | meaning |\n| --- | --- |\n")
            for status, response in sorted(operation.get("responses", {}).items()):
                out.append(f"| {status} | {_cell(response.get('description', ''))} |\n")
    out.append(
        "\n## Schemas\n\n"
        + ", ".join(f"`{name}`" for name in sorted(document["components"]["schemas"]))
        + ": see `GET /internal/openapi.json` for their fields.\n"
    )
    return "".join(out)


# --- writing and checking ----------------------------------------------------------------


# --- the chart's queue lists --------------------------------------------------------------

VALUES = Path("helm") / "speedtier" / "values.yaml"


def chart_values(text: str, queues: dict[str, list[str]]) -> str:
    """``values.yaml`` with each tier's ``queues`` list (under ``tiers:``) replaced by the
    registry's, everything else as it is: the list each tier's worker consumes and its KEDA
    ScaledObject watches."""
    lines = text.split("\n")
    out: list[str] = []
    in_tiers, tier, index = False, None, 0
    while index < len(lines):
        line = lines[index]
        if line and not line.startswith((" ", "#")):
            in_tiers, tier = line.rstrip() == "tiers:", None
        elif in_tiers and line.startswith("  ") and not line.startswith("   "):
            name = line.strip().rstrip(":")
            tier = name if line.rstrip().endswith(":") else None
        if in_tiers and tier in queues and line.rstrip() == "    queues:":
            out.append(line)
            index += 1
            while index < len(lines) and lines[index].startswith("      - "):
                index += 1
            out.extend(f"      - {queue}" for queue in queues[tier])
            continue
        out.append(line)
        index += 1
    return "\n".join(out)


def values_file(platform: Any) -> str:
    from tiers.table import TIERS

    queues = {tier: platform.registry.queues_of_tier(tier) for tier in TIERS}
    return chart_values((ROOT / VALUES).read_text(encoding="utf-8"), queues)


# --- writing and checking ----------------------------------------------------------------


def outputs() -> dict[str, str]:
    """Every generated file (its path from the repository's root) -> its content."""
    platform = _platform()
    builders: dict[str, Callable[[], str]] = {
        "docs/reference/cli.md": cli_page,
        "docs/reference/settings.md": settings_page,
        "docs/reference/families.md": lambda: families_page(platform),
        "docs/reference/http-api.md": lambda: http_page(platform),
        str(VALUES): lambda: values_file(platform),
    }
    return {name: build() for name, build in builders.items()}


def stale_files(generated: dict[str, str], root: Path = ROOT) -> list[str]:
    """The files whose committed text differs from ``generated`` (or that are missing)."""
    stale = []
    for name, text in generated.items():
        path = root / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            stale.append(name)
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    generated = outputs()
    if args.check:
        stale = stale_files(generated)
        for name in stale:
            print(f"{name} is stale: run `make reference`", file=sys.stderr)
        return 1 if stale else 0
    for name, text in generated.items():
        path = ROOT / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
