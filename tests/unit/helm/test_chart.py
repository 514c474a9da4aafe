"""Lint, render and validate the Helm chart in ``helm/speedtier`` offline.

How Helm runs here: PyPI ``helm-python-sdk`` ships no ``helm`` executable and downloads nothing.
Its wheel bundles ``libhelm_c`` (Helm's Go SDK, v4, behind a C ABI) and binds it with ctypes, so
``helm_python.lint`` is ``helm lint`` and ``Chart.render`` is ``helm template``, in process and
without network. If that library cannot be loaded, the import below raises and this module
errors at collection: CI fails loudly instead of skipping.

Every rendered manifest of a built-in kind is validated with ``kubernetes-validate`` in strict
mode (unknown fields are errors). KEDA's ScaledObject is a CustomResourceDefinition that
kubernetes-validate has no schema for; it is the only kind exempted, and its structure is
asserted by hand below.
"""

from __future__ import annotations

import base64
import copy
import functools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from shared.config import TIER_NAMES, environment_variables, load_settings
from tests import REPO

CHART = REPO / "helm" / "speedtier"
KUBE_VERSION = "1.30.0"
RELEASE = "st"
NAMESPACE = "speedtier"
FULLNAME = f"{RELEASE}-speedtier"
CONFIGMAP = FULLNAME
HOOK_NAME = f"{FULLNAME}-migrations"

# Custom resources: no schema in kubernetes-validate (see the module docstring).
CRD_KINDS = frozenset({("keda.sh/v1alpha1", "ScaledObject")})

KEDA_ON = {"keda": {"enabled": True, "redis": {"address": "redis-master:6379"}}}
SECRETS = {
    "secrets": {
        "redisUrl": "redis://:pw@redis-master:6379/0",
        "databaseUrl": "postgresql+psycopg://speedtier:pw@postgres:5432/speedtier",
        "internalApiToken": "chart-test-token-Vq8Lr3Nx6Tw1Kz4Hb9Md2Pj7",
        "connectorCredentialsKey": "gX3J0PZkFvAQ6oKkzSTPmOKx5Nft6xqCUVFL5nEXDVI=",
        "sentryDsn": "",
    }
}

# Three tiers, one of them custom: maintenance off, `medium` added, fast resized.
THREE_TIERS = {
    "tiers": {
        "maintenance": {"enabled": False},
        "medium": {"replicas": 3, "processes": 2, "threads": 6, "queues": ["reports.medium"]},
        "fast": {"replicas": 4, "processes": 3, "threads": 16},
    }
}
# The defaults plus a fourth tier that sets nothing but its queues (workerDefaults fill in).
FOUR_TIERS = {"tiers": {"medium": {"queues": ["reports.medium", "exports.medium"]}}}
# The slow and maintenance tiers on Redis servers of their own (docs/deploy/scaling.md).
SLOW_REDIS = "redis://:pw@redis-slow:6379/0"
MAINTENANCE_REDIS = "redis://redis-maintenance:6379/2"
TIER_REDIS = {
    "tiers": {"slow": {"redisUrl": SLOW_REDIS}, "maintenance": {"redisUrl": MAINTENANCE_REDIS}}
}


def _merge(*layers: dict[str, Any]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for layer in layers:
        _deep_update(merged, copy.deepcopy(layer))
    return merged


def _deep_update(target: dict[str, Any], update: dict[str, Any]) -> None:
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _deep_update(target[key], value)
        else:
            target[key] = value


SCENARIOS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "three-tiers": THREE_TIERS,
    "four-tiers": FOUR_TIERS,
    "keda": _merge(
        KEDA_ON,
        FOUR_TIERS,
        {
            "tiers": {
                "maintenance": {"keda": {"enabled": False}},
                "slow": {"keda": {"minReplicaCount": 0, "maxReplicaCount": 3, "listLength": 5}},
            },
            "keda": {"redis": {"passwordFromEnv": "REDIS_PASSWORD"}, "authenticationRef": "redis"},
        },
    ),
    "secrets-from-values": _merge(SECRETS, {"workerDrainSeconds": 120}),
    "tier-redis": _merge(SECRETS, TIER_REDIS),
    "existing-secret": {"secrets": {"existingSecret": "speedtier-prod"}},
    "pdb-min-available": {
        "podDisruptionBudget": {"maxUnavailable": None, "minAvailable": 1},
        "tiers": {"slow": {"pdb": {"maxUnavailable": "50%"}}, "maintenance": {"pdb": {}}},
        "api": {"pdb": {"enabled": False}},
        "scheduler": {"replicas": 2, "pdb": {"enabled": True}},
    },
}

