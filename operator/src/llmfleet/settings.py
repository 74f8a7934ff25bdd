"""The operator's settings, defined once: each field of `OperatorSettings` carries its default,
its `llmfleet run` flag, its environment variable and its help. `llmfleet run`'s command line is
generated from them (commands/run.py), and so is the table of settings in docs/operator.md
(`markdown_table`; a unit test keeps the page true). A flag wins over its variable, the variable
over the default; an empty variable counts as unset. What the settings say about the rendered
objects travels as one `FleetDefaults` (`OperatorSettings.fleet`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from llmfleet import setting_values as values
from llmfleet.catalog.hub import DEFAULT_ENDPOINT
from llmfleet.models.defaults import (
    DEFAULT_ENGINE_IMAGE,
    DEFAULT_FETCHER_IMAGE,
    DEFAULT_ROUTER_HOP_IMAGE,
)
from llmfleet.models.network_policy import EngineNetworkPolicy
from llmfleet.render.fleet_defaults import FleetDefaults

_KEY = "llmfleet.setting"
# Where docs/operator.md holds the table `markdown_table` writes.
TABLE_START = "<!-- settings-table: generated from operator/src/llmfleet/settings.py -->\n"
TABLE_END = "<!-- /settings-table -->\n"


@dataclass(frozen=True)
class Setting:
    """How one field of `OperatorSettings` is given."""

    flag: str
    env: str
    help: str
    # str -> value; raises argparse.ArgumentTypeError naming what it takes. None: not given.
    parse: Callable[[str], Any] = str
    short: str = ""
    choices: tuple[str, ...] = ()
    # The flag repeats; the variable is comma-separated.
    repeatable: bool = False
    # --x and --no-x; the variable is one of TRUE or FALSE.
    switch: bool = False
    # How --help and the docs show a default that is empty, or computed.
    shown_default: str = ""
    # Computes the value when neither flag nor variable gives one (the default then is unused).
    fallback: Callable[[], Any] | None = None

    @property
    def flags(self) -> list[str]:
        return [self.short, self.flag] if self.short else [self.flag]

    @property
    def meaning(self) -> str:
        """The help, with what the flag and the variable take."""
        text = self.help
        if self.choices:
            text += f"; one of {', '.join(self.choices)}"
        if self.repeatable:
            text += "; the flag repeats, the variable is comma-separated"
        if self.switch:
            text += f"; the variable is one of {', '.join(values.TRUE + values.FALSE)}"
        return text

    def show(self, default: Any) -> str:
        if self.shown_default:
            return self.shown_default
        if isinstance(default, bool):
            return "on" if default else "off"
        if isinstance(default, float):
            return f"{default:g}"
        return str(default)


def _about(flag: str, env: str, help: str, **how: Any) -> dict[str, Setting]:
    return {_KEY: Setting(flag, env, help, **how)}


@dataclass(frozen=True)
class OperatorSettings:
    namespaces: tuple[str, ...] = field(
        default=(),
        metadata=_about(
            "--namespace",
            "LLMFLEET_NAMESPACES",
            "watch only this namespace",
            short="-n",
            repeatable=True,
            shown_default="all namespaces",
        ),
    )
    liveness: str = field(
        default="http://0.0.0.0:8080/healthz",
        metadata=_about(
            "--liveness",
            "LLMFLEET_LIVENESS",
            "URL of the health endpoint (/healthz: the leader election, the operator's loops "
            "and kopf); an empty flag disables it",
        ),
    )
    metrics_port: int = field(
        default=9090,
        metadata=_about(
            "--metrics-port",
            "LLMFLEET_METRICS_PORT",
            "port of the Prometheus metrics endpoint; 0 disables it",
            parse=values.number(int),
        ),
    )
    metrics_host: str = field(
        default="0.0.0.0",
        metadata=_about(
            "--metrics-host", "LLMFLEET_METRICS_HOST", "address the metrics endpoint binds to"
        ),
    )
    log_level: str = field(
        default="INFO",
        metadata=_about(
            "--log-level",
            "LLMFLEET_LOG_LEVEL",
            "log level",
            parse=values.log_level,
            choices=values.LOG_LEVELS,
        ),
    )
    leader_election: bool = field(
        default=True,
        metadata=_about(
            "--leader-election",
            "LLMFLEET_LEADER_ELECTION",
            "write only while holding the leader Lease, so several replicas never write at "
            "once; --no-leader-election writes at once",
            switch=True,
        ),
    )
    leader_election_namespace: str = field(
        default="",
        metadata=_about(
            "--leader-election-namespace",
            "POD_NAMESPACE",
            "namespace of the leader Lease",
            shown_default="the pod's own namespace",
            fallback=values.in_cluster_namespace,
        ),
    )
    leader_election_id: str = field(
        default="llmfleet-operator",
        metadata=_about(
            "--leader-election-id",
            "LLMFLEET_LEADER_ELECTION_ID",
            "name of the leader Lease; replicas of one installation share it",
        ),
    )
    lease_duration: float = field(
        default=15.0,
        metadata=_about(
            "--lease-duration",
            "LLMFLEET_LEASE_DURATION",
            "seconds a leader that stopped renewing keeps the Lease; a standby takes over that "
            "long after the last renewal it saw",
            parse=values.number(float),
        ),
    )
    renew_deadline: float = field(
        default=10.0,
        metadata=_about(
            "--renew-deadline",
            "LLMFLEET_RENEW_DEADLINE",
            "seconds after its last renewal began that the leader stops writing, gives up the "
            "Lease and exits; below --lease-duration by more than --retry-period (one API "
            "call's timeout)",
            parse=values.number(float),
        ),
    )
    retry_period: float = field(
        default=2.0,
        metadata=_about(
            "--retry-period",
            "LLMFLEET_RETRY_PERIOD",
            "seconds between tries to acquire or renew the Lease, and the timeout of each of "
            "the leader's writes",
            parse=values.number(float),
        ),
    )
    resync_seconds: float = field(
        default=60.0,
        metadata=_about(
            "--resync-seconds",
            "LLMFLEET_RESYNC_SECONDS",
            "how often every resource is re-checked for drift",
            parse=values.number(float),
        ),
    )
    gpu_profiles: Path | None = field(
        default=None,
        metadata=_about(
            "--gpu-profiles",
            "LLMFLEET_GPU_PROFILES",
            "YAML file of GPU product profiles LLMDeployments may refer to by name",
            parse=Path,
            shown_default="the built-in profiles",
        ),
    )
    default_engine_image: str = field(
        default=DEFAULT_ENGINE_IMAGE,
        metadata=_about(
            "--default-engine-image",
            "LLMFLEET_DEFAULT_ENGINE_IMAGE",
            "vLLM image of LLMDeployments whose spec.engine.image is unset",
            parse=values.or_default(str),
        ),
    )
    adapter_fetcher_image: str = field(
        default=DEFAULT_FETCHER_IMAGE,
        metadata=_about(
            "--adapter-fetcher-image",
            "LLMFLEET_ADAPTER_FETCHER_IMAGE",
            "image of the adapter fetcher beside LoRA engines, which copies s3://, gs:// and "
            "revisioned Hub adapters for them: the operator's image under the fetcher's own "
            "version, which changes only when the fetcher does",
            parse=values.or_default(str),
        ),
    )
    router_hop_image: str = field(
        default=DEFAULT_ROUTER_HOP_IMAGE,
        metadata=_about(
            "--router-hop-image",
            "LLMFLEET_ROUTER_HOP_IMAGE",
            "image of the router hop in every router pod, which holds a request until the "
            "engines have room for it and sends a request for an adapter only to engines serving "
            "it: the operator's image under the hop's own version, which changes only when the "
            "hop does",
            parse=values.or_default(str),
        ),
    )
    fetcher_key_secret: str = field(
        default="llmfleet-fetcher-key",
        metadata=_about(
            "--fetcher-key-secret",
            "LLMFLEET_FETCHER_KEY_SECRET",
            "Secret in --leader-election-namespace that holds the operator's key for the "
            "adapter fetchers' tokens, created if missing; replicas of one installation share "
            "it. Without that namespace the key is the process's own",
        ),
    )
    engine_network_policy: EngineNetworkPolicy | None = field(
        default=None,
        metadata=_about(
            "--engine-network-policy",
            "LLMFLEET_ENGINE_NETWORK_POLICY",
            "JSON {scrapers, operator, clients: [NetworkPolicyPeer]}: render a NetworkPolicy "
            "per LLMDeployment that admits only its router, these scrapers and the operator to "
            "the engines",
            parse=values.network_policy,
            shown_default="none",
        ),
    )
    keda_prometheus_url: str = field(
        default="",
        metadata=_about(
            "--keda-prometheus-url",
            "LLMFLEET_KEDA_PROMETHEUS_URL",
            "URL of the Prometheus that scrapes the engines and routers, which KEDA queries to "
            "scale LLMDeployments with autoscaling.minReplicas 0 to zero and back",
            parse=values.http_url("http://prometheus-operated.monitoring.svc:9090"),
            shown_default="none, and such LLMDeployments are refused",
        ),
    )
    hf_endpoint: str = field(
        default=DEFAULT_ENDPOINT,
        metadata=_about(
            "--hf-endpoint",
            "HF_ENDPOINT",
            "Hugging Face Hub, or a mirror of it, to read config.json from for models neither "
            "spec.model.architecture nor the built-in catalog describes",
            parse=values.or_default(values.http_url(DEFAULT_ENDPOINT)),
        ),
    )
    spare_priority_class: str = field(
        default="",
        metadata=_about(
            "--spare-priority-class",
            "LLMFLEET_SPARE_PRIORITY_CLASS",
            "PriorityClass of the pods of LLMBatchJobs with spec.priority Spare",
            parse=values.priority_class,
            shown_default="none, and such jobs wait, reported",
        ),
    )
    engine_priority_class: str = field(
        default="",
        metadata=_about(
            "--engine-priority-class",
            "LLMFLEET_ENGINE_PRIORITY_CLASS",
            "PriorityClass of LLMDeployments' engine pods; changing it restarts every engine once",
            parse=values.priority_class,
            shown_default="none, the cluster's default priority",
        ),
    )
    kubeconfig: str | None = field(
        default=None,
        metadata=_about(
            "--kubeconfig",
            "KUBECONFIG",
            "kubeconfig to use outside a cluster",
            shown_default="the in-cluster config",
        ),
    )

    @property
    def fleet(self) -> FleetDefaults:
        """What these settings say about the objects the operator renders."""
        return FleetDefaults(
            engine_image=self.default_engine_image,
            fetcher_image=self.adapter_fetcher_image,
            router_hop_image=self.router_hop_image,
            engine_priority_class=self.engine_priority_class,
            spare_priority_class=self.spare_priority_class,
            network_policy=self.engine_network_policy,
            keda_prometheus_url=self.keda_prometheus_url,
        )


def settings() -> list[tuple[str, Setting, Any]]:
    """(field name, how it is given, default) of every setting, in the definition's order."""
    return [(f.name, f.metadata[_KEY], f.default) for f in fields(OperatorSettings)]


