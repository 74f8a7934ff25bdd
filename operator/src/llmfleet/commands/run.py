"""`llmfleet run`: start the operator."""

from __future__ import annotations

import argparse
import logging
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from llmfleet.catalog.hub import DEFAULT_ENDPOINT
from llmfleet.models.defaults import DEFAULT_ENGINE_IMAGE, DEFAULT_FETCHER_IMAGE
from llmfleet.models.network_policy import EngineNetworkPolicy, parse_engine_network_policy
from llmfleet.models.refs import OBJECT_NAME_PATTERN

if TYPE_CHECKING:
    from llmfleet.operator_app import OperatorConfig
    from llmfleet.reconcile.llmdeployment.fetcher_token import KeySecret
    from llmfleet.reconcile.machinery.leader import LeaderElectionConfig

# Where Kubernetes mounts the pod's own namespace beside its ServiceAccount token.
NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


# The leader Lease's timings, in seconds: (flag, default, what it means).
_LEASE_TIMINGS = (
    (
        "--lease-duration",
        15.0,
        "seconds a leader that stopped renewing keeps the Lease; a standby takes over that long "
        "after the last renewal it saw",
    ),
    (
        "--renew-deadline",
        10.0,
        "seconds after its last renewal began that the leader stops writing, gives up the Lease "
        "and exits; below --lease-duration by more than --retry-period (one API call's timeout)",
    ),
    (
        "--retry-period",
        2.0,
        "seconds between tries to acquire or renew the Lease, and the timeout of each of the "
        "leader's writes",
    ),
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("run", help="run the operator (watches LLMDeployments and reconciles them)")
    env = os.environ.get
    p.add_argument(
        "-n",
        "--namespace",
        action="append",
        dest="namespaces",
        default=[n for n in env("LLMFLEET_NAMESPACES", "").split(",") if n],
        help="watch only this namespace (repeatable; env LLMFLEET_NAMESPACES, "
        "comma-separated); default: all namespaces",
    )
    p.add_argument(
        "--liveness",
        default=env("LLMFLEET_LIVENESS", "http://0.0.0.0:8080/healthz"),
        help="URL of the health endpoint (/healthz: the leader election, the operator's loops "
        "and kopf; default %(default)s); empty disables it",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        default=int(env("LLMFLEET_METRICS_PORT", "9090")),
        help="port of the Prometheus metrics endpoint; 0 disables it (default %(default)s)",
    )
    p.add_argument(
        "--metrics-host",
        default=env("LLMFLEET_METRICS_HOST", "0.0.0.0"),
        help="address the metrics endpoint binds to (default %(default)s)",
    )
    p.add_argument(
        "--log-level",
        default=env("LLMFLEET_LOG_LEVEL", "INFO"),
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log level (default %(default)s)",
    )
    p.add_argument(
        "--leader-election",
        action=argparse.BooleanOptionalAction,
        default=env("LLMFLEET_LEADER_ELECTION", "true").lower() not in ("0", "false", "no"),
        help="write only while holding the leader Lease, so several replicas never write at "
        "once (env LLMFLEET_LEADER_ELECTION; default on; --no-leader-election writes at once)",
    )
    p.add_argument(
        "--leader-election-namespace",
        default=env("POD_NAMESPACE") or _in_cluster_namespace(),
        help="namespace of the leader Lease (default: env POD_NAMESPACE, else the pod's own "
        "namespace)",
    )
    p.add_argument(
        "--leader-election-id",
        default=env("LLMFLEET_LEADER_ELECTION_ID", "llmfleet-operator"),
        help="name of the leader Lease; replicas of one installation share it (default "
        "%(default)s)",
    )
    for flag, default, meaning in _LEASE_TIMINGS:
        p.add_argument(flag, type=float, default=default, help=f"{meaning} (default %(default)s)")
    p.add_argument(
        "--resync-seconds",
        type=float,
        default=float(env("LLMFLEET_RESYNC_SECONDS", "60")),
        help="how often every resource is re-checked for drift (default %(default)s)",
    )
    p.add_argument(
        "--gpu-profiles",
        type=Path,
        default=env("LLMFLEET_GPU_PROFILES") or None,
        help="YAML file of GPU product profiles LLMDeployments may refer to by name",
    )
    p.add_argument(
        "--default-engine-image",
        default=env("LLMFLEET_DEFAULT_ENGINE_IMAGE") or DEFAULT_ENGINE_IMAGE,
        help="vLLM image of LLMDeployments whose spec.engine.image is unset (env "
        "LLMFLEET_DEFAULT_ENGINE_IMAGE; default %(default)s)",
    )
    p.add_argument(
        "--adapter-fetcher-image",
        default=env("LLMFLEET_ADAPTER_FETCHER_IMAGE") or DEFAULT_FETCHER_IMAGE,
        help="image of the adapter fetcher beside LoRA engines, which copies s3://, gs:// and "
        "revisioned Hub adapters for them: the operator's image under the fetcher's own version, "
        "which changes only when the fetcher does (env LLMFLEET_ADAPTER_FETCHER_IMAGE; default "
        "%(default)s)",
    )
    p.add_argument(
        "--fetcher-key-secret",
        default=env("LLMFLEET_FETCHER_KEY_SECRET", "llmfleet-fetcher-key"),
        help="Secret in --leader-election-namespace that holds the operator's key for the "
        "adapter fetchers' tokens, created if missing; replicas of one installation share it "
        "(env LLMFLEET_FETCHER_KEY_SECRET; default %(default)s). Without that namespace the key "
        "is the process's own",
    )
    p.add_argument(
        "--engine-network-policy",
        default=env("LLMFLEET_ENGINE_NETWORK_POLICY", ""),
        type=_network_policy,
        help="JSON {scrapers, operator, clients: [NetworkPolicyPeer]}: render a NetworkPolicy "
        "per LLMDeployment that admits only its router, these scrapers and the operator to the "
        "engines (env LLMFLEET_ENGINE_NETWORK_POLICY; default: none)",
    )
    p.add_argument(
        "--keda-prometheus-url",
        default=env("LLMFLEET_KEDA_PROMETHEUS_URL", ""),
        type=_prometheus_url,
        help="URL of the Prometheus that scrapes the engines and routers, which KEDA queries "
        "to scale LLMDeployments with autoscaling.minReplicas 0 to zero and back (env "
        "LLMFLEET_KEDA_PROMETHEUS_URL; default: none, and such LLMDeployments are refused)",
    )
    p.add_argument(
        "--hf-endpoint",
        default=env("HF_ENDPOINT") or DEFAULT_ENDPOINT,
        type=_hub_url,
        help="Hugging Face Hub, or a mirror of it, to read config.json from for models "
        "neither spec.model.architecture nor the built-in catalog describes (env HF_ENDPOINT; "
        f"default {DEFAULT_ENDPOINT})",
    )
    for pods, whose in (
        (
            "spare",
            "the pods of LLMBatchJobs with spec.priority Spare (default: none, and such "
            "jobs wait, reported)",
        ),
        (
            "engine",
            "LLMDeployments' engine pods (default: none, the cluster's default "
            "priority; changing it restarts every engine once)",
        ),
    ):
        variable = f"LLMFLEET_{pods.upper()}_PRIORITY_CLASS"
        p.add_argument(
            f"--{pods}-priority-class",
            default=env(variable, ""),
            type=_priority_class,
            help=f"PriorityClass of {whose}; env {variable}",
        )
    p.add_argument(
        "--kubeconfig",
        default=env("KUBECONFIG") or None,
        help="kubeconfig to use outside a cluster (default: in-cluster config)",
    )
    p.set_defaults(func=_run)


def _network_policy(text: str) -> EngineNetworkPolicy | None:
    """argparse type: a bad value stops the operator with one line naming the flag."""
    try:
        return parse_engine_network_policy(text)
    except (ValueError, TypeError) as e:  # pydantic's ValidationError is a ValueError
        raise argparse.ArgumentTypeError(f"not a valid engine NetworkPolicy: {e}") from None


def _priority_class(text: str) -> str:
    """argparse type: a PriorityClass name (a DNS subdomain) or nothing."""
    if text and (len(text) > 253 or not re.fullmatch(OBJECT_NAME_PATTERN, text)):
        raise argparse.ArgumentTypeError(f"not a PriorityClass name: {text!r}")
    return text


def _http_url(text: str, example: str) -> str:
    """argparse type: an http(s) URL or nothing."""
    if text and not re.fullmatch(r"https?://[^\s/]+(/\S*)?", text):
        raise argparse.ArgumentTypeError(
            f"not an http:// or https:// URL: {text!r} (e.g. {example})"
        )
    return text.rstrip("/")


def _prometheus_url(text: str) -> str:
    return _http_url(text, "http://prometheus-operated.monitoring.svc:9090")


def _hub_url(text: str) -> str:
    return _http_url(text, DEFAULT_ENDPOINT) or DEFAULT_ENDPOINT


def _run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args.log_level != "DEBUG":
        # kopf logs every handler success at INFO: one line per pod event of every fleet.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    if args.kubeconfig:
        # The kubernetes client reads KUBECONFIG once, when first imported; kopf's login uses it.
        os.environ["KUBECONFIG"] = args.kubeconfig
    from llmfleet.operator_app import run_operator

    run_operator(operator_config(args))
    return 0


def operator_config(args: argparse.Namespace) -> OperatorConfig:
    from llmfleet.operator_app import OperatorConfig

    return OperatorConfig(
        namespaces=tuple(args.namespaces),
        liveness_endpoint=args.liveness,
        metrics_host=args.metrics_host,
        metrics_port=args.metrics_port,
        leader_election=_leader_election(args),
        resync_seconds=args.resync_seconds,
        gpu_profiles_path=args.gpu_profiles,
        kubeconfig=args.kubeconfig,
        default_engine_image=args.default_engine_image,
        engine_network_policy=args.engine_network_policy,
        keda_prometheus_url=args.keda_prometheus_url,
        hf_endpoint=args.hf_endpoint,
        engine_priority_class=args.engine_priority_class,
        spare_priority_class=args.spare_priority_class,
        fetcher_image=args.adapter_fetcher_image,
        fetcher_key=_fetcher_key(args),
    )


def _fetcher_key(args: argparse.Namespace) -> KeySecret | None:
    from llmfleet.reconcile.llmdeployment.fetcher_token import KeySecret

    namespace = args.leader_election_namespace
    return KeySecret(namespace, args.fetcher_key_secret) if namespace else None


def _in_cluster_namespace() -> str:
    try:
        return NAMESPACE_FILE.read_text().strip()
    except OSError:
        return ""


def _leader_election(args: argparse.Namespace) -> LeaderElectionConfig | None:
    """The Lease settings; a bad combination stops the operator naming the flags."""
    if not args.leader_election:
        return None
    from llmfleet.reconcile.machinery.leader import LeaderElectionConfig, default_identity

    if not args.leader_election_namespace:
        raise SystemExit(
            "llmfleet run: --leader-election-namespace is needed outside a pod (or env "
            "POD_NAMESPACE), or run a single replica with --no-leader-election"
        )
    try:
        return LeaderElectionConfig(
            namespace=args.leader_election_namespace,
            name=args.leader_election_id,
            identity=default_identity(os.environ.get("POD_NAME") or os.uname().nodename),
            lease_duration=args.lease_duration,
            renew_deadline=args.renew_deadline,
            retry_period=args.retry_period,
        )
    except ValueError as e:
        raise SystemExit(
            f"llmfleet run: --lease-duration, --renew-deadline, --retry-period: {e}"
        ) from None
