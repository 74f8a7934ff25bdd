"""The local cluster's LeaderWorkerSet controller (sigs.k8s.io/lws, built by build-tools.sh with
its CRD, ClusterRoles and webhook configurations from the same module): what upstream's kustomize
install applies, pointed at 127.0.0.1, and the controller's command line.

Upstream runs the controller as a Deployment in `lws-system` behind the Service
`lws-webhook-service`, with internal certificate management: it writes a self-signed CA and
serving certificate into a Secret and patches that CA into the webhook configurations. Here it
is a process on 127.0.0.1 (lws_addon.py starts it): internal certificate management is
off, the webhook serving certificate comes from pki.py (signed by the cluster CA, which is every
webhook's caBundle), the webhook configurations call `https://127.0.0.1:<port><path>` instead of
the Service, and the controller authenticates with a client certificate of its own
(`lws-controller-manager`) bound to the ClusterRoles upstream ships. Leader election is off (one
replica; upstream's leader-election Role is not applied)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

CRD_NAME = "leaderworkersets.leaderworkerset.x-k8s.io"
API_GROUP = "leaderworkerset.x-k8s.io"
LABEL_PREFIX = "leaderworkerset.sigs.k8s.io"  # of the labels and annotations on its pods
USER = "lws-controller-manager"  # pki.py's client certificate CN
# Upstream's config/default kustomization names everything with this prefix.
PREFIX = "lws-"
# Every object below carries this label, so `kubectl get ... -l` finds what the cluster installed.
LABEL = {"app.kubernetes.io/part-of": "llmfleet-localcluster-lws"}


def crd_file(config: Path) -> Path:
    """Upstream's CRD (config/crd/bases), applied as it is: 1.2 MB of YAML that kubectl reads
    faster than PyYAML would. Upstream's kustomize adds a conversion webhook to it; the CRD has
    one version (v1), so the API server never converts and the patch is left out."""
    return config / "crd" / "leaderworkersets.yaml"


def rbac(config: Path, user: str = USER) -> list[dict[str, Any]]:
    """The manager's ClusterRole (config/rbac/role.yaml) and the one its metrics endpoint needs to
    authenticate and authorize scrapers (auth_proxy_role.yaml), bound to `user`."""
    docs: list[dict[str, Any]] = []
    for stem, binding in (
        ("role", "manager-rolebinding"),
        ("auth_proxy_role", "proxy-rolebinding"),
    ):
        for role in _load_all(config / "rbac" / f"{stem}.yaml"):
            if role.get("kind") != "ClusterRole":
                raise ValueError(f"{stem}.yaml: expected a ClusterRole, got {role.get('kind')}")
            role["metadata"]["name"] = PREFIX + role["metadata"]["name"]
            role["metadata"]["labels"] = {**role["metadata"].get("labels", {}), **LABEL}
            docs.append(role)
            docs.append(
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRoleBinding",
                    "metadata": {"name": PREFIX + binding, "labels": dict(LABEL)},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": role["metadata"]["name"],
                    },
                    "subjects": [
                        {
                            "apiGroup": "rbac.authorization.k8s.io",
                            "kind": "User",
                            "name": user,
                        }
                    ],
                }
            )
    return docs


def webhook_configurations(config: Path, base_url: str, ca_bundle: str) -> list[dict[str, Any]]:
    """Upstream's Mutating- and ValidatingWebhookConfiguration (config/webhook/manifests.yaml)
    with its kustomize patches (which scope the pod webhooks to pods labelled
    leaderworkerset.sigs.k8s.io/name), each webhook calling `base_url` + its path and trusting
    `ca_bundle` (base64 PEM)."""
    patches = {
        "MutatingWebhookConfiguration": config / "webhook" / "mutating-patch.yaml",
        "ValidatingWebhookConfiguration": config / "webhook" / "validating-patch.yaml",
    }
    docs = []
    for doc in _load_all(config / "webhook" / "manifests.yaml"):
        ops = yaml.safe_load(patches[doc["kind"]].read_text())
        patched = _json_patch(doc, ops)
        patched["metadata"]["name"] = PREFIX + patched["metadata"]["name"]
        patched["metadata"]["labels"] = dict(LABEL)
        for hook in patched["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": base_url + path, "caBundle": ca_bundle}
        docs.append(patched)
    return docs


def webhook_names(config: Path) -> list[str]:
    """`kind/name` of the webhook configurations, for kubectl."""
    return [
        f"{d['kind'].lower()}/{PREFIX}{d['metadata']['name']}"
        for d in _load_all(config / "webhook" / "manifests.yaml")
    ]


def rbac_names(config: Path) -> list[str]:
    return [f"{d['kind'].lower()}/{d['metadata']['name']}" for d in rbac(config)]


def controller_config(webhook_port: int, cert_dir: Path, metrics: str, health: str) -> str:
    """The controller's Configuration (config.lws.x-k8s.io/v1alpha1, its --config file)."""
    cfg = {
        "apiVersion": "config.lws.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        # The certificates are ours (pki.py); the controller must not write a Secret nor patch
        # the caBundles.
        "internalCertManagement": {"enable": False},
        "webhook": {
            "host": "127.0.0.1",
            "port": webhook_port,
            "certDir": str(cert_dir),
        },
        # Served over TLS (a self-signed certificate made in memory), clients authenticated
        # and authorized through the API server (TokenReview, SubjectAccessReview).
        "metrics": {"bindAddress": metrics},
        "health": {"healthProbeBindAddress": health},
    }
    return yaml.safe_dump(cfg, sort_keys=False)


def command(binary: Path, kubeconfig: Path, config_file: Path) -> list[str]:
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--config={config_file}",
        # Also in the config file; the flag wins over it and over the flag's default (true).
        "--leader-elect=false",
        "--zap-devel=false",
        "--zap-encoder=console",
        "--zap-log-level=info",
        "--zap-time-encoding=iso8601",
    ]


def probe(namespace: str) -> list[dict[str, Any]]:
    """Objects whose server-side dry-run goes through every LWS webhook: a LeaderWorkerSet (its
    mutating and validating webhooks) and a worker pod as the worker StatefulSet makes them (the
    pod webhooks; the mutating one injects the LWS_* variables)."""
    lws = {
        "apiVersion": f"{API_GROUP}/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "llmfleet-probe", "namespace": namespace},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": 2,
                "workerTemplate": {
                    "spec": {"containers": [{"name": "main", "image": "registry.invalid/p:1"}]}
                },
            },
        },
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "llmfleet-probe-0-1",
            "namespace": namespace,
            "labels": {
                f"{LABEL_PREFIX}/name": "llmfleet-probe",
                f"{LABEL_PREFIX}/group-index": "0",
            },
            "annotations": {f"{LABEL_PREFIX}/size": "2"},
        },
        "spec": {"containers": [{"name": "main", "image": "registry.invalid/p:1"}]},
    }
    return [lws, pod]


def _load_all(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _json_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """The `replace` operations of an RFC 6902 patch, all upstream's webhook patches use."""
    out = copy.deepcopy(doc)
    for op in ops:
        if op.get("op") != "replace":
            raise ValueError(f"unsupported patch operation {op!r}")
        *parents, last = op["path"].lstrip("/").split("/")
        target: Any = out
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        if isinstance(target, list):
            target[int(last)] = op["value"]
        else:
            target[last] = op["value"]
    return out
