"""The local cluster's client identities wired up: a kubeconfig per component (its client
certificate from pki.py, the cluster CA, the API server's URL), and the admin's TLS context for
the calls the supervisor makes itself."""

from __future__ import annotations

import ssl
from pathlib import Path

import yaml

ADMIN = "admin"  # its kubeconfig is also the cluster's <state dir>/kubeconfig


def path(state_dir: Path, name: str) -> Path:
    """Where the kubeconfig of the client `name` (a pki.CLIENTS name) is."""
    return state_dir / f"{name}.kubeconfig"


def write(state_dir: Path, pki_dir: Path, server: str, name: str) -> Path:
    """Write the kubeconfig of the client `name`, for the API server at `server`; the admin's
    also as <state dir>/kubeconfig. Returns its path."""
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "llmfleet-local",
                "cluster": {"server": server, "certificate-authority": str(pki_dir / "ca.crt")},
            }
        ],
        "users": [
            {
                "name": name,
                "user": {
                    "client-certificate": str(pki_dir / f"{name}.crt"),
                    "client-key": str(pki_dir / f"{name}.key"),
                },
            }
        ],
        "contexts": [
            {"name": "llmfleet-local", "context": {"cluster": "llmfleet-local", "user": name}}
        ],
        "current-context": "llmfleet-local",
    }
    text = yaml.safe_dump(cfg, sort_keys=True)
    out = path(state_dir, name)
    out.write_text(text)
    if name == ADMIN:
        (state_dir / "kubeconfig").write_text(text)
    return out


def admin_context(pki_dir: Path) -> ssl.SSLContext:
    """TLS as the admin: the API server verified against the cluster CA, the admin's client
    certificate presented."""
    ctx = ssl.create_default_context(cafile=str(pki_dir / "ca.crt"))
    ctx.load_cert_chain(str(pki_dir / f"{ADMIN}.crt"), str(pki_dir / f"{ADMIN}.key"))
    return ctx
