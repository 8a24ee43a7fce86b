"""The Helm chart, rendered by Helm's own engine, validated strictly, and started as a pod would.

Each workload is laid out on disk as its pod would see it (ConfigMap files, Secret items with
their modes, emptyDir and volume folders, the init container run for real) with secret material
from scripts/k8s_secrets.py, and ``strongroom config check`` runs on the config the container's
args name, with the container's environment: what the chart ships must pass what ``serve`` and
``engine`` check at start. The gateway's check also reaches the Redis and PostgreSQL of the tests.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import helm_python
import kubernetes_validate
import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
KUBERNETES_VERSION = "1.33.0"

pytestmark = pytest.mark.integration


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


render_kubernetes = _script("render_kubernetes")


@pytest.fixture(scope="module")
def objects() -> list[dict[str, Any]]:
    return [yaml.safe_load(doc) for doc in render_kubernetes.render()]


def _one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def test_committed_manifests_are_the_rendered_chart() -> None:
    committed = (REPO / "deploy" / "kubernetes" / "strongroom.yaml").read_text(encoding="utf-8")
    assert committed == render_kubernetes.manifest_text(), "run python scripts/render_kubernetes.py"


def test_helm_lint_finds_no_error_or_warning() -> None:
    report = helm_python.lint(REPO / "deploy" / "helm" / "strongroom", strict=True)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_every_rendered_object_passes_strict_schema_validation(objects: list[dict[str, Any]]) -> None:
    secrets = render_kubernetes.render(
        {"secrets": {"create": True, "gateway": _fake_b64(GATEWAY_KEYS), "engine": _fake_b64(ENGINE_KEYS)}}
    )
    every = objects + [yaml.safe_load(doc) for doc in secrets if "kind: Secret" in doc]
    assert {o["kind"] for o in every} >= {
        "Deployment",
        "StatefulSet",
        "Service",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "Secret",
        "Ingress",
        "HorizontalPodAutoscaler",
        "ConfigMap",
        "ServiceAccount",
    }
    for obj in every:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    # The validator is strict: an unknown field is an error, so the loop above can fail.
    broken = _one(objects, "Deployment", "strongroom-gateway") | {"spec": {"replicaz": 2}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


GATEWAY_KEYS = [
    "tls.crt",
    "tls.key",
    "ca.crt",
    "engine-client.crt",
    "engine-client.key",
    "audit-signing-key.pem",
    "audit-content-hmac.key",
    "audit-content.key",
    "engine-token",
    "redis-url",
    "audit-postgres-dsn",
    "audit-witness-dsn",
    "access-postgres-dsn",
    "audit-public-key-fingerprint",
    "metrics-token",
]
ENGINE_KEYS = ["tls.crt", "tls.key", "ca.crt", "master.key", "engine-token"]


def _fake_b64(keys: list[str]) -> dict[str, str]:
    return dict.fromkeys(keys, "cGxhY2Vob2xkZXI=")


def test_chart_refuses_to_render_secrets_without_their_values() -> None:
    with pytest.raises(helm_python.HelmError, match=r"secrets\.gateway\.tls\.crt is required"):
        render_kubernetes.render({"secrets": {"create": True}})


def test_workloads_are_highly_available_hardened_and_probed(objects: list[dict[str, Any]]) -> None:
    gateway = _one(objects, "Deployment", "strongroom-gateway")
    engine = _one(objects, "StatefulSet", "strongroom-engine")
    assert gateway["spec"]["replicas"] >= 2
    pdb = _one(objects, "PodDisruptionBudget", "strongroom-gateway")
    assert pdb["spec"]["selector"]["matchLabels"] == gateway["spec"]["selector"]["matchLabels"]
    assert pdb["spec"]["minAvailable"] >= 1
    for workload in (gateway, engine):
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["automountServiceAccountToken"] is False
        for container in pod["containers"] + pod.get("initContainers", []):
            sc = container["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"]["drop"] == ["ALL"]
            assert container["resources"]["limits"] and container["resources"]["requests"]
        (main,) = pod["containers"]
        assert {"readinessProbe", "livenessProbe", "startupProbe"} <= set(main)
        writable = {m["mountPath"] for m in main["volumeMounts"] if not m.get("readOnly")}
        assert {"/var/lib/strongroom", "/tmp"} <= writable
    gpu = engine["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert gpu["limits"]["nvidia.com/gpu"] == gpu["requests"]["nvidia.com/gpu"] == 1
    hpa = _one(objects, "HorizontalPodAutoscaler", "strongroom-gateway")
    assert hpa["spec"]["metrics"][0]["pods"]["metric"]["name"] == "strongroom_requests_in_flight"
    assert hpa["spec"]["minReplicas"] >= 2
    ingress = _one(objects, "Ingress", "strongroom-gateway")
    assert ingress["spec"]["tls"][0]["hosts"] == [ingress["spec"]["rules"][0]["host"]]


def test_only_gateways_reach_engines(objects: list[dict[str, Any]]) -> None:
    policy = _one(objects, "NetworkPolicy", "strongroom-engine")
    engine = _one(objects, "StatefulSet", "strongroom-engine")
    gateway = _one(objects, "Deployment", "strongroom-gateway")
    assert policy["spec"]["podSelector"]["matchLabels"] == engine["spec"]["selector"]["matchLabels"]
    assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"} and policy["spec"]["egress"] == []
    (rule,) = policy["spec"]["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": gateway["spec"]["selector"]["matchLabels"]}}]


# -- the pods, laid out on disk ------------------------------------------------------------------


@pytest.fixture(scope="module")
def secret_dirs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("k8s") / "secrets"
    env = {
        "STRONGROOM_REDIS_URL": "redis://127.0.0.1:6379/15",
        "STRONGROOM_AUDIT__POSTGRES_DSN": "host=127.0.0.1 user=postgres dbname=test",
        "STRONGROOM_AUDIT__WITNESS_POSTGRES_DSN": "host=127.0.0.1 user=postgres dbname=test",
        "STRONGROOM_ACCESS__POSTGRES_DSN": "host=127.0.0.1 user=postgres dbname=test",
    }
    subprocess.run(
        [sys.executable, str(REPO / "scripts" / "k8s_secrets.py"), "--out", str(out), "--engines", "2"],
        check=True,
        env=os.environ | env,
        capture_output=True,
    )
    return out


class Pod:
    """One workload's pod on disk under ``root``: every absolute path p is ``root / p``."""

    def __init__(
        self, objects: list[dict[str, Any]], workload: dict[str, Any], secrets: Path, root: Path
    ) -> None:
        self.root = root
        self.spec = workload["spec"]["template"]["spec"]
        self.configmaps = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ConfigMap"}
        self.secrets = secrets
        (self.container,) = self.spec["containers"]
        volumes = {v["name"]: v for v in self.spec["volumes"]}
        claims = {c["metadata"]["name"] for c in workload["spec"].get("volumeClaimTemplates", [])}
        mounts = sorted(self.container["volumeMounts"], key=lambda m: len(m["mountPath"]))
        for mount in mounts:
            self._mount(volumes.get(mount["name"]), mount["name"] in claims, self.path(mount["mountPath"]))
        for init in self.spec.get("initContainers", []):
            subprocess.run([self.rebase(arg) for arg in init["command"]], check=True)

    def path(self, absolute: str) -> Path:
        return self.root / absolute.lstrip("/")

    def rebase(self, arg: str) -> str:
        return str(self.path(arg)) if arg.startswith("/") else arg

    def _secret_dir(self, name: str) -> Path:
        return self.secrets / name.removeprefix("strongroom-")

    def _mount(self, volume: dict[str, Any] | None, is_claim: bool, at: Path) -> None:
        at.mkdir(parents=True, exist_ok=True)
        if volume is None:
            assert is_claim
        elif "configMap" in volume:
            for key, text in self.configmaps[volume["configMap"]["name"]]["data"].items():
                (at / key).write_text(text)
        elif "secret" in volume:
            source = self._secret_dir(volume["secret"]["secretName"])
            for item in volume["secret"]["items"]:
                shutil.copyfile(source / item["key"], at / item["path"])
                (at / item["path"]).chmod(volume["secret"]["defaultMode"])
        else:
            assert "emptyDir" in volume

    def environment(self) -> dict[str, str]:
        env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), "HOME": str(self.root)}
        for var in self.container["env"]:
            ref = var["valueFrom"]["secretKeyRef"]
            env[var["name"]] = (self._secret_dir(ref["name"]) / ref["key"]).read_text()
        # The config's data_dir is the pod's absolute path; here it lies under root.
        env["STRONGROOM_DATA_DIR"] = str(self.path("/var/lib/strongroom"))
        return env

    def config_check(self, *extra: str) -> subprocess.CompletedProcess[str]:
        command, *args = self.container["args"]
        args = [self.rebase(a) for a in args]
        role = ["--role", "engine"] if command == "engine" else []
        return subprocess.run(
            [sys.executable, "-m", "strongroom", "config", "check", *args, *role, *extra],
            env=self.environment(),
            capture_output=True,
            text=True,
            timeout=60,
            cwd=self.root,
        )


