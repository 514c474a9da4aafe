"""The settings reference page (``docs/reference/settings.md``), from the settings model's
fields and their ``description``: the platform's and the services' settings in a table each.
Written by ``scripts.gen_reference``."""

from __future__ import annotations

import json
from typing import Any

from scripts.reference_cells import GENERATED
from scripts.reference_cells import cell as _cell


def _type_name(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    text = text or str(annotation)
    return (
        text.replace("typing.", "")
        .replace("pydantic.types.", "")
        .replace("NoneType", "None")
        .replace("Literal", "one of ")
    )


def _limits(field: Any) -> str:
    parts = []
    symbols = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<", "min_length": "length >="}
    for item in field.metadata:
        for attr, symbol in symbols.items():
            value = getattr(item, attr, None)
            if value is not None:
                parts.append(f"{symbol} {value}")
        pattern = getattr(item, "pattern", None)
        if pattern:
            parts.append(f"matches `{pattern}`")
    return ", ".join(parts)


def settings_page() -> str:
    from pydantic_core import PydanticUndefined

    from shared.config import Settings, environment_variables
    from shared.config_services import ServiceSettings

    variables = environment_variables()
    out = [
        "# Settings reference\n\n",
        GENERATED,
        "Every setting is an environment variable read once into `shared.config.Settings`: "
        "field `x_y` is `SPEEDTIER_X_Y`, except the conventional names (`REDIS_URL`, "
        "`DATABASE_URL`, `INTERNAL_API_TOKEN`, `SENTRY_DSN`, `LOG_LEVEL`, Rails', PostHog's "
        "and Slack's) and the short `SPEEDTIER_ENV` and `SPEEDTIER_FLAGS`. Dictionaries are "
        "JSON. A value a process cannot use stops it at start with one line naming the "
        "variable ([start-up errors](../operations/configuration.md)).\n\n",
    ]
    services = set(ServiceSettings.model_fields)
    platform = [name for name in Settings.model_fields if name not in services]
    for title, names in (
        ("The platform (`shared.config`)", platform),
        (
            "The services (`shared.config_services`)",
            [n for n in Settings.model_fields if n in services],
        ),
    ):
        out.append(f"## {title}\n\n")
        out.append(
            "| variable | type | default | limits | meaning |\n| --- | --- | --- | --- | --- |\n"
        )
        for name in names:
            field = Settings.model_fields[name]
            if field.default_factory is not None:
                default = json.dumps(field.default_factory())  # type: ignore[call-arg]
            elif field.default is PydanticUndefined or field.default is None:
                default = "unset"
            elif isinstance(field.default, str):
                default = json.dumps(field.default)
            else:
                default = field.default
            out.append(
                f"| `{variables[name]}` | {_cell(_type_name(field.annotation))} | `{default}` "
                f"| {_cell(_limits(field))} | {_cell(field.description or '')} |\n"
            )
        out.append("\n")
    out.append(
        "`PYDANTIC_DISABLE_PLUGINS` (pydantic's, not a setting): `speedtier` sets it to "
        "`__all__` when it is unset, because pydantic otherwise reads every installed "
        "package's metadata for [plugins](https://docs.pydantic.dev/latest/concepts/plugins/) "
        "when a process builds its first model, about 10 ms of each start, and the platform "
        "uses none. Set it yourself to keep pydantic's own rule: empty looks for every "
        "plugin, a comma-separated list of plugin names leaves those out.\n\n"
    )
    out.append(
        "`PROMETHEUS_MULTIPROC_DIR` (prometheus_client's, not a setting): where every process "
        "writes its metric values so that the API, a worker pool and the scheduler report the "
        "sum over their processes. The chart sets it to `/tmp/prometheus-metrics`; unset, "
        "`speedtier worker` and `speedtier api` use a fresh temporary directory and "
        "`speedtier up` shares `<data dir>/metrics` between its processes.\n"
    )
    return "".join(out)
