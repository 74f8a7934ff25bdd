"""The command lines of the control plane's components: upstream's etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and kwok, and our kwok gate, each bound to 127.0.0.1."""

from __future__ import annotations

import sys
from pathlib import Path

from .ports import POD_CIDR, SERVICE_CIDR, Ports
from .tools import HERE, bindir

HPA_SYNC_PERIOD = "5s"  # shortened so scaling tests react quickly
UPSTREAM_HPA_SYNC_PERIOD = "15s"  # kube-controller-manager's default: what managed clusters run
KWOK_GATE = "kwok-gate"  # the kubelet's refusals for kwok's nodes (kwokgate.py)
# Their pidfile, log (and, but for etcd's and the API server's, kubeconfig) stems, in start order.
CONTROL_PLANE = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    KWOK_GATE,
)


def etcd(state_dir: Path, ports: Ports) -> list[str]:
    p = ports
    return [
        str(bindir("etcd") / "etcd"),
        "--name=local",
        f"--data-dir={state_dir / 'etcd'}",
        f"--listen-client-urls=http://127.0.0.1:{p.etcd_client}",
        f"--advertise-client-urls=http://127.0.0.1:{p.etcd_client}",
        f"--listen-peer-urls=http://127.0.0.1:{p.etcd_peer}",
        f"--initial-advertise-peer-urls=http://127.0.0.1:{p.etcd_peer}",
        f"--initial-cluster=local=http://127.0.0.1:{p.etcd_peer}",
        # A throwaway test store: durability buys nothing and fsync costs seconds per test.
        "--unsafe-no-fsync",
        "--quota-backend-bytes=4294967296",
        "--log-level=warn",
    ]


def apiserver(pki_dir: Path, ports: Ports, audit_log: Path) -> list[str]:
    k = pki_dir
    return [
        str(bindir("kubernetes") / "kube-apiserver"),
        f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={ports.apiserver}",
        f"--tls-cert-file={k / 'apiserver.crt'}",
        f"--tls-private-key-file={k / 'apiserver.key'}",
        f"--client-ca-file={k / 'ca.crt'}",
        f"--service-account-key-file={k / 'sa.pub'}",
        f"--service-account-signing-key-file={k / 'sa.key'}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--authorization-mode=RBAC",
        "--allow-privileged=true",
        # The aggregation layer (custom.metrics.k8s.io for the HPA) needs a front proxy.
        f"--requestheader-client-ca-file={k / 'front-proxy-ca.crt'}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-username-headers=X-Remote-User",
        f"--proxy-client-cert-file={k / 'front-proxy-client.crt'}",
        f"--proxy-client-key-file={k / 'front-proxy-client.key'}",
        "--enable-aggregator-routing=true",
        # Every write, with who made it: tests count the operator's API writes from here.
        f"--audit-policy-file={HERE / 'audit-policy.yaml'}",
        f"--audit-log-path={audit_log}",
        "--audit-log-format=json",
        "--audit-log-maxsize=200",
        "--audit-log-maxbackup=1",
        "--profiling=false",
        "--v=1",
    ]


def controller_manager(
    pki_dir: Path, kubeconfig: Path, ports: Ports, hpa_sync_period: str = HPA_SYNC_PERIOD
) -> list[str]:
    kc = str(kubeconfig)
    return [
        str(bindir("kubernetes") / "kube-controller-manager"),
        f"--kubeconfig={kc}",
        f"--authentication-kubeconfig={kc}",
        f"--authorization-kubeconfig={kc}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.controller_manager}",
        "--leader-elect=false",
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={pki_dir / 'sa.key'}",
        f"--root-ca-file={pki_dir / 'ca.crt'}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        # Every default controller (garbage collector, deployment, replicaset, job, HPA,
        # disruption, namespace, serviceaccount-token ...); no node IPAM: pod IPs are kwok's.
        "--controllers=*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller",
        f"--horizontal-pod-autoscaler-sync-period={hpa_sync_period}",
        "--profiling=false",
        "--v=1",
    ]


def scheduler(kubeconfig: Path, ports: Ports) -> list[str]:
    kc = str(kubeconfig)
    return [
        str(bindir("kubernetes") / "kube-scheduler"),
        f"--kubeconfig={kc}",
        f"--authentication-kubeconfig={kc}",
        f"--authorization-kubeconfig={kc}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.scheduler}",
        "--leader-elect=false",
        "--profiling=false",
        "--v=1",
    ]


def kwok(kubeconfig: Path, stages: Path, ports: Ports) -> list[str]:
    """`stages`: upstream's fast Stages, pod-ready gated on the kwok gate's admission
    (kwokgate.gated_stages)."""
    return [
        str(bindir("kwok") / "kwok"),
        f"--kubeconfig={kubeconfig}",
        f"--config={stages}",
        "--manage-all-nodes=false",
        "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
        f"--cidr={POD_CIDR}",
        "--node-ip=127.0.0.1",
        f"--server-address=127.0.0.1:{ports.kwok}",
    ]


def kwok_gate(kubeconfig: Path) -> tuple[list[str], dict[str, str]]:
    """The kwok gate's command line (kwokgate.py: the kubelet's refusals, a missing Secret or
    ConfigMap, for kwok's nodes) and what its environment needs besides ours."""
    cmd = [sys.executable, "-m", "localcluster.kwokgate", f"--kubeconfig={kubeconfig}"]
    return cmd, {"PYTHONPATH": str(HERE.parent)}