def test_gateway_pod_passes_config_check_with_services(
    objects: list[dict[str, Any]], secret_dirs: Path, tmp_path: Path
) -> None:
    pod = Pod(objects, _one(objects, "Deployment", "strongroom-gateway"), secret_dirs, tmp_path)
    result = pod.config_check("--strict", "--connect")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


def test_engine_pod_passes_config_check_but_for_the_models_it_has_yet_to_receive(
    objects: list[dict[str, Any]], secret_dirs: Path, tmp_path: Path
) -> None:
    pod = Pod(objects, _one(objects, "StatefulSet", "strongroom-engine"), secret_dirs, tmp_path)
    # The init container made an owner-only copy of the master key, as keys requires.
    assert (pod.path("/var/lib/strongroom/keys/master.key").stat().st_mode & 0o777) == 0o600
    result = pod.config_check()
    assert result.returncode == 0, result.stderr
    (warning,) = result.stderr.splitlines()
    assert warning.startswith("warning: engine.models.0 (chat): out of service: no checkpoint")


def test_a_pod_missing_a_secret_fails_with_one_line_per_problem(
    objects: list[dict[str, Any]], secret_dirs: Path, tmp_path: Path
) -> None:
    pod = Pod(objects, _one(objects, "Deployment", "strongroom-gateway"), secret_dirs, tmp_path)
    pod.path("/var/lib/strongroom/secrets/audit-signing-key.pem").unlink()
    pod.path("/var/lib/strongroom/secrets/engine-client.key").unlink()
    result = pod.config_check()
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 2, lines
    assert any(line.startswith("error: audit.signing_key_file: file not found") for line in lines)
    assert any(line.startswith("error: server.engine_tls.key_file: file not found") for line in lines)