def from_environment(how: Setting, environ: Mapping[str, str]) -> Any:
    """The value the setting's variable gives, or None when unset or empty. A value the
    setting does not take stops the operator with one line naming the variable."""
    text = environ.get(how.env, "")
    if not text:
        return None
    try:
        if how.repeatable:
            return tuple(how.parse(part) for part in text.split(",") if part)
        return values.switch(text) if how.switch else how.parse(text)
    except argparse.ArgumentTypeError as e:
        raise SystemExit(f"llmfleet run: env {how.env} ({how.flag}): {e}") from None


def markdown_table() -> str:
    """The table of settings docs/operator.md shows."""
    rows = [
        "| Flag | Environment variable | Default | What it sets |",
        "| --- | --- | --- | --- |",
    ]
    for _, how, default in settings():
        names = [*how.flags, f"--no-{how.flag[2:]}"] if how.switch else how.flags
        flag = ", ".join(f"`{name}`" for name in names)
        default_text = how.show(default)
        shown = default_text if how.shown_default else f"`{default_text}`"
        meaning = how.meaning.replace("|", "\\|")
        rows.append(f"| {flag} | `{how.env}` | {shown} | {meaning} |")
    return "\n".join(rows) + "\n"


def with_table(page: str) -> str:
    """`page` with the table between its markers written anew."""
    head, rest = page.split(TABLE_START, 1)
    _, tail = rest.split(TABLE_END, 1)
    return head + TABLE_START + markdown_table() + TABLE_END + tail


if __name__ == "__main__":  # make settings-table
    for name in sys.argv[1:]:
        page = Path(name)
        page.write_text(with_table(page.read_text()))