# scenario -> {tier: (replicas or None when KEDA owns them, processes, threads)}
EXPECTED_TIERS: dict[str, dict[str, tuple[int | None, int, int]]] = {
    "defaults": {"fast": (2, 2, 8), "slow": (1, 1, 4), "maintenance": (1, 1, 2)},
    "three-tiers": {"fast": (4, 3, 16), "slow": (1, 1, 4), "medium": (3, 2, 6)},
    "four-tiers": {
        "fast": (2, 2, 8),
        "slow": (1, 1, 4),
        "maintenance": (1, 1, 2),
        "medium": (1, 1, 4),
    },
    "keda": {
        "fast": (None, 2, 8),
        "slow": (None, 1, 4),
        "maintenance": (1, 1, 2),
        "medium": (None, 1, 4),
    },
}
for _name in ("secrets-from-values", "tier-redis", "existing-secret", "pdb-min-available"):
    EXPECTED_TIERS[_name] = EXPECTED_TIERS["defaults"]

Manifest = dict[str, Any]


# --- rendering ---------------------------------------------------------------------------


def render(values: dict[str, Any]) -> list[Manifest]:
    """``helm template`` equivalent: every manifest the chart renders, hooks included."""
    with helm.Chart.load(CHART) as chart:
        rendered = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    manifests: list[Manifest] = []
    for path, text in sorted(rendered.items()):
        if path.endswith("NOTES.txt"):
            continue
        manifests.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return manifests


@functools.cache
def _rendered(scenario: str) -> tuple[Manifest, ...]:
    return tuple(render(SCENARIOS[scenario]))


def manifests_of(scenario: str) -> list[Manifest]:
    return copy.deepcopy(list(_rendered(scenario)))


def notes_of(values: dict[str, Any]) -> str:
    with helm.Chart.load(CHART) as chart:
        rendered = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return next(text for path, text in rendered.items() if path.endswith("NOTES.txt"))


@functools.cache
def _default_values() -> str:
    with helm.Chart.load(CHART) as chart:
        return json.dumps(chart.values)


def default_tiers() -> dict[str, Any]:
    """The chart's default ``tiers`` map."""
    tiers: dict[str, Any] = json.loads(_default_values())["tiers"]
    return tiers


def of_kind(manifests: list[Manifest], kind: str) -> list[Manifest]:
    return [m for m in manifests if m["kind"] == kind]


