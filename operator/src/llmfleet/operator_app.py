"""Start-up of the operator process: Kubernetes client, metrics and health endpoints, the watches,
then, once this replica leads (leader election on a Lease), the writers and kopf."""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import kopf
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from prometheus_client import start_http_server

from llmfleet.catalog.gpu_profiles import DEFAULT_GPU_PROFILES, parse_gpu_profiles
from llmfleet.health import HealthServer, kopf_check
from llmfleet.settings import OperatorSettings

CONNECTIONS = 32

if TYPE_CHECKING:
    from llmfleet.reconcile.llmdeployment.fetcher_token import KeySecret
    from llmfleet.reconcile.machinery.leader import LeaderElectionConfig, LeaderElector
    from llmfleet.reconcile.manager import Manager

log = logging.getLogger(__name__)


def api_client(kubeconfig: str | None) -> k8s.ApiClient:
    return k8s.ApiClient(api_config(kubeconfig))


def api_config(kubeconfig: str | None) -> k8s.Configuration:
    conf = k8s.Configuration()
    if kubeconfig:
        k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=conf)
    else:
        try:
            k8s_config.load_incluster_config(client_configuration=conf)
        except k8s_config.ConfigException:
            k8s_config.load_kube_config(client_configuration=conf)
    # The queues' workers reconcile side by side; urllib3's default (5 per CPU) would open and
    # discard a TLS connection for every request beyond it.
    conf.connection_pool_maxsize = CONNECTIONS
    return conf


def leader_election(cfg: OperatorSettings) -> LeaderElectionConfig | None:
    """The Lease's settings; None: this process writes from the start (one replica, outside a
    cluster, tests). A bad combination stops the operator naming the flags."""
    if not cfg.leader_election:
        return None
    from llmfleet.reconcile.machinery.leader import LeaderElectionConfig, default_identity

    if not cfg.leader_election_namespace:
        raise SystemExit(
            "llmfleet run: --leader-election-namespace is needed outside a pod (or env "
            "POD_NAMESPACE), or run a single replica with --no-leader-election"
        )
    try:
        return LeaderElectionConfig(
            namespace=cfg.leader_election_namespace,
            name=cfg.leader_election_id,
            identity=default_identity(os.environ.get("POD_NAME") or os.uname().nodename),
            lease_duration=cfg.lease_duration,
            renew_deadline=cfg.renew_deadline,
            retry_period=cfg.retry_period,
        )
    except ValueError as e:
        raise SystemExit(
            f"llmfleet run: --lease-duration, --renew-deadline, --retry-period: {e}"
        ) from None


def fetcher_key(cfg: OperatorSettings) -> KeySecret | None:
    """The operator's key for the adapter fetchers' tokens; None: one of this process's own."""
    from llmfleet.reconcile.llmdeployment.fetcher_token import KeySecret

    namespace = cfg.leader_election_namespace
    return KeySecret(namespace, cfg.fetcher_key_secret) if namespace else None


def manager(cfg: OperatorSettings, api: k8s.ApiClient) -> Manager:
    """The control loops that kopf's handlers feed, as `cfg` describes them."""
    from llmfleet.reconcile.manager import Manager

    profiles = (
        parse_gpu_profiles(cfg.gpu_profiles.read_text())
        if cfg.gpu_profiles
        else DEFAULT_GPU_PROFILES
    )
    return Manager(api, cfg, profiles, fetcher_key(cfg))


def run_operator(
    cfg: OperatorSettings,
    stop: threading.Event | None = None,
    registry: kopf.OperatorRegistry | None = None,
) -> None:
    """Run the operator until the process ends. `stop` and `registry` embed it in another
    process (the tests' API tier runs it on a thread): setting `stop` ends it as SIGTERM ends
    the process, a lost Lease sets `stop` instead of exiting, kopf's handlers go into `registry`
    (whose login handlers then say who the operator is), and it returns having stopped every
    thread and endpoint it started."""
    from llmfleet import main

    election = leader_election(cfg)
    metrics = (
        start_http_server(cfg.metrics_port, addr=cfg.metrics_host) if cfg.metrics_port else None
    )
    from llmfleet.reconcile.machinery.writegate import GatedApiClient, WriteGate

    main.install(registry)
    conf = api_config(cfg.kubeconfig)
    # The Lease's calls on a client of their own; every other write passes the elector's gate.
    elector = _elector(election, k8s.ApiClient(conf), stop.set if stop else _lost)
    running = manager(
        cfg, GatedApiClient(conf, elector.gate if elector else WriteGate.always_open())
    )
    # kopf's own endpoint, on loopback only: /healthz asks it, with the other checks.
    kopf_url = f"http://127.0.0.1:{_free_port()}/healthz"
    kopf_started: list[float] = []
    health = None
    if cfg.liveness:
        health = HealthServer(
            cfg.liveness,
            [
                *([elector.healthy] if elector else []),
                lambda: _loops(running),
                kopf_check(kopf_url, lambda: kopf_started[0] if kopf_started else None),
            ],
        )
        health.start()
    running.start_watching()
    try:
        if elector:
            elector.start()
            # Standing by: watching, writing nothing. SIGTERM ends the process here as it is.
            while not elector.wait_leading(timeout=1.0):
                if stop is not None and stop.is_set():
                    return
        running.start_writing()
        kopf_started.append(time.monotonic())
        kopf.run(
            standalone=True,
            clusterwide=not cfg.namespaces,
            namespaces=cfg.namespaces,
            liveness_endpoint=kopf_url,
            memo=kopf.Memo(manager=running),
            registry=registry,
            stop_flag=stop,
        )
    finally:
        # Every writer stops (or is shut out) before the Lease is handed over, so two never
        # overlap; the chart's terminationGracePeriodSeconds covers `shutdown_seconds`.
        running.stop()
        if elector:
            elector.release()
        if health:
            health.stop()
        if metrics:
            metrics[0].shutdown()
            metrics[0].server_close()


def _elector(
    election: LeaderElectionConfig | None, api: k8s.ApiClient, on_lost: Callable[[], None]
) -> LeaderElector | None:
    if election is None:
        return None
    from llmfleet.reconcile.machinery.leader import LeaderElector

    return LeaderElector(api, election, on_lost=on_lost)


def _lost() -> None:
    """The Lease is gone: stop writing at once, the way controller-runtime does (exit; the
    kubelet restarts the container, which then stands by)."""
    log.critical("leader Lease lost: exiting so that only the new leader writes")
    logging.shutdown()
    sys.stdout.flush()
    os._exit(1)


def _loops(running: Manager) -> tuple[bool, str]:
    dead = running.dead()
    if dead:
        return False, "ended: " + ", ".join(dead)
    return True, "loops running" + ("" if running.writing else " (watching only)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port
