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
from llmfleet.models.profiles import DEFAULT_GPU_PROFILES, parse_gpu_profiles

if TYPE_CHECKING:
    from llmfleet.reconcile.controller import Controller


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


def api_client(kubeconfig: str | None) -> k8s.ApiClient:
    if kubeconfig:
        return k8s_config.new_client_from_config(config_file=kubeconfig)
    try:
        k8s_config.load_incluster_config()
    except k8s_config.ConfigException:
        k8s_config.load_kube_config()
    return k8s.ApiClient()


def llmdeployment_controller(cfg: OperatorConfig, api: k8s.ApiClient) -> Controller:
    """The LLMDeployment controller `cfg` describes."""
    from llmfleet.reconcile.controller import Controller

    profiles = (
        parse_gpu_profiles(cfg.gpu_profiles_path.read_text())
        if cfg.gpu_profiles_path
        else DEFAULT_GPU_PROFILES
    )
    return Controller(api, profiles, default_engine_image=cfg.default_engine_image)


def run_operator(cfg: OperatorConfig) -> None:
    from llmfleet import main
    from llmfleet.reconcile.resync import Resyncer

    if cfg.metrics_port:
        start_http_server(cfg.metrics_port, addr=cfg.metrics_host)
    main.install()
    controller = llmdeployment_controller(cfg, api_client(cfg.kubeconfig))
    # Level-based safety net: reverts drift nobody told us about and retries what failed.
    resyncer = Resyncer(
        "resync",
        lambda: controller.names(cfg.namespaces),
        controller.reconcile_by_name,
        cfg.resync_seconds,
    )
    resyncer.start()
    kopf.run(
        standalone=not cfg.peering_name,
        peering_name=cfg.peering_name or None,
        priority=cfg.priority,
        clusterwide=not cfg.namespaces,
        namespaces=cfg.namespaces,
        liveness_endpoint=cfg.liveness_endpoint or None,
        memo=kopf.Memo(controller=controller),
    )
    resyncer.stop()
