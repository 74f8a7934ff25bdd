"""The node runner's router adaptations (dev/localcluster/noderunner/router.py): which pods it
admits without a GPU, and how their command line is bound to the pod IP."""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from localcluster.noderunner import router

from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner import plan
from llmfleet.render import Owner, render_fleet
from llmfleet.settings import OperatorSettings

FLEET = OperatorSettings().fleet

SPEC = LLMDeploymentSpec.model_validate(
    {
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
        "gpus": {"count": 2, "memoryGiB": 80, "perNode": 8, "product": "NVIDIA-H100-80GB-HBM3"},
    }
)


def pod_of(component: str) -> dict[str, Any]:
    (dep,) = [
        o
        for o in render_fleet(Owner("chat", "team-a", "1"), SPEC, plan(SPEC), FLEET).objects()
        if o["kind"] == "Deployment"
        and o["metadata"]["labels"]["app.kubernetes.io/component"] == component
    ]
    template = copy.deepcopy(dep["spec"]["template"])
    return {
        "metadata": {"name": "p", "namespace": "team-a", "uid": "u1", **template["metadata"]},
        "spec": template["spec"],
    }


def test_the_rendered_router_pod_is_admitted_and_nothing_else_without_a_gpu() -> None:
    assert router.is_router_pod(pod_of("router"))
    assert not router.is_router_pod(pod_of("engine"))
    forged = pod_of("router")
    forged["spec"]["containers"][0]["command"] = ["sh", "-c", "vllm-router"]
    assert not router.is_router_pod(forged)
    not_ours = pod_of("router")
    not_ours["metadata"]["labels"]["app.kubernetes.io/managed-by"] = "someone"
    assert not router.is_router_pod(not_ours)
    with_gpu = pod_of("router")
    with_gpu["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    assert not router.is_router_pod(with_gpu)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--host", "0.0.0.0", "--port", "8000", "--prometheus-host", "0.0.0.0"],
            ["--port", "8000", "--host", "127.17.0.9", "--prometheus-host", "127.17.0.9"],
        ),
        (
            ["--host=::", "--policy", "x"],
            ["--policy", "x", "--host", "127.17.0.9", "--prometheus-host", "127.17.0.9"],
        ),
        ([], ["--host", "127.17.0.9", "--prometheus-host", "127.17.0.9"]),
    ],
)
def test_router_binds_the_pod_ip(args: list[str], expected: list[str]) -> None:
    assert router.adapt_args(args, "127.17.0.9") == expected


class FakeCore:
    def __init__(self) -> None:
        self.requests: list[tuple[str, str, Any]] = []

    def create_namespaced_service_account_token(self, name: str, ns: str, body: Any) -> Any:
        self.requests.append((name, ns, body))

        class Status:
            token = "tok-123"

        class Got:
            status = Status()

        return Got()


CA = b"-----BEGIN CERTIFICATE-----\nlab\n-----END CERTIFICATE-----\n"


def runner_kubeconfig(tmp_path: Path, cluster: dict[str, Any]) -> Path:
    """The node runner's own kubeconfig: the cluster's entry, and the admin's credentials."""
    path = tmp_path / "runner.kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "clusters": [{"name": "c", "cluster": cluster}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "admin"}}],
                "users": [{"name": "admin", "user": {"client-key": "/secret"}}],
            }
        )
    )
    return path


def with_ca(server: str) -> dict[str, Any]:
    return {"server": server, "certificate-authority-data": base64.b64encode(CA).decode()}