def one(manifests: list[Manifest], kind: str, name: str) -> Manifest:
    found = [m for m in of_kind(manifests, kind) if m["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def is_hook(manifest: Manifest) -> bool:
    return "helm.sh/hook" in (manifest["metadata"].get("annotations") or {})


def workers(manifests: list[Manifest]) -> dict[str, Manifest]:
    """Worker Deployments by tier label."""
    found: dict[str, Manifest] = {}
    for deployment in of_kind(manifests, "Deployment"):
        labels = deployment["metadata"]["labels"]
        if labels.get("app.kubernetes.io/component") == "worker":
            tier = labels["speedtier.io/tier"]
            assert tier not in found, f"two worker Deployments for tier {tier}"
            found[tier] = deployment
    return found


def pod_templates(manifests: list[Manifest]) -> Iterator[tuple[Manifest, Manifest]]:
    for manifest in manifests:
        if manifest["kind"] in ("Deployment", "Job"):
            yield manifest, manifest["spec"]["template"]


def release_config(manifests: list[Manifest]) -> dict[str, str]:
    data: dict[str, str] = one(manifests, "ConfigMap", CONFIGMAP)["data"]
    return data


def drain_seconds(manifests: list[Manifest]) -> int:
    return int(release_config(manifests)["SPEEDTIER_WORKER_DRAIN_SECONDS"])


# --- the engine --------------------------------------------------------------------------


def test_helm_engine_is_the_library_bundled_in_the_wheel() -> None:
    bundled = Path(helm.__file__).resolve().parent / "lib"
    assert Path(helm.library_path).resolve().parent == bundled
    assert helm.helm_sdk_version().startswith("v"), helm.helm_sdk_version()


def test_chart_metadata() -> None:
    with helm.Chart.load(CHART) as chart:
        metadata = chart.metadata
        defaults = chart.values
    assert metadata["apiVersion"] == "v2"
    assert metadata["name"] == "speedtier"
    assert metadata["appVersion"] == "0.1.0"
    assert set(defaults["tiers"]) == set(TIER_NAMES) == {"fast", "slow", "maintenance"}
    for name, tier in defaults["tiers"].items():
        assert {"replicas", "processes", "threads", "resources", "queues"} <= set(tier)
        # Queue names are `<family>.<tier>`.
        assert tier["queues"]
        assert all(queue.endswith(f".{name}") for queue in tier["queues"]), tier["queues"]


# --- helm lint ---------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_helm_lint_strict_is_clean(scenario: str) -> None:
    report = helm.lint(
        CHART,
        SCENARIOS[scenario],
        strict=True,
        namespace=NAMESPACE,
        kube_version=f"v{KUBE_VERSION}",
    )
    assert report["total_charts_linted"] == 1
    assert report["errors"] == []
    # Severity 1 (info, e.g. "icon is recommended") is fine; warnings and errors are not.
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_helm_lint_reports_a_broken_manifest() -> None:
    """Guard against a lint that passes everything: an invalid object name must be reported."""
    report = helm.lint(CHART, {"fullnameOverride": "Not_A_Name"}, strict=True)
    assert report["errors"], report


# --- strict schema validation ------------------------------------------------------------


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_manifest_validates_strictly(scenario: str) -> None:
    manifests = manifests_of(scenario)
    assert manifests
    validated = 0
    for manifest in manifests:
        if (manifest["apiVersion"], manifest["kind"]) in CRD_KINDS:
            continue  # no schema: asserted structurally in test_keda_*
        try:
            kubernetes_validate.validate(manifest, KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(part) for part in exc.path)
            pytest.fail(
                f"{manifest['kind']}/{manifest['metadata']['name']}: {where}: {exc.message}"
            )
        except kubernetes_validate.SchemaNotFoundError as exc:
            pytest.fail(exc.message)
        validated += 1
    assert validated >= 10


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_object_names_are_unique_per_kind(scenario: str) -> None:
    keys = [(m["kind"], m["metadata"]["name"]) for m in manifests_of(scenario)]
    assert len(keys) == len(set(keys)), sorted(keys)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_standard_labels_everywhere(scenario: str) -> None:
    for manifest in manifests_of(scenario):
        labels = manifest["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "speedtier"
        assert labels["app.kubernetes.io/instance"] == RELEASE
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["helm.sh/chart"] == "speedtier-0.1.0"
        assert labels["app.kubernetes.io/version"] == "0.1.0"


# --- workers -----------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_one_worker_deployment_per_tier(scenario: str) -> None:
    manifests = manifests_of(scenario)
    deployments = workers(manifests)
    expected = EXPECTED_TIERS[scenario]
    assert set(deployments) == set(expected)
    for tier, (replicas, processes, threads) in expected.items():
        deployment = deployments[tier]
        assert deployment["metadata"]["name"] == f"{FULLNAME}-worker-{tier}"
        assert deployment["spec"].get("replicas") == replicas
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert container["command"] == [
            "speedtier",
            "worker",
            "--tier",
            tier,
            "--processes",
            str(processes),
            "--threads",
            str(threads),
        ]
        assert container["image"] == "registry.example.com/speedtier:0.1.0"
        selector = deployment["spec"]["selector"]["matchLabels"]
        assert selector["speedtier.io/tier"] == tier
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= pod_labels.items()
        config = release_config(manifests)
        prefix = f"SPEEDTIER_{tier.upper()}"
        assert config[f"{prefix}_PROCESSES"] == str(processes)
        assert config[f"{prefix}_THREADS"] == str(threads)


def test_worker_queues_are_recorded_on_the_deployment() -> None:
    deployments = workers(manifests_of("four-tiers"))
    annotation = deployments["medium"]["metadata"]["annotations"]["speedtier.io/queues"]
    assert annotation == "reports.medium,exports.medium"


@pytest.mark.parametrize("scenario", ["defaults", "secrets-from-values", "keda"])
def test_worker_grace_period_outlasts_the_drain(scenario: str) -> None:
    manifests = manifests_of(scenario)
    drain = drain_seconds(manifests)
    assert drain == SCENARIOS[scenario].get("workerDrainSeconds", 25)
    for deployment in workers(manifests).values():
        grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        assert grace > drain
        assert grace == drain + 10


def test_zero_grace_margin_is_refused() -> None:
    with pytest.raises(helm.HelmRenderError, match="terminationGraceMarginSeconds"):
        render({"terminationGraceMarginSeconds": 0})


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"tiers": {"Fast_IO": {"queues": ["a.fast_io"]}}}, "lower-case DNS label"),
        ({"tiers": {"fast": {"processes": 0}}}, "tiers.fast.processes"),
        ({"tiers": {"slow": {"pdb": {"minAvailable": 1, "maxUnavailable": 1}}}}, "not both"),
        ({"config": {"windows": {"google_drive": "four per minute"}}}, "LIMIT/SECONDS"),
        ({"config": {"redisNamespace": "has space"}}, "redisNamespace"),
        ({"keda": {"enabled": True}}, "keda.redis.address"),
        (_merge(KEDA_ON, TIER_REDIS), r"tiers\.\w+ has its own Redis \(redisUrl\)"),
        (_merge(KEDA_ON, {"tiers": {"medium": {}}}), "KEDA needs the tier's `queues`"),
    ],
)
def test_invalid_values_fail_rendering(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmRenderError, match=message):
        render(values)


