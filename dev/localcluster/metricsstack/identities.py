"""Who the metrics stack's components are to the API server: a client certificate each, signed by
the cluster CA, the adapter's serving certificate, and a kubeconfig per component."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .names import ADAPTER_SERVICE, NAMESPACE


@dataclass(frozen=True)
class Identity:
    stem: str  # file stem under the stack's pki directory
    user: str  # the Kubernetes user (certificate CN)


PROMETHEUS = Identity("prometheus", "llmfleet-metrics:prometheus")
KSM = Identity("kube-state-metrics", "llmfleet-metrics:kube-state-metrics")
ADAPTER = Identity("prometheus-adapter", "llmfleet-metrics:prometheus-adapter")
IDENTITIES = (PROMETHEUS, KSM, ADAPTER)


# --- certificates -------------------------------------------------------------------------------


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _sign(ca_dir: Path, out: Path, stem: str, subject: str, ext: str) -> None:
    key, csr, extfile = out / f"{stem}.key", out / f"{stem}.csr", out / f"{stem}.ext"
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(key))
    _openssl("req", "-new", "-key", str(key), "-subj", subject, "-out", str(csr))
    extfile.write_text(ext)
    _openssl(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(ca_dir / "ca.crt"),
        "-CAkey",
        str(ca_dir / "ca.key"),
        "-CAcreateserial",
        "-days",
        "3650",
        "-extfile",
        str(extfile),
        "-out",
        str(out / f"{stem}.crt.tmp"),
    )
    (out / f"{stem}.crt.tmp").rename(out / f"{stem}.crt")
    csr.unlink()
    extfile.unlink()


def ensure_certs(ca_dir: Path, out: Path) -> None:
    """A client certificate per component and the adapter's serving certificate, signed by the
    cluster CA (so the aggregator can verify the adapter with the CA as caBundle)."""
    out.mkdir(parents=True, exist_ok=True)
    client = "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n"
    for ident in IDENTITIES:
        if not (out / f"{ident.stem}.crt").exists():
            _sign(ca_dir, out, ident.stem, f"/CN={ident.user}", client)
    if not (out / "adapter-serving.crt").exists():
        # The aggregator checks the name <service>.<namespace>.svc.
        sans = f"DNS:{ADAPTER_SERVICE}.{NAMESPACE}.svc,DNS:localhost,IP:127.0.0.1"
        _sign(
            ca_dir,
            out,
            "adapter-serving",
            f"/CN={ADAPTER_SERVICE}.{NAMESPACE}.svc",
            "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
            f"extendedKeyUsage=serverAuth\nsubjectAltName={sans}\n",
        )


def kubeconfig(server: str, ca: Path, pki: Path, ident: Identity) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "llmfleet-local",
                "cluster": {"server": server, "certificate-authority": str(ca)},
            }
        ],
        "users": [
            {
                "name": ident.stem,
                "user": {
                    "client-certificate": str(pki / f"{ident.stem}.crt"),
                    "client-key": str(pki / f"{ident.stem}.key"),
                },
            }
        ],
        "contexts": [
            {"name": "llmfleet-local", "context": {"cluster": "llmfleet-local", "user": ident.stem}}
        ],
        "current-context": "llmfleet-local",
    }