def test_generated_pki_carries_the_gateway_engine_mutual_tls(secret_dirs: Path) -> None:
    """The gateway's engine client and the engine's listener, built by the code that serves, from
    the material k8s_secrets.py wrote, complete a handshake for an engine's pod DNS name; a client
    without the gateway's certificate is refused."""
    import socket
    import ssl
    import threading

    from gateway.config import EngineTlsConfig
    from gateway.listener_config import TlsConfig
    from gateway.tls_context import engine_client_context, listener_context

    gateway, engine = secret_dirs / "gateway", secret_dirs / "engine"
    server = listener_context(
        TlsConfig(cert_file="tls.crt", key_file="tls.key", client_ca_file="ca.crt", client_cert="required"),
        lambda p: engine / p,
        "engine_listener.tls",
    )
    client = engine_client_context(
        EngineTlsConfig(ca_file="ca.crt", cert_file="engine-client.crt", key_file="engine-client.key"),
        lambda p: gateway / p,
    )
    anonymous = engine_client_context(EngineTlsConfig(ca_file="ca.crt"), lambda p: gateway / p)
    host = "strongroom-engine-1.strongroom-engine.strongroom.svc.cluster.local"

    def handshake(ctx: ssl.SSLContext) -> str | None:
        a, b = socket.socketpair()
        served: list[BaseException] = []

        def serve() -> None:
            try:
                with server.wrap_socket(b, server_side=True) as s:
                    s.recv(1)
            except (ssl.SSLError, OSError) as exc:
                served.append(exc)

        thread = threading.Thread(target=serve)
        thread.start()
        try:
            with ctx.wrap_socket(a, server_hostname=host) as s:
                s.sendall(b"x")
        except (ssl.SSLError, OSError):
            pass
        thread.join(timeout=10)
        return type(served[0]).__name__ if served else None

    assert handshake(client) is None
    assert handshake(anonymous) is not None


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"gateway": {"replicas": 1}}, "replicas"),
        ({"engine": {"models": []}}, "models"),
        (
            {"auth": {"issuers": [{"issuer": "https://idp", "audiences": ["a"], "algorithms": ["RS256"]}]}},
            "issuers",
        ),
        ({"image": {"tag": "latest"}}, "tag"),
    ],
)
def test_values_schema_refuses_a_release_that_could_not_start_or_be_highly_available(
    values: dict[str, Any], says: str
) -> None:
    with pytest.raises(helm_python.HelmError, match=says):
        render_kubernetes.render(values)