def test_tier_can_be_removed_with_null() -> None:
    deployments = workers(render({"tiers": {"maintenance": None}}))
    assert set(deployments) == {"fast", "slow"}


# --- probes, env, security ---------------------------------------------------------------


@pytest.mark.parametrize("scenario", ["defaults", "three-tiers"])
def test_workers_and_scheduler_are_ready_on_dependencies_and_alive_on_heartbeats(
    scenario: str,
) -> None:
    manifests = manifests_of(scenario)
    scheduler = one(manifests, "Deployment", f"{FULLNAME}-scheduler")
    components = {f"worker-{tier}": d for tier, d in workers(manifests).items()}
    for component, deployment in {**components, "scheduler": scheduler}.items():
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert container["readinessProbe"]["exec"]["command"] == ["speedtier", "ready"]
        assert container["livenessProbe"]["exec"]["command"] == ["speedtier", "alive", component]
        for probe in ("livenessProbe", "readinessProbe"):
            assert container[probe]["timeoutSeconds"] >= 5
        assert container["ports"] == [{"name": "metrics", "containerPort": 9191, "protocol": "TCP"}]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["PROMETHEUS_MULTIPROC_DIR"].startswith("/tmp/")


def test_scheduler_deployment() -> None:
    scheduler = one(manifests_of("defaults"), "Deployment", f"{FULLNAME}-scheduler")
    assert scheduler["spec"]["replicas"] == 1
    (container,) = scheduler["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["speedtier", "scheduler"]
    scaled = one(manifests_of("pdb-min-available"), "Deployment", f"{FULLNAME}-scheduler")
    assert scaled["spec"]["replicas"] == 2


def test_api_deployment_service_and_http_probes() -> None:
    manifests = manifests_of("defaults")
    api = one(manifests, "Deployment", f"{FULLNAME}-api")
    (container,) = api["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["speedtier", "api", "--host", "0.0.0.0", "--port", "8080"]
    assert container["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    service = one(manifests, "Service", f"{FULLNAME}-api")
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    assert service["spec"]["selector"].items() <= (
        api["spec"]["template"]["metadata"]["labels"].items()
    )


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_container_loads_config_and_secret_with_env_from(scenario: str) -> None:
    manifests = manifests_of(scenario)
    existing = SCENARIOS[scenario].get("secrets", {}).get("existingSecret")
    names = {m["metadata"]["name"] for m in manifests if m["kind"] in ("ConfigMap", "Secret")}
    for owner, template in pod_templates(manifests):
        hook = is_hook(owner)
        for container in template["spec"]["containers"]:
            config_refs = [
                e["configMapRef"]["name"] for e in container["envFrom"] if "configMapRef" in e
            ]
            secret_refs = [e["secretRef"]["name"] for e in container["envFrom"] if "secretRef" in e]
            assert config_refs == [HOOK_NAME if hook else CONFIGMAP]
            if existing:
                assert secret_refs == [existing]
                assert existing not in names
            else:
                assert secret_refs == [HOOK_NAME if hook else FULLNAME]
                assert secret_refs[0] in names


@pytest.mark.parametrize("scenario", ["defaults", "keda"])
def test_pods_run_as_non_root_with_a_read_only_root(scenario: str) -> None:
    for _owner, template in pod_templates(manifests_of(scenario)):
        spec = template["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["automountServiceAccountToken"] is False
        for container in spec["containers"]:
            assert container["securityContext"]["allowPrivilegeEscalation"] is False
            assert container["securityContext"]["readOnlyRootFilesystem"] is True
            assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]


# --- migrations hook ---------------------------------------------------------------------


@pytest.mark.parametrize("scenario", ["defaults", "existing-secret"])
def test_migrations_job_is_a_pre_install_pre_upgrade_hook(scenario: str) -> None:
    manifests = manifests_of(scenario)
    job = one(manifests, "Job", HOOK_NAME)
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert set(annotations["helm.sh/hook-delete-policy"].split(",")) == {
        "before-hook-creation",
        "hook-succeeded",
    }
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["speedtier", "db", "upgrade"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    # Before the release's ServiceAccount exists, so it must not use it.
    assert "serviceAccountName" not in job["spec"]["template"]["spec"]
    # The configuration it reads is created by hooks of a lower weight, in the same phases.
    job_weight = int(annotations["helm.sh/hook-weight"])
    copies = [m for m in manifests if is_hook(m) and m["kind"] in ("ConfigMap", "Secret")]
    expected_kinds = {"ConfigMap"} if scenario == "existing-secret" else {"ConfigMap", "Secret"}
    assert {m["kind"] for m in copies} == expected_kinds
    for copied in copies:
        copy_annotations = copied["metadata"]["annotations"]
        assert copy_annotations["helm.sh/hook"] == annotations["helm.sh/hook"]
        assert int(copy_annotations["helm.sh/hook-weight"]) < job_weight
    hook_config = one(manifests, "ConfigMap", HOOK_NAME)
    assert hook_config["data"] == release_config(manifests)


def test_migrations_job_uses_an_existing_service_account_only() -> None:
    values = {"serviceAccount": {"create": False, "name": "speedtier-runner"}}
    manifests = render(values)
    job = one(manifests, "Job", HOOK_NAME)
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == "speedtier-runner"
    assert of_kind(manifests, "ServiceAccount") == []


def test_migrations_can_be_disabled() -> None:
    manifests = render({"migrations": {"enabled": False}})
    assert of_kind(manifests, "Job") == []
    assert not any(is_hook(m) for m in manifests)


# --- configuration and secrets -----------------------------------------------------------


def _setting_env_names() -> set[str]:
    return set(environment_variables().values())


def test_config_map_and_secret_cover_every_setting() -> None:
    manifests = manifests_of("secrets-from-values")
    config = release_config(manifests)
    secret = one(manifests, "Secret", FULLNAME)
    # empty in this scenario, so left out of the Secret / ConfigMap (only set when given)
    unset = {
        "SENTRY_DSN",
        "SPEEDTIER_EMBEDDING_API_KEY",
        "SPEEDTIER_EMBEDDING_DIMENSIONS",
        "SPEEDTIER_EMBEDDING_RATE",
        "SPEEDTIER_EMBEDDING_API_PROJECT",
        "SLACK_BOT_TOKEN",
        "RAILS_INTERNAL_URL",
        "RAILS_INTERNAL_TOKEN",
        "POSTHOG_PROJECT_API_KEY",
        "POSTHOG_PERSONAL_API_KEY",
        "SPEEDTIER_REGION",
        "SPEEDTIER_UPLOADS_BUCKET",
        "SPEEDTIER_UPLOADS_ENDPOINT_URL",
        "SPEEDTIER_UPLOADS_REGION",
        "SPEEDTIER_UPLOADS_ROOT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        # every tier on REDIS_URL here ("tier-redis" sets them: test_a_tier_can_have_its_own_redis)
        "SPEEDTIER_FAST_REDIS_URL",
        "SPEEDTIER_SLOW_REDIS_URL",
        "SPEEDTIER_MAINTENANCE_REDIS_URL",
    }
    provided = set(config) | set(secret["data"]) | unset
    settings = _setting_env_names()
    assert settings - provided == set(), "settings the chart does not set"
    assert set(config) - settings == set(), "ConfigMap keys shared/config.py does not read"


def test_config_map_loads_into_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    values = _merge(
        SCENARIOS["secrets-from-values"],
        {
            "config": {
                "windows": {"google_drive": "4/60", "notion": "3/1.5"},
                "flags": {"kb_document_sync": False},
                "apiMaxBodyBytes": 20_000_000,
            }
        },
    )
    manifests = render(values)
    config = release_config(manifests)
    secret = one(manifests, "Secret", FULLNAME)
    for key, value in config.items():
        monkeypatch.setenv(key, value)
    for key, value in secret["data"].items():
        monkeypatch.setenv(key, base64.b64decode(value).decode())
    settings = load_settings()
    assert settings.environment == "production"
    assert settings.redis_namespace == "speedtier"
    assert settings.worker_drain_seconds == 120
    assert settings.windows == {"google_drive": "4/60", "notion": "3/1.5"}
    assert settings.flag_overrides == {"kb_document_sync": False}
    assert settings.api_max_body_bytes == 20_000_000
    assert (settings.tier_processes("fast"), settings.tier_threads("fast")) == (2, 8)
    assert settings.redis_url == SECRETS["secrets"]["redisUrl"]
    assert settings.internal_api_token is not None
    assert settings.internal_api_token.get_secret_value() == SECRETS["secrets"]["internalApiToken"]


def test_secret_is_created_from_values_without_empty_keys() -> None:
    secret = one(manifests_of("secrets-from-values"), "Secret", FULLNAME)
    decoded = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert decoded == {
        "REDIS_URL": SECRETS["secrets"]["redisUrl"],
        "DATABASE_URL": SECRETS["secrets"]["databaseUrl"],
        "INTERNAL_API_TOKEN": SECRETS["secrets"]["internalApiToken"],
        "SPEEDTIER_CONNECTOR_CREDENTIALS_KEY": SECRETS["secrets"]["connectorCredentialsKey"],
    }


def test_a_tier_can_have_its_own_redis(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the slow and maintenance tiers on Redis servers of their own
    manifests = manifests_of("tier-redis")
    secret = one(manifests, "Secret", FULLNAME)
    decoded = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    # Then their URLs are in the Secret every pod loads (fast has none: REDIS_URL)
    assert decoded["SPEEDTIER_SLOW_REDIS_URL"] == SLOW_REDIS
    assert decoded["SPEEDTIER_MAINTENANCE_REDIS_URL"] == MAINTENANCE_REDIS
    assert "SPEEDTIER_FAST_REDIS_URL" not in decoded
    # and every pod, not only the tier's own, loads them (the API and the other tiers enqueue)
    for manifest, template in pod_templates(manifests):
        if is_hook(manifest):  # the migrations Job needs no queue
            continue
        for container in template["spec"]["containers"]:
            refs = [source.get("secretRef", {}).get("name") for source in container["envFrom"]]
            assert FULLNAME in refs
    # and the settings read from them route each tier to its Redis
    for key, value in {**release_config(manifests), **decoded}.items():
        monkeypatch.setenv(key, value)
    settings = load_settings()
    assert settings.tier_redis_url("fast") == SECRETS["secrets"]["redisUrl"]
    assert settings.tier_redis_url("slow") == SLOW_REDIS
    assert settings.tier_redis_url("maintenance") == MAINTENANCE_REDIS


def test_keda_reads_a_tier_with_its_own_redis_there() -> None:
    values = _merge(
        KEDA_ON,
        TIER_REDIS,
        {
            "tiers": {
                "slow": {"keda": {"redis": {"address": "redis-slow:6379"}}},
                "maintenance": {
                    "keda": {"redis": {"addressFromEnv": "MAINT_HOSTPORT", "databaseIndex": 2}}
                },
            }
        },
    )
    scaled = {s["metadata"]["name"]: s for s in of_kind(render(values), "ScaledObject")}

    def addresses(tier: str) -> set[tuple[str | None, str | None, str]]:
        triggers = scaled[f"{FULLNAME}-worker-{tier}"]["spec"]["triggers"]
        return {
            (t["metadata"].get("address"), t["metadata"].get("addressFromEnv"),
             t["metadata"]["databaseIndex"])
            for t in triggers
        }  # fmt: skip

    assert addresses("fast") == {("redis-master:6379", None, "0")}
    assert addresses("slow") == {("redis-slow:6379", None, "0")}
    assert addresses("maintenance") == {(None, "MAINT_HOSTPORT", "2")}


def test_existing_secret_replaces_the_chart_secret() -> None:
    manifests = manifests_of("existing-secret")
    assert of_kind(manifests, "Secret") == []


def test_config_changes_roll_the_pods() -> None:
    def checksum(values: dict[str, Any]) -> str:
        fast = workers(render(values))["fast"]
        annotation: str = fast["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
        return annotation

    assert checksum({}) != checksum({"config": {"logLevel": "DEBUG"}})


# --- PodDisruptionBudgets ----------------------------------------------------------------


def _budget(pdb: Manifest) -> dict[str, Any]:
    return {k: v for k, v in pdb["spec"].items() if k in ("minAvailable", "maxUnavailable")}


@pytest.mark.parametrize("scenario", ["defaults", "three-tiers", "four-tiers", "keda"])
def test_pdb_per_worker_tier_and_api(scenario: str) -> None:
    manifests = manifests_of(scenario)
    pdbs = {p["metadata"]["name"]: p for p in of_kind(manifests, "PodDisruptionBudget")}
    deployments = {d["metadata"]["name"]: d for d in workers(manifests).values()}
    deployments[f"{FULLNAME}-api"] = one(manifests, "Deployment", f"{FULLNAME}-api")
    assert set(pdbs) == set(deployments)  # the scheduler has none by default
    for name, pdb in pdbs.items():
        assert _budget(pdb) == {"maxUnavailable": 1}
        pod_labels = deployments[name]["spec"]["template"]["metadata"]["labels"]
        assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


def test_pdb_budgets_are_configurable() -> None:
    manifests = manifests_of("pdb-min-available")
    pdbs = {p["metadata"]["name"]: p for p in of_kind(manifests, "PodDisruptionBudget")}
    assert set(pdbs) == {
        f"{FULLNAME}-worker-fast",
        f"{FULLNAME}-worker-slow",
        f"{FULLNAME}-worker-maintenance",
        f"{FULLNAME}-scheduler",
    }
    assert _budget(pdbs[f"{FULLNAME}-worker-fast"]) == {"minAvailable": 1}
    assert _budget(pdbs[f"{FULLNAME}-worker-slow"]) == {"maxUnavailable": "50%"}
    assert _budget(pdbs[f"{FULLNAME}-worker-maintenance"]) == {"minAvailable": 1}
    assert _budget(pdbs[f"{FULLNAME}-scheduler"]) == {"minAvailable": 1}


# --- KEDA --------------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", sorted(set(SCENARIOS) - {"keda"}))
def test_no_scaled_objects_unless_keda_is_enabled(scenario: str) -> None:
    assert of_kind(manifests_of(scenario), "ScaledObject") == []


def test_keda_scaled_object_per_tier_with_one_redis_trigger_per_queue() -> None:
    manifests = manifests_of("keda")
    deployments = workers(manifests)
    scaled = {s["metadata"]["name"]: s for s in of_kind(manifests, "ScaledObject")}
    # maintenance opted out: no ScaledObject, and its Deployment keeps its replica count.
    expected_tiers = {"fast", "slow", "medium"}
    assert set(scaled) == {f"{FULLNAME}-worker-{tier}" for tier in expected_tiers}
    assert deployments["maintenance"]["spec"]["replicas"] == 1
    queues = {tier: default_tiers()[tier]["queues"] for tier in ("fast", "slow")}
    queues["medium"] = ["reports.medium", "exports.medium"]
    assert all(queues.values())
    for tier in expected_tiers:
        obj = scaled[f"{FULLNAME}-worker-{tier}"]
        assert obj["apiVersion"] == "keda.sh/v1alpha1"
        assert set(obj) == {"apiVersion", "kind", "metadata", "spec"}
        spec = obj["spec"]
        assert spec["scaleTargetRef"] == {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": deployments[tier]["metadata"]["name"],
        }
        assert "replicas" not in deployments[tier]["spec"]  # the HPA owns it
        assert spec["pollingInterval"] == 15
        assert spec["cooldownPeriod"] == 300
        if tier == "slow":
            assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (0, 3)
        else:
            assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (1, 10)
        assert [t["metadata"]["listName"] for t in spec["triggers"]] == [
            f"speedtier:{queue}" for queue in queues[tier]
        ]
        for trigger in spec["triggers"]:
            assert trigger["type"] == "redis"
            assert trigger["authenticationRef"] == {"name": "redis"}
            metadata = trigger["metadata"]
            # KEDA trigger metadata is map[string]string.
            assert all(isinstance(v, str) for v in metadata.values()), metadata
            assert metadata["address"] == "redis-master:6379"
            assert metadata["passwordFromEnv"] == "REDIS_PASSWORD"
            assert metadata["listLength"] == ("5" if tier == "slow" else "20")
            assert metadata["databaseIndex"] == "0"


def test_keda_list_names_follow_the_redis_namespace() -> None:
    values = _merge(KEDA_ON, {"config": {"redisNamespace": "st-prod"}})
    manifests = render(values)
    (fast,) = [
        s for s in of_kind(manifests, "ScaledObject") if s["metadata"]["name"].endswith("-fast")
    ]
    first_queue = default_tiers()["fast"]["queues"][0]
    assert fast["spec"]["triggers"][0]["metadata"]["listName"] == f"st-prod:{first_queue}"
    assert release_config(manifests)["SPEEDTIER_REDIS_NAMESPACE"] == "st-prod"


def test_keda_address_from_env() -> None:
    values = {"keda": {"enabled": True, "redis": {"addressFromEnv": "REDIS_HOSTPORT"}}}
    for obj in of_kind(render(values), "ScaledObject"):
        for trigger in obj["spec"]["triggers"]:
            assert trigger["metadata"]["addressFromEnv"] == "REDIS_HOSTPORT"
            assert "address" not in trigger["metadata"]


# --- NOTES.txt ---------------------------------------------------------------------------


def test_notes_list_the_tiers_and_warn_about_missing_secrets() -> None:
    notes = notes_of(FOUR_TIERS)
    for tier in ("fast", "slow", "maintenance", "medium"):
        assert f"{FULLNAME}-worker-{tier}" in notes
    assert "WARNING" in notes
    assert "WARNING" not in notes_of(SCENARIOS["existing-secret"])
