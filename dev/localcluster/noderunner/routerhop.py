"""The router hop (llmfleet.routerhop) in a router pod (every router pod has one), as the
node runner runs it: a host process, like the vllm-router beside it, with the adaptations below
(listed in adaptations.ADAPTATIONS, explained in docs/cpu-adaptations.md).

* `python` -> the vLLM virtualenv's python, with the checkout's operator/src first on PYTHONPATH
  (the generic "python" and "pythonpath" adaptations: nothing here);
* `--host` and `--upstream-host` -> the pod IP: pods share the host's network here, each on a
  loopback address of its own, so the pod's "loopback" is its IP (vllm-router's `--host` moves
  there too, router.py);
* identity: no projected ServiceAccount volume and no KUBERNETES_SERVICE_HOST here. The runner
  writes the pod-bound token router.py asks for and the cluster's CA into a folder of the pod's
  (`--service-account-dir`), and sets KUBERNETES_SERVICE_HOST/PORT to the API server's address,
  so the hop reads pods with exactly the router's Role, as in a cluster.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

HOP_MODULE = "llmfleet.routerhop"
PYTHON_NAMES = ("python", "python3")
_POD_IP_FLAGS = ("--host", "--upstream-host")
ACCOUNT_DIR_FLAG = "--service-account-dir"


def is_hop_container(container: dict[str, Any]) -> bool:
    command = list(container.get("command") or [])
    return (
        len(command) == 3
        and Path(command[0]).name in PYTHON_NAMES
        and command[1:] == ["-m", HOP_MODULE]
    )


def adapt_hop_args(args: list[str], pod_ip: str, account_dir: Path) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(args):
        name, eq, _ = args[i].partition("=")
        if name in (*_POD_IP_FLAGS, ACCOUNT_DIR_FLAG):
            i += 1 if eq else 2
            continue
        out.append(args[i])
        i += 1
    for flag in _POD_IP_FLAGS:
        out += [flag, pod_ip]
    return [*out, ACCOUNT_DIR_FLAG, str(account_dir)]


def account_dir(state_dir: Path, uid: str) -> Path:
    return state_dir / "router-tokens" / uid


def write_account(
    state_dir: Path, uid: str, token: str, cluster: dict[str, Any]
) -> tuple[Path, dict[str, str]]:
    """The folder with the token and the CA, and the env that names the API server."""
    folder = account_dir(state_dir, uid)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    settings = cluster["cluster"]
    if "certificate-authority-data" in settings:
        ca = base64.b64decode(settings["certificate-authority-data"])
    elif "certificate-authority" in settings:
        ca = Path(settings["certificate-authority"]).read_bytes()
    else:
        # The hop verifies the API server as a pod does (its ca.crt); without one it cannot.
        raise ValueError(
            f"the node runner's kubeconfig cluster {cluster.get('name')!r} has neither "
            "certificate-authority-data nor certificate-authority: the router hop needs the "
            "cluster's CA"
        )
    (folder / "ca.crt").write_bytes(ca)
    token_file = folder / "token"
    token_file.touch(mode=0o600)
    token_file.write_text(token)
    server = urlsplit(settings["server"])
    env = {
        "KUBERNETES_SERVICE_HOST": str(server.hostname),
        "KUBERNETES_SERVICE_PORT": str(server.port or 443),
    }
    return folder, env


def adapt_hop(container: dict[str, Any], pod_ip: str, folder: Path, env: dict[str, str]) -> None:
    container["args"] = adapt_hop_args(list(container.get("args") or []), pod_ip, folder)
    kept = [e for e in container.get("env") or [] if e.get("name") not in env]
    container["env"] = [*kept, *({"name": k, "value": v} for k, v in sorted(env.items()))]
