"""Router pods on the local node: the vLLM Router the operator renders in front of the engines
(operator/src/llmfleet/render/router.py) runs here for real, as `vllm-router` from a virtualenv
of its own (dev/dataplane/install-vllm-router.sh).

A router pod is admitted although it requests no GPU: it is identified by the operator's labels
(managed-by llmfleet, component router), no GPU request, and a single container whose command is
`vllm-router`. The adaptations (listed in adaptations.ADAPTATIONS, explained in
docs/cpu-adaptations.md):

* `vllm-router` -> the router virtualenv's `vllm-router`;
* `--host` and `--prometheus-host` (any value, or none) -> the pod IP;
* the router hop beside it (routerhop.py: in every router pod) is adapted there;
* identity: a pod gets its ServiceAccount token through a projected volume and the in-cluster
  config (KUBERNETES_SERVICE_HOST and the token file). Neither exists here, so the runner asks the
  TokenRequest API for a token of the pod's ServiceAccount, bound to the pod (it stops working
  when the pod is deleted), writes a kubeconfig with it and the cluster's CA, and sets KUBECONFIG,
  which the router's Kubernetes client reads before the in-cluster config. Discovery therefore
  runs with exactly the rights of the Role the operator rendered.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from . import routerhop
from .gpurequest import container_gpus

ROUTER_COMMAND = "vllm-router"
COMPONENT_LABEL = "app.kubernetes.io/component"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
INSTALL = Path(__file__).resolve().parents[2] / "dataplane" / "install-vllm-router.sh"
TOKEN_SECONDS = 24 * 3600
_HOST_FLAGS = ("--host", "--prometheus-host")

_venv_lock = threading.Lock()
_venv: list[Path] = []


def _is_router_container(container: dict[str, Any]) -> bool:
    return Path((container.get("command") or [""])[0]).name == ROUTER_COMMAND


def is_router_pod(pod: dict[str, Any]) -> bool:
    """One `vllm-router` container, and beside it at most the router hop (routerhop.py)."""
    labels = pod["metadata"].get("labels") or {}
    containers = pod["spec"].get("containers") or []
    routers = [c for c in containers if _is_router_container(c)]
    hops = [c for c in containers if routerhop.is_hop_container(c)]
    return (
        labels.get(MANAGED_BY_LABEL) == "llmfleet"
        and labels.get(COMPONENT_LABEL) == "router"
        and len(routers) == 1
        and len(hops) <= 1
        and len(containers) == len(routers) + len(hops)
        and all(container_gpus(c) == 0 for c in containers)
    )


def router_venv() -> Path:
    """The router's virtualenv (installed on first use: ~25 s, once)."""
    with _venv_lock:
        if not _venv:
            out = subprocess.run([str(INSTALL)], check=True, capture_output=True, text=True)
            _venv.append(Path(out.stdout.strip().splitlines()[-1]))
        return _venv[0]


def adapt_args(args: list[str], pod_ip: str) -> list[str]:
    """`--host`/`--prometheus-host` -> the pod IP (added when absent: the router's defaults are
    127.0.0.1, which every router on this machine would share)."""
    out: list[str] = []
    i = 0
    while i < len(args):
        name, eq, _ = args[i].partition("=")
        if name in _HOST_FLAGS:
            i += 1 if eq else 2
            continue
        out.append(args[i])
        i += 1
    for f in _HOST_FLAGS:
        out += [f, pod_ip]
    return out


def bound_token(
    core: client.CoreV1Api, pod: Mapping[str, Any], seconds: int, audience: str | None = None
) -> str:
    """A token of the pod's ServiceAccount from the TokenRequest API, bound to the pod (invalid
    once the pod is deleted), as a kubelet asks for one."""
    meta = pod["metadata"]
    account = pod["spec"].get("serviceAccountName") or "default"
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(
            audiences=[audience] if audience else [],
            expiration_seconds=seconds,
            bound_object_ref=client.V1BoundObjectReference(
                api_version="v1", kind="Pod", name=meta["name"], uid=meta["uid"]
            ),
        )
    )
    got = core.create_namespaced_service_account_token(account, meta["namespace"], request)
    token: str = got.status.token
    return token


def runner_cluster(runner_kubeconfig: Path) -> dict[str, Any]:
    """The cluster entry (server, CA) of the runner's own kubeconfig."""
    base = yaml.safe_load(runner_kubeconfig.read_text())
    context = base["contexts"][0]["context"]
    cluster: dict[str, Any] = next(c for c in base["clusters"] if c["name"] == context["cluster"])
    return cluster


def token_kubeconfig(
    token: str, cluster: dict[str, Any], pod: dict[str, Any], state_dir: Path
) -> Path:
    """A kubeconfig for the pod's ServiceAccount, with a token bound to the pod."""
    meta = pod["metadata"]
    account = pod["spec"].get("serviceAccountName") or "default"
    user = f"system:serviceaccount:{meta['namespace']}:{account}"
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {
                "name": "pod",
                "context": {
                    "cluster": cluster["name"],
                    "user": user,
                    "namespace": meta["namespace"],
                },
            }
        ],
        "current-context": "pod",
    }
    path = state_dir / "router-tokens" / f"{meta['uid']}.kubeconfig"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump(cfg, sort_keys=True))
    return path


def prepare(
    pod: dict[str, Any],
    pod_ip: str,
    core: client.CoreV1Api,
    runner_kubeconfig: Path,
    state_dir: Path,
) -> dict[str, Any]:
    """The pod as the runner runs it: a copy with the adaptations above applied."""
    out = copy.deepcopy(pod)
    token = bound_token(core, pod, TOKEN_SECONDS)
    cluster = runner_cluster(runner_kubeconfig)
    for container in out["spec"]["containers"]:
        if routerhop.is_hop_container(container):
            uid = pod["metadata"]["uid"]
            folder, api = routerhop.write_account(state_dir, uid, token, cluster)
            routerhop.adapt_hop(container, pod_ip, folder, api)
            continue
        container["command"] = [
            str(router_venv() / "bin" / ROUTER_COMMAND),
            *container["command"][1:],
        ]
        container["args"] = adapt_args(list(container.get("args") or []), pod_ip)
        kubeconfig = token_kubeconfig(token, cluster, pod, state_dir)
        env = [e for e in container.get("env") or [] if e.get("name") != "KUBECONFIG"]
        container["env"] = [*env, {"name": "KUBECONFIG", "value": str(kubeconfig)}]
    return out


def cleanup(state_dir: Path, uid: str) -> None:
    (state_dir / "router-tokens" / f"{uid}.kubeconfig").unlink(missing_ok=True)
    shutil.rmtree(routerhop.account_dir(state_dir, uid), ignore_errors=True)
