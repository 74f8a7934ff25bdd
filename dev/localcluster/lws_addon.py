"""LeaderWorkerSet (sigs.k8s.io/lws) as an add-on of the local cluster (addons.py): its CRD,
RBAC and webhook configurations (lws.py) and its controller, whose webhooks the API server calls
at https://127.0.0.1:<port> with a serving certificate from the cluster CA."""

from __future__ import annotations

import base64
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from . import lws
from .addons import AddOn
from .api import dump, json_stream
from .tools import bindir

CONTROLLER = "lws-controller"  # its pidfile, log and kubeconfig stem (and pki.py's client)


class LeaderWorkerSet(AddOn):
    name = "lws"
    title = "LeaderWorkerSet"
    env = "LLMFLEET_LWS"
    processes = (CONTROLLER,)
    groups = (lws.API_GROUP,)
    crd = lws.CRD_NAME
    # controller-runtime's webhook server reads tls.crt and tls.key from its certDir.
    certificates = (("certs/tls.crt", "lws-webhook.crt"), ("certs/tls.key", "lws-webhook.key"))
    timeout = 60

    def crd_files(self, config: Path) -> list[Path]:
        return [lws.crd_file(config)]

    def crd_names(self, config: Path) -> list[str]:
        return [lws.CRD_NAME]

    def manifests(self, config: Path) -> list[dict[str, Any]]:
        ca = base64.b64encode((self.cluster.pki_dir / "ca.crt").read_bytes()).decode()
        url = f"https://127.0.0.1:{self.cluster.ports.lws_webhook}"
        return [*lws.rbac(config), *lws.webhook_configurations(config, url, ca)]

    def launch(self, config: Path) -> None:
        p = self.cluster.ports
        cfg = self.home / "config.yaml"
        cfg.write_text(
            lws.controller_config(
                p.lws_webhook,
                self.home / "certs",
                f"127.0.0.1:{p.lws_metrics}",
                f"127.0.0.1:{p.lws_health}",
            )
        )
        binary = bindir(self.name) / "lws-controller-manager"
        self.cluster.procs.start(CONTROLLER, lws.command(binary, self.kubeconfig(CONTROLLER), cfg))

    def not_ready(self) -> str:
        """Whether a server-side dry run of a LeaderWorkerSet and of a worker pod passes the LWS
        webhooks, the pod coming back with LWS_LEADER_ADDRESS injected: the CRD is Established
        and the API server reaches the controller's webhooks and trusts them."""
        body = dump(lws.probe("default"))
        try:
            out = self.cluster.api.kubectl(
                "create", "--dry-run=server", "-o=json", "-f=-", input=body
            )
        except subprocess.CalledProcessError as e:
            return f"webhooks not serving: {(e.stderr or '').strip()}"
        pod = next(o for o in json_stream(out) if o["kind"] == "Pod")
        env = {e["name"] for e in pod["spec"]["containers"][0].get("env", [])}
        if "LWS_LEADER_ADDRESS" in env:
            return ""
        return f"the pod webhook injected no LWS_LEADER_ADDRESS: {sorted(env)}"

    def delete(self, config: Path) -> None:
        """Its webhook configurations, RBAC and CRD (and with it every LeaderWorkerSet; the
        garbage collector removes their StatefulSets)."""
        self.cluster.api.delete(
            *lws.webhook_names(config),
            *lws.rbac_names(config),
            f"customresourcedefinition/{lws.CRD_NAME}",
        )

    def wait_gone(self, timeout: float = 60) -> None:
        """Wait until a server-side dry run of a pod the LWS pod webhooks would take passes
        without them: the API server's webhook informer has seen the configurations go (with
        failurePolicy Fail and the controller stopped, a webhook it still knows refuses it)."""
        deadline = time.monotonic() + timeout
        pod = yaml.safe_dump(lws.probe("default")[1])
        while True:
            try:
                self.cluster.api.kubectl("create", "--dry-run=server", "-o=name", "-f=-", input=pod)
                return
            except subprocess.CalledProcessError as e:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"LeaderWorkerSet webhooks still called after {timeout}s: {e.stderr}"
                    ) from None
                time.sleep(0.1)
