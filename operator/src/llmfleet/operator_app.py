"""Start-up of the operator process: Kubernetes client, metrics endpoint, then kopf."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import kopf
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from prometheus_client import start_http_server

from llmfleet.models import DEFAULT_ENGINE_IMAGE
from llmfleet.models.network_policy import EngineNetworkPolicy
from llmfleet.models.profiles import DEFAULT_GPU_PROFILES, parse_gpu_profiles

CONNECTIONS = 32

if TYPE_CHECKING:
    from llmfleet.reconcile.manager import Manager


@dataclass(frozen=True)
class OperatorConfig:
    namespaces: tuple[str, ...] = ()
    liveness_endpoint: str = "http://0.0.0.0:8080/healthz"
    metrics_host: str = "0.0.0.0"
    metrics_port: int = 9090
    peering_name: str = ""
    priority: int = 0
    resync_seconds: float = 60.0
    gpu_profiles_path: Path | None = None
    kubeconfig: str | None = None
    default_engine_image: str = DEFAULT_ENGINE_IMAGE
    engine_network_policy: EngineNetworkPolicy | None = None
    keda_prometheus_url: str = ""


def api_client(kubeconfig: str | None) -> k8s.ApiClient:
    conf = k8s.Configuration()
    if kubeconfig:
        k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=conf)
    else:
        try:
            k8s_config.load_incluster_config(client_configuration=conf)
        except k8s_config.ConfigException:
            k8s_config.load_kube_config(client_configuration=conf)
    # Reconciles on kopf's threads and the manager's run side by side; urllib3's default (5 per
    # CPU) would open and discard a TLS connection for every request beyond it.
    conf.connection_pool_maxsize = CONNECTIONS
    return k8s.ApiClient(conf)


def manager(cfg: OperatorConfig, api: k8s.ApiClient) -> Manager:
    """What reconciles beside kopf, as `cfg` describes it."""
    from llmfleet.reconcile.manager import Manager

    profiles = (
        parse_gpu_profiles(cfg.gpu_profiles_path.read_text())
        if cfg.gpu_profiles_path
        else DEFAULT_GPU_PROFILES
    )
    return Manager(
        api,
        profiles,
        default_engine_image=cfg.default_engine_image,
        network_policy=cfg.engine_network_policy,
        keda_prometheus_url=cfg.keda_prometheus_url,
        namespaces=cfg.namespaces,
        resync_seconds=cfg.resync_seconds,
    )


def run_operator(cfg: OperatorConfig) -> None:
    from llmfleet import main

    if cfg.metrics_port:
        start_http_server(cfg.metrics_port, addr=cfg.metrics_host)
    main.install()
    running = manager(cfg, api_client(cfg.kubeconfig))
    running.start()
    kopf.run(
        standalone=not cfg.peering_name,
        peering_name=cfg.peering_name or None,
        priority=cfg.priority,
        clusterwide=not cfg.namespaces,
        namespaces=cfg.namespaces,
        liveness_endpoint=cfg.liveness_endpoint or None,
        memo=kopf.Memo(manager=running),
    )
    running.stop()
