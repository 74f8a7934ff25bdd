"""Certificates for the local control plane, made with the openssl CLI (EC keys: fast to make)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

# The Service ClusterIP of `kubernetes.default` is data only (never dialled), but clients that
# verify the serving cert against it expect it in the SAN list.
APISERVER_SANS = (
    "IP:127.0.0.1",
    "IP:10.96.0.1",
    "DNS:localhost",
    "DNS:kubernetes",
    "DNS:kubernetes.default",
    "DNS:kubernetes.default.svc",
    "DNS:kubernetes.default.svc.cluster.local",
)


@dataclass(frozen=True)
class Client:
    name: str  # file stem
    common_name: str  # the Kubernetes user
    organization: str = ""  # the Kubernetes group


# Each component gets its own identity so RBAC applies to it as in a real cluster.
CLIENTS = (
    Client("admin", "llmfleet-admin", "system:masters"),
    Client("controller-manager", "system:kube-controller-manager"),
    Client("scheduler", "system:kube-scheduler"),
    Client("kwok", "kwok-controller", "system:masters"),
    Client("node-runner", "llmfleet-node-runner", "system:masters"),
    # The operator under test; its permissions come from the chart's RBAC, bound by the tests.
    Client("operator", "llmfleet-operator"),
    # The LeaderWorkerSet controller, with the ClusterRoles upstream ships (lws.py, bound by
    # lws_addon.py to this user).
    Client("lws-controller", "lws-controller-manager"),
    # KEDA's operator and metrics adapter (keda.py), each bound by keda_addon.py to what
    # upstream's single ServiceAccount `keda-operator` gets.
    Client("keda-operator", "keda-operator"),
    Client("keda-metrics-apiserver", "keda-metrics-apiserver"),
)


@dataclass(frozen=True)
class Server:
    stem: str  # file stem
    common_name: str
    sans: tuple[str, ...]
    usage: str = "serverAuth"  # extendedKeyUsage


# Serving certificates of what the API server calls back: the LeaderWorkerSet webhooks, which it
# dials at https://127.0.0.1:<port> and verifies against ca.crt (their caBundle), and KEDA's
# metrics adapter. The aggregator verifies the adapter against its Service's name
# (<service>.<namespace>.svc) though it dials 127.0.0.1; KEDA's operator and adapter also use this
# certificate for their gRPC link, each side presenting it to the other (mutual TLS against
# ca.crt, as upstream's one generated certificate serves both), hence clientAuth too.
SERVERS = (
    Server("lws-webhook", "lws-webhook", ("IP:127.0.0.1", "DNS:localhost")),
    Server(
        "keda",
        "keda-metrics-apiserver.keda.svc",
        (
            "IP:127.0.0.1",
            "DNS:localhost",
            "DNS:keda-metrics-apiserver.keda.svc",
            "DNS:keda-operator.keda.svc",
        ),
        usage="serverAuth,clientAuth",
    ),
)
CLIENT_EXT = "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n"


def _run(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _key(path: Path) -> None:
    _run("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(path))


def _ca(d: Path, stem: str, cn: str) -> None:
    _key(d / f"{stem}.key")
    _run(
        "req",
        "-x509",
        "-new",
        "-key",
        str(d / f"{stem}.key"),
        "-subj",
        f"/CN={cn}",
        "-days",
        "3650",
        "-out",
        str(d / f"{stem}.crt"),
    )


def _signed(d: Path, ca: str, stem: str, subj: str, ext: str) -> None:
    _key(d / f"{stem}.key")
    csr = d / f"{stem}.csr"
    extfile = d / f"{stem}.ext"
    extfile.write_text(ext)
    _run("req", "-new", "-key", str(d / f"{stem}.key"), "-subj", subj, "-out", str(csr))
    _run(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(d / f"{ca}.crt"),
        "-CAkey",
        str(d / f"{ca}.key"),
        "-CAcreateserial",
        "-days",
        "3650",
        "-extfile",
        str(extfile),
        "-out",
        str(d / f"{stem}.crt"),
    )
    csr.unlink()
    extfile.unlink()


def ensure(d: Path) -> None:
    """Create every key and certificate under `d` once; later calls reuse them and make only
    the certificates of CLIENTS and SERVERS that a state directory made before them lacks."""
    if not (d / "complete").exists():
        _ensure_core(d)
    for c in CLIENTS:
        if not (d / f"{c.name}.crt").exists():
            subj = f"/CN={c.common_name}" + (f"/O={c.organization}" if c.organization else "")
            _signed(d, "ca", c.name, subj, CLIENT_EXT)
    for srv in SERVERS:
        if not (d / f"{srv.stem}.crt").exists():
            _signed(
                d,
                "ca",
                srv.stem,
                f"/CN={srv.common_name}",
                "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
                f"extendedKeyUsage={srv.usage}\nsubjectAltName=" + ",".join(srv.sans) + "\n",
            )


def _ensure_core(d: Path) -> None:
    """The CAs, the API server's certificates and the service-account key."""
    d.mkdir(parents=True, exist_ok=True)
    _ca(d, "ca", "llmfleet-local-ca")
    _ca(d, "front-proxy-ca", "llmfleet-local-front-proxy-ca")
    _signed(
        d,
        "ca",
        "apiserver",
        "/CN=kube-apiserver",
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\nsubjectAltName=" + ",".join(APISERVER_SANS) + "\n",
    )
    _signed(d, "front-proxy-ca", "front-proxy-client", "/CN=front-proxy-client", CLIENT_EXT)
    _key(d / "sa.key")
    _run("ec", "-in", str(d / "sa.key"), "-pubout", "-out", str(d / "sa.pub"))
    (d / "complete").write_text("")
