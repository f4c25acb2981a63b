"""deploy/: the Kubernetes manifests validate against Kubernetes' schemas (no cluster needed) and
run commands `tether` has; the Dockerfile builds from a small context, in two stages, not as
root. (No Docker engine runs here: what can be checked without one is.)"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]  # no types of its own
import pytest
import yaml
from typer.testing import CliRunner

from tether.cli.main import app
from tether.config import StoreSettings, TlsSettings
from tether.region.certs import SERVICES, SERVICES_NAME

ROOT = Path(__file__).resolve().parents[2]
KUBERNETES = ROOT / "deploy" / "kubernetes"
KUBERNETES_VERSION = "1.30"
"""The oldest Kubernetes the manifests are for."""
MAX_CONTEXT_BYTES = 20 * 1024 * 1024


def manifests() -> Iterator[tuple[str, dict[str, Any]]]:
    kustomization = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())
    for name in kustomization["resources"]:
        for document in yaml.safe_load_all((KUBERNETES / name).read_text()):
            if document is not None:
                yield name, document


def containers(document: dict[str, Any]) -> list[dict[str, Any]]:
    spec = document.get("spec", {})
    template = spec.get("template", {}).get("spec", {})
    found: list[dict[str, Any]] = template.get("containers", [])
    return found


def test_the_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())
    files = {path.name for path in KUBERNETES.glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(kustomization["resources"]) == sorted(files)


@pytest.mark.parametrize(
    ("name", "document"),
    list(manifests()),
    ids=[
        f"{name}:{document['kind']}/{document['metadata']['name']}"
        for name, document in manifests()
    ],
)
def test_every_manifest_validates(name: str, document: dict[str, Any]) -> None:
    kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def test_the_region_has_every_service_with_resources_and_probes() -> None:
    commands: dict[str, dict[str, Any]] = {}
    for _, document in manifests():
        for container in containers(document):
            if container["image"] == "tether":
                commands[container["args"][0]] = container
                assert container["resources"]["requests"], container["name"]
    assert set(commands) == {
        "region",
        "frontend",
        "registry",
        "scheduler",
        "allocator",
        "broker",
        "health",
        "rebalancer",
        "agent",
    }
    frontend = commands["frontend"]
    assert frontend["readinessProbe"]["httpGet"]["path"] == "/readyz"
    kinds = {document["kind"] for _, document in manifests()}
    assert {"StatefulSet", "DaemonSet", "Job", "Secret", "Service"} <= kinds
    etcd = next(d for _, d in manifests() if d["kind"] == "StatefulSet")
    assert etcd["spec"]["replicas"] == 3
    assert etcd["spec"]["volumeClaimTemplates"]


@pytest.mark.parametrize(
    "container",
    [c for _, d in manifests() for c in containers(d) if c["image"] == "tether"],
    ids=lambda container: container["name"],
)
def test_every_container_runs_a_command_and_options_tether_has(container: dict[str, Any]) -> None:
    args = container["args"]
    words = [arg for arg in args if not arg.startswith("-")]
    command = words[: 2 if words[0] == "region" else 1]
    answered = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert answered.exit_code == 0, answered.output
    for option in (arg.split("=")[0] for arg in args if arg.startswith("--")):
        assert option in answered.stdout, (container["name"], option)


def test_the_docker_build_context_is_small_and_holds_what_the_dockerfile_copies() -> None:
    rules = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    # Everything is left out but what is named back in.
    assert rules[0] == "*"
    kept = [rule.removeprefix("!").rstrip("/") for rule in rules if rule.startswith("!")]
    size = sum(
        path.stat().st_size
        for name in kept
        for path in ([ROOT / name] if (ROOT / name).is_file() else (ROOT / name).rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    )
    assert size < MAX_CONTEXT_BYTES, size
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    copied = re.findall(r"^COPY (?!--from)(.+) \S+$", dockerfile, flags=re.MULTILINE)
    for sources in copied:
        for source in sources.split():
            assert source.rstrip("/") in kept, source
    assert len(re.findall(r"^FROM ", dockerfile, flags=re.MULTILINE)) == 2
    users = re.findall(r"^USER (\S+)$", dockerfile, flags=re.MULTILINE)
    assert users, "the image runs as root"
    assert users[-1] not in ("root", "0")
    assert 'ENTRYPOINT ["tether"]' in dockerfile


ROLE_OF_COMMAND = {"region": "admin"}
"""The certificate each command's pod mounts, when it is not named after the command."""


def test_every_pod_mounts_the_region_ca_and_its_own_certificate() -> None:
    config = next(d for _, d in manifests() if d["kind"] == "ConfigMap")["data"]
    for name in config:
        if name.startswith("TETHER_TLS_"):
            assert name.removeprefix("TETHER_TLS_").lower() in TlsSettings.model_fields, name
        elif name.startswith("TETHER_STORE_"):
            assert name.removeprefix("TETHER_STORE_").lower() in StoreSettings.model_fields, name
    assert config["TETHER_STORE"].startswith("etcds://")
    assert config["TETHER_TLS_MUTUAL"] == "true"
    assert config["TETHER_TLS_SERVER_NAME"] == SERVICES_NAME
    mounted = {config[f"TETHER_TLS_{name}"] for name in ("CA_FILE", "CERT_FILE", "KEY_FILE")}
    assert mounted == {
        "/etc/tether/tls/ca.pem",
        "/etc/tether/tls/tls.crt",
        "/etc/tether/tls/tls.key",
    }
    for _, document in manifests():
        pod = document.get("spec", {}).get("template", {}).get("spec", {})
        for container in pod.get("containers", []):
            if container["image"] != "tether":
                continue
            role = ROLE_OF_COMMAND.get(container["args"][0], container["args"][0])
            assert role in SERVICES, role
            mount = next(m for m in container["volumeMounts"] if m["name"] == "tls")
            assert mount["mountPath"] == "/etc/tether/tls"
            volume = next(v for v in pod["volumes"] if v["name"] == "tls")["secret"]
            assert volume["secretName"] == "tether-tls"
            items = {item["key"]: item["path"] for item in volume["items"]}
            assert items == {"ca.pem": "ca.pem", f"{role}.pem": "tls.crt", f"{role}.key": "tls.key"}
            assert pod["securityContext"]["fsGroup"] == container["securityContext"]["runAsUser"]
    frontend = next(d for _, d in manifests() if d["metadata"]["name"] == "frontend")
    probe = frontend["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
    assert probe["httpGet"]["scheme"] == "HTTPS"
    etcd = next(d for _, d in manifests() if d["kind"] == "StatefulSet")
    flags = etcd["spec"]["template"]["spec"]["containers"][0]["command"]
    assert {"--client-cert-auth", "--peer-client-cert-auth"} <= set(flags)