def test_prepare_runs_the_router_venv_with_a_pod_bound_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(router, "router_venv", lambda: Path("/venvs/router"))
    kubeconfig = runner_kubeconfig(tmp_path, with_ca("https://127.0.0.1:1"))
    pod = pod_of("router")
    core = FakeCore()
    out = router.prepare(pod, "127.17.0.9", core, kubeconfig, tmp_path)  # type: ignore[arg-type]
    # Every router pod: vllm-router, with the router hop in front of it.
    c, hop = out["spec"]["containers"]
    assert c["command"] == ["/venvs/router/bin/vllm-router"]
    assert c["args"][-4:] == ["--host", "127.17.0.9", "--prometheus-host", "127.17.0.9"]
    (name, ns, body) = core.requests[0]
    assert (name, ns) == ("chat-router", "team-a")
    assert body.spec.bound_object_ref.kind == "Pod"
    assert body.spec.bound_object_ref.uid == "u1"
    env = {e["name"]: e.get("value") for e in c["env"]}
    written = yaml.safe_load(Path(env["KUBECONFIG"]).read_text())
    assert written["users"] == [
        {"name": "system:serviceaccount:team-a:chat-router", "user": {"token": "tok-123"}}
    ]
    assert written["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:1"
    assert "client-key" not in str(written)  # never the runner's own credentials
    folder = Path(hop["args"][hop["args"].index("--service-account-dir") + 1])
    assert (folder / "ca.crt").read_bytes() == CA
    assert pod["spec"]["containers"][0]["command"] == ["vllm-router"]  # the input is untouched
    router.cleanup(tmp_path, "u1")
    assert not Path(env["KUBECONFIG"]).exists()
    assert not folder.exists()


def test_a_runner_kubeconfig_without_the_clusters_ca_is_refused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(router, "router_venv", lambda: Path("/venvs/router"))
    kubeconfig = runner_kubeconfig(tmp_path, {"server": "https://127.0.0.1:1"})
    with pytest.raises(ValueError, match="certificate-authority-data nor certificate-authority"):
        router.prepare(pod_of("router"), "127.17.0.9", FakeCore(), kubeconfig, tmp_path)  # type: ignore[arg-type]


LORA_SPEC = LLMDeploymentSpec.model_validate(
    {
        **SPEC.model_dump(by_alias=True, exclude_none=True),
        "engine": {"lora": {"maxAdapters": 2, "maxRank": 16}},
        "adapters": [{"name": "sql", "source": "org/sql"}],
    }
)


def hop_pod() -> dict[str, Any]:
    (dep,) = [
        o
        for o in render_fleet(
            Owner("chat", "team-a", "1"), LORA_SPEC, plan(LORA_SPEC), FLEET
        ).objects()
        if o["kind"] == "Deployment"
        and o["metadata"]["labels"]["app.kubernetes.io/component"] == "router"
    ]
    template = copy.deepcopy(dep["spec"]["template"])
    return {
        "metadata": {"name": "p", "namespace": "team-a", "uid": "u2", **template["metadata"]},
        "spec": template["spec"],
    }


def test_a_router_pod_with_the_router_hop_is_admitted_and_nothing_more() -> None:
    assert router.is_router_pod(hop_pod())
    extra = hop_pod()
    extra["spec"]["containers"].append({"name": "x", "command": ["sh"], "image": "busybox"})
    assert not router.is_router_pod(extra)
    two_hops = hop_pod()
    two_hops["spec"]["containers"].append(copy.deepcopy(two_hops["spec"]["containers"][1]))
    assert not router.is_router_pod(two_hops)


def test_prepare_binds_the_hop_and_vllm_router_to_the_pod_ip_and_hands_the_hop_its_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(router, "router_venv", lambda: Path("/venvs/router"))
    kubeconfig = runner_kubeconfig(tmp_path, with_ca("https://127.0.0.1:6443"))
    out = router.prepare(hop_pod(), "127.17.0.9", FakeCore(), kubeconfig, tmp_path)  # type: ignore[arg-type]
    vllm_router, hop = out["spec"]["containers"]
    assert vllm_router["command"] == ["/venvs/router/bin/vllm-router"]
    assert vllm_router["args"][vllm_router["args"].index("--port") + 1] == "8001"
    assert vllm_router["args"][-4:] == ["--host", "127.17.0.9", "--prometheus-host", "127.17.0.9"]
    args = hop["args"]
    assert args[args.index("--host") + 1] == "127.17.0.9"
    assert args[args.index("--upstream-host") + 1] == "127.17.0.9"
    folder = Path(args[args.index("--service-account-dir") + 1])
    assert (folder / "token").read_text() == "tok-123"
    assert (folder / "ca.crt").read_bytes() == CA
    env = {e["name"]: e.get("value") for e in hop["env"]}
    assert (env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"]) == ("127.0.0.1", "6443")
    assert env["LLMFLEET_ADAPTERS"] == "sql"
    router.cleanup(tmp_path, "u2")
    assert not folder.exists()
