"""The Helm chart renders, lints and refuses bad values, without a cluster (`helm template`)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from chartrbac import (
    EXPECTED_RULES,
    RBAC_KINDS,
    beside_the_operator_rules,
    granted,
    is_fetcher_key_rbac,
    is_lease_rbac,
)
from chartrender import (
    CHART,
    RELEASE,
    of_kind,
    operator_container,
    operator_deployment,
    refusal,
    render,
    run_helm,
)
from dashboards.promql import VLLM_WAITING

from llmfleet.cli import build_parser
from llmfleet.commands.run import settings_from_args
from llmfleet.reconcile.machinery.leader import LeaderElectionConfig
from llmfleet.reconcile.manager import DRAIN_SECONDS
from llmfleet.render.autoscaling import QUEUE_METRIC
from llmfleet.settings import OperatorSettings

MONITORING_API = "monitoring.coreos.com/v1"
MONITORING_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}


def walk(node: Any) -> Iterator[Any]:
    yield node
    if isinstance(node, dict):
        for key, value in node.items():
            yield key
            yield from walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from walk(item)


# --- lint -------------------------------------------------------------------------------------


@pytest.mark.parametrize("strict", [False, True], ids=["lint", "lint-strict"])
def test_helm_lint_is_clean(strict: bool) -> None:
    result = run_helm("lint", str(CHART), *(["--strict"] if strict else []))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout, result.stdout
    assert "[ERROR]" not in result.stdout, result.stdout


# --- what renders -----------------------------------------------------------------------------

SCENARIOS = {
    "defaults-watch-all-namespaces": (),
    "watch-listed-namespaces": ("watchNamespaces={team-a,team-b}",),
    "three-replicas": ("replicas=3",),
    "two-replicas-listed-namespaces": ("replicas=2", "watchNamespaces={team-a}"),
}


@pytest.mark.parametrize("set_args", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_renders_a_hardened_operator_deployment(set_args: tuple[str, ...]) -> None:
    docs = render(*set_args)
    deployment = operator_deployment(docs)
    pod = deployment["spec"]["template"]["spec"]
    container = operator_container(docs)

    assert container["command"] == ["llmfleet", "run"]
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert container["image"] == f"docker.io/llmfleet/operator:{app_version}"
    assert pod["automountServiceAccountToken"] is True
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert container["resources"] == {
        "requests": {"cpu": "100m", "memory": "256Mi"},
        "limits": {"memory": "1Gi"},
    }
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["tmp"] == "/tmp"
    assert "emptyDir" in volumes["tmp"]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"health": 8080, "metrics": 9090}
    assert "--liveness=http://0.0.0.0:8080/healthz" in container["args"]
    settings = operator_settings(container)
    assert settings.default_engine_image == "vllm/vllm-openai:v0.32.0"
    # LoRA engines' adapter fetcher: its own name and version, not the operator's tag.
    fetcher_version = chart_annotations()["llmfleet.dev/adapter-fetcher-version"]
    assert settings.adapter_fetcher_image == (
        f"docker.io/llmfleet/adapter-fetcher:{fetcher_version}"
    )


def operator_settings(container: dict[str, Any]) -> OperatorSettings:
    """The settings `llmfleet run` takes from the container's flags alone (the chart passes every
    setting as a flag)."""
    return settings_from_args(build_parser().parse_args(["run", *container["args"]]), environ={})


def chart_annotations() -> dict[str, str]:
    annotations: dict[str, str] = yaml.safe_load((CHART / "Chart.yaml").read_text())["annotations"]
    return annotations


FETCHER_DIGEST = "sha256:" + "b" * 64
FETCHER_IMAGE_CASES = {
    # The operator's own tag moves with every release; the fetcher's does not follow it.
    "operator-tag-moves": (("image.tag=9.9.9",), "docker.io/llmfleet/adapter-fetcher:{version}"),
    "mirrored": (
        ("adapterFetcher.image.repository=registry.example/llmfleet/adapter-fetcher",),
        "registry.example/llmfleet/adapter-fetcher:{version}",
    ),
    "pinned-tag": (("adapterFetcher.image.tag=v7",), "docker.io/llmfleet/adapter-fetcher:v7"),
    "pinned-digest": (
        (f"adapterFetcher.image.digest={FETCHER_DIGEST}", "adapterFetcher.image.tag=v7"),
        f"docker.io/llmfleet/adapter-fetcher@{FETCHER_DIGEST}",
    ),
}


@pytest.mark.parametrize(
    ("set_args", "image"), FETCHER_IMAGE_CASES.values(), ids=FETCHER_IMAGE_CASES.keys()
)
def test_the_adapter_fetcher_image_follows_its_own_values(
    set_args: tuple[str, ...], image: str
) -> None:
    settings = operator_settings(operator_container(render(*set_args)))
    version = chart_annotations()["llmfleet.dev/adapter-fetcher-version"]
    assert settings.adapter_fetcher_image == image.format(version=version)


HOP_IMAGE_CASES = {
    # The operator's own tag moves with every release; the hop's does not follow it.
    "operator-tag-moves": (("image.tag=9.9.9",), "docker.io/llmfleet/router-hop:{version}"),
    "mirrored": (
        ("routerHop.image.repository=registry.example/llmfleet/router-hop",),
        "registry.example/llmfleet/router-hop:{version}",
    ),
    "pinned-tag": (("routerHop.image.tag=v7",), "docker.io/llmfleet/router-hop:v7"),
    "pinned-digest": (
        (f"routerHop.image.digest={FETCHER_DIGEST}", "routerHop.image.tag=v7"),
        f"docker.io/llmfleet/router-hop@{FETCHER_DIGEST}",
    ),
}


@pytest.mark.parametrize(
    ("set_args", "image"), HOP_IMAGE_CASES.values(), ids=HOP_IMAGE_CASES.keys()
)
def test_the_router_hop_image_follows_its_own_values(set_args: tuple[str, ...], image: str) -> None:
    settings = operator_settings(operator_container(render(*set_args)))
    version = chart_annotations()["llmfleet.dev/router-hop-version"]
    assert settings.router_hop_image == image.format(version=version)


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("adapterFetcher.image.digest=latest", "digest"),
        ("adapterFetcher.image.repository=", "repository"),
        ("adapterFetcher.imag.tag=1", "imag"),
    ],
)
def test_bad_adapter_fetcher_values_are_refused_naming_them(value: str, named: str) -> None:
    result = run_helm("template", RELEASE, str(CHART), "--set", value)
    assert result.returncode != 0
    assert named in result.stderr, result.stderr


def test_args_follow_the_values() -> None:
    args = operator_container(render("logLevel=DEBUG", "resyncSeconds=30", "metrics.port=9191"))[
        "args"
    ]
    assert "--log-level=DEBUG" in args
    assert "--resync-seconds=30" in args
    assert "--metrics-port=9191" in args
    assert "--gpu-profiles=/etc/llmfleet/gpu-profiles.yaml" in args
    assert not [a for a in args if a.startswith("--namespace")]


def test_image_tag_and_digest_override_app_version() -> None:
    assert operator_container(render("image.tag=1.2.3"))["image"].endswith("operator:1.2.3")
    digest = "sha256:" + "a" * 64
    assert operator_container(render(f"image.digest={digest}"))["image"].endswith(f"@{digest}")


def test_gpu_profiles_configmap_is_mounted_with_the_default_products() -> None:
    docs = render()
    (configmap,) = [d for d in of_kind(docs, "ConfigMap") if "gpu-profiles.yaml" in d["data"]]
    profiles = yaml.safe_load(configmap["data"]["gpu-profiles.yaml"])
    assert {name: (p["memoryGiB"], p["perNode"], p["product"]) for name, p in profiles.items()} == {
        "h100-80gb": (80, 8, "NVIDIA-H100-80GB-HBM3"),
        "h200-141gb": (140, 8, "NVIDIA-H200"),
        "a100-80gb": (80, 8, "NVIDIA-A100-SXM4-80GB"),
        "a100-40gb": (40, 8, "NVIDIA-A100-SXM4-40GB"),
        "l40s": (48, 8, "NVIDIA-L40S"),
        "l4": (24, 8, "NVIDIA-L4"),
    }
    # Every default profile carries the performance model's constants (fp8 only where the GPU
    # has fp8 tensor cores), so the planner predicts speed on each of them.
    performance = ("hbmGBps", "bf16TFLOPS", "fp8TFLOPS", "interconnectGBps")
    assert {name: tuple(p.get(k) for k in performance) for name, p in profiles.items()} == {
        "h100-80gb": (3350, 989, 1979, 450),
        "h200-141gb": (4800, 989, 1979, 450),
        "a100-80gb": (2039, 312, None, 300),
        "a100-40gb": (1555, 312, None, 300),
        "l40s": (864, 362, 733, 32),
        "l4": (300, 121, 242, 32),
    }
    pod = operator_deployment(docs)["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if "configMap" in v]
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    mounts = {m["name"]: m["mountPath"] for m in operator_container(docs)["volumeMounts"]}
    assert mounts[volume["name"]] == "/etc/llmfleet"


def test_metrics_service_exposes_port_9090_named_metrics() -> None:
    docs = render()
    (service,) = of_kind(docs, "Service")
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}
    ]
    pod_labels = operator_deployment(docs)["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()


# --- RBAC -------------------------------------------------------------------------------------


@pytest.mark.parametrize("set_args", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_rbac_has_no_wildcard(set_args: tuple[str, ...]) -> None:
    docs = render(*set_args)
    roles = of_kind(docs, "ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding")
    assert roles
    assert "*" not in [v for v in walk(roles) if isinstance(v, str)]


RBAC_SCOPES = {
    "all-namespaces-clusterrole": ((), "ClusterRole", [None]),
    "listed-namespaces-roles": (("watchNamespaces={team-a,team-b}",), "Role", ["team-a", "team-b"]),
}


@pytest.mark.parametrize(
    ("set_args", "kind", "namespaces"), RBAC_SCOPES.values(), ids=RBAC_SCOPES.keys()
)
def test_rbac_grants_exactly_the_operator_rules_where_it_watches(
    set_args: tuple[str, ...], kind: str, namespaces: list[str | None]
) -> None:
    docs = [d for d in render(*set_args) if not beside_the_operator_rules(d)]
    roles = of_kind(docs, *RBAC_KINDS)
    assert {r["kind"] for r in roles} == {kind}
    assert sorted(r["metadata"].get("namespace") or "" for r in roles) == [
        n or "" for n in namespaces
    ]
    expected = dict(EXPECTED_RULES)
    for role in roles:
        assert granted(role) == expected
    bindings = of_kind(docs, f"{kind}Binding")
    assert len(bindings) == len(roles)
    (account,) = of_kind(docs, "ServiceAccount")
    for binding in bindings:
        assert binding["roleRef"]["kind"] == kind
        assert binding["subjects"] == [
            {
                "kind": "ServiceAccount",
                "name": account["metadata"]["name"],
                "namespace": "llmfleet-system",
            }
        ]


def test_watched_namespaces_become_namespace_args() -> None:
    args = operator_container(render("watchNamespaces={team-a,team-b}"))["args"]
    assert [a for a in args if a.startswith("--namespace")] == [
        "--namespace=team-a",
        "--namespace=team-b",
    ]


# --- leader election ----------------------------------------------------------------------------


def test_the_operator_reads_one_secret_of_its_own_namespace_its_fetcher_key() -> None:
    docs = render()
    key = f"{RELEASE}-llmfleet-fetcher-key"
    assert f"--fetcher-key-secret={key}" in operator_container(docs)["args"]
    (role,) = [d for d in of_kind(docs, "Role") if is_fetcher_key_rbac(d)]
    assert role["metadata"]["namespace"] == "llmfleet-system"
    assert [(r["verbs"], r.get("resourceNames")) for r in role["rules"]] == [
        (["create"], None),
        (["get"], [key]),
    ]
    (binding,) = [d for d in of_kind(docs, "RoleBinding") if is_fetcher_key_rbac(d)]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]


@pytest.mark.parametrize("set_args", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_every_replica_campaigns_for_one_lease_in_the_release_namespace(
    set_args: tuple[str, ...],
) -> None:
    docs = render(*set_args)
    lease = f"{RELEASE}-llmfleet"
    args = operator_container(docs)["args"]
    assert "--leader-election-namespace=llmfleet-system" in args
    assert f"--leader-election-id={lease}" in args
    (role,) = [d for d in of_kind(docs, "Role") if is_lease_rbac(d)]
    assert role["metadata"]["namespace"] == "llmfleet-system"
    # Create cannot be narrowed to a name; reading and renewing only this Lease.
    assert [(r["verbs"], r.get("resourceNames")) for r in role["rules"]] == [
        (["create"], None),
        (["get", "update"], [lease]),
    ]
    (binding,) = [d for d in of_kind(docs, "RoleBinding") if is_lease_rbac(d)]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    env = {e["name"]: e.get("valueFrom") for e in operator_container(docs)["env"]}
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}


def test_lease_timing_follows_the_values() -> None:
    args = operator_container(
        render(
            "leaderElection.leaseDurationSeconds=30",
            "leaderElection.renewDeadlineSeconds=20",
            "leaderElection.retryPeriodSeconds=5",
        )
    )["args"]
    assert {"--lease-duration=30", "--renew-deadline=20", "--retry-period=5"} <= set(args)


GRACE_CASES = {"defaults": (), "slow-retries": ("leaderElection.retryPeriodSeconds=5",)}


@pytest.mark.parametrize("values", GRACE_CASES.values(), ids=GRACE_CASES.keys())
def test_the_pods_grace_covers_the_leaders_shutdown(values: tuple[str, ...]) -> None:
    """SIGKILL never comes before the leader has stopped its writers and handed the Lease over."""
    docs = render(*values, "leaderElection.leaseDurationSeconds=60")
    deployment, args = operator_deployment(docs), operator_container(docs)["args"]
    flags = ("--lease-duration", "--renew-deadline", "--retry-period")
    timings = {a.split("=")[0]: float(a.split("=")[1]) for a in args if a.startswith(flags)}
    cfg = LeaderElectionConfig(
        namespace="ns",
        name="lease",
        identity="op",
        lease_duration=timings["--lease-duration"],
        renew_deadline=timings["--renew-deadline"],
        retry_period=timings["--retry-period"],
    )
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace >= cfg.shutdown_seconds(DRAIN_SECONDS) + 5  # and kopf's own stop


def test_a_new_pod_is_ready_within_a_second_of_answering_and_a_slow_start_is_not_killed() -> None:
    """The startup probe asks /healthz every second until it answers (then the readiness probe
    runs at once): without it the first answer waited for the readiness probe's next 10 s
    period, in every helm install --wait and for every pod of a rolling upgrade. It allows a
    start as long as the liveness probe did before it (its delay, then three failures)."""
    container = operator_container(render())
    startup, live = container["startupProbe"], container["livenessProbe"]
    assert startup["periodSeconds"] == 1
    assert "initialDelaySeconds" not in startup
    before = live["initialDelaySeconds"] + live["periodSeconds"] * live["failureThreshold"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= before
    assert container["readinessProbe"]["periodSeconds"] == 10  # the steady state's load


def test_rollout_starts_the_new_pod_before_stopping_the_leader() -> None:
    docs = render()
    deployment = operator_deployment(docs)
    assert not of_kind(docs, "CustomResourceDefinition") or all(
        d["spec"]["group"] != "kopf.dev" for d in of_kind(docs, "CustomResourceDefinition")
    )
    assert "initContainers" not in deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
    }


# --- refused values ---------------------------------------------------------------------------

REFUSED = {
    "typo-at-top-level": (("replicaz=2",), ["replicaz"]),
    "typo-in-nested-value": (("image.tagg=1.0",), ["tagg", "/image"]),
    "typo-in-gpu-profile": (("gpuProfiles.l4.memoryGb=24",), ["memoryGb", "/gpuProfiles/l4"]),
    "unknown-log-level": (("logLevel=TRACE",), ["/logLevel"]),
    "monitoring-enabled-not-auto-true-false": (
        ("monitoring.podMonitor.enabled=sometimes",),
        ["/monitoring/podMonitor/enabled"],
    ),
    "peering-was-removed": (("peering.enabled=true",), ["peering"]),
    "lease-renewed-after-it-expires": (
        ("leaderElection.renewDeadlineSeconds=16",),
        ["leaseDurationSeconds > renewDeadlineSeconds"],
    ),
    "last-write-could-outlast-the-lease": (
        ("leaderElection.renewDeadlineSeconds=14",),
        ["leaseDurationSeconds > renewDeadlineSeconds + retryPeriodSeconds"],
    ),
    "servicemonitor-forced-without-metrics": (
        ("metrics.enabled=false", "monitoring.serviceMonitor.enabled=true"),
        ["monitoring.serviceMonitor.enabled=true", "metrics.enabled"],
    ),
    "no-serviceaccount-to-run-as": (
        ("serviceAccount.create=false",),
        ["serviceAccount.create=false", "serviceAccount.name"],
    ),
}


@pytest.mark.parametrize(("set_args", "named"), REFUSED.values(), ids=REFUSED.keys())
def test_refuses_bad_values_naming_them(set_args: tuple[str, ...], named: list[str]) -> None:
    said = refusal(*set_args)
    for word in named:
        assert word in said, said


def test_refuses_a_typo_in_a_values_file(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text("replicaz: 2\n")
    result = run_helm("template", RELEASE, str(CHART), "-f", str(values))
    assert result.returncode != 0
    assert "additional properties 'replicaz' not allowed" in result.stderr, result.stderr


# --- monitoring -------------------------------------------------------------------------------

MONITORING = {
    "auto-without-prometheus-operator": ((), (), set()),
    "auto-with-prometheus-operator": ((), (MONITORING_API,), MONITORING_KINDS),
    "forced-on-without-the-api": (
        (
            "monitoring.serviceMonitor.enabled=true",
            "monitoring.podMonitor.enabled=true",
            "monitoring.prometheusRule.enabled=true",
        ),
        (),
        MONITORING_KINDS,
    ),
    "forced-off-with-the-api": (
        (
            "monitoring.serviceMonitor.enabled=false",
            "monitoring.podMonitor.enabled=false",
            "monitoring.prometheusRule.enabled=false",
        ),
        (MONITORING_API,),
        set(),
    ),
    "only-the-podmonitor": (
        ("monitoring.podMonitor.enabled=true",),
        (),
        {"PodMonitor"},
    ),
    "no-servicemonitor-without-metrics": (
        ("metrics.enabled=false",),
        (MONITORING_API,),
        {"PodMonitor", "PrometheusRule"},
    ),
}


@pytest.mark.parametrize(("set_args", "apis", "kinds"), MONITORING.values(), ids=MONITORING.keys())
def test_monitoring_objects_render_when_forced_or_the_api_exists(
    set_args: tuple[str, ...], apis: tuple[str, ...], kinds: set[str]
) -> None:
    docs = render(*set_args, api_versions=apis)
    assert {d["kind"] for d in of_kind(docs, *MONITORING_KINDS)} == kinds


@pytest.mark.parametrize(
    ("component", "port"),
    [("engine", "http"), ("router", "metrics")],
    ids=["engines-on-their-http-port", "routers-on-their-metrics-port"],
)
def test_podmonitors_scrape_engine_and_router_pods_and_label_them_by_llmdeployment(
    component: str, port: str
) -> None:
    # The routers' series wake an LLMDeployment scaled to zero (KEDA's demand trigger).
    docs = render("watchNamespaces={team-a}", api_versions=(MONITORING_API,))
    (monitor,) = [
        m
        for m in of_kind(docs, "PodMonitor")
        if m["spec"]["selector"]["matchLabels"].get("app.kubernetes.io/component") == component
    ]
    assert monitor["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/managed-by": "llmfleet",
        "app.kubernetes.io/component": component,
    }
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["team-a"]}
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert (endpoint["port"], endpoint["path"]) == (port, "/metrics")
    assert {
        "sourceLabels": ["__meta_kubernetes_pod_label_llmfleet_dev_deployment"],
        "targetLabel": "llmdeployment",
        "action": "replace",
    } in endpoint["relabelings"]
    everywhere = of_kind(render(api_versions=(MONITORING_API,)), "PodMonitor")
    assert [m["spec"]["namespaceSelector"] for m in everywhere] == [{"any": True}] * 2


def test_servicemonitor_scrapes_the_metrics_service() -> None:
    docs = render(api_versions=(MONITORING_API,))
    (monitor,) = of_kind(docs, "ServiceMonitor")
    (service,) = of_kind(docs, "Service")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"]
    # The operator's `namespace` label is the LLMDeployment's, which dashboards select on.
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True


def test_prometheusrule_carries_the_groups_of_the_rule_file() -> None:
    (rule,) = of_kind(render(api_versions=(MONITORING_API,)), "PrometheusRule")
    plain = yaml.safe_load((CHART / "files" / "prometheus-rules.yaml").read_text())
    assert rule["spec"]["groups"] == plain["groups"]


def test_the_ttft_objective_comes_from_values() -> None:
    def objective(*set_args: str) -> str:
        (rule,) = of_kind(render(*set_args, api_versions=(MONITORING_API,)), "PrometheusRule")
        (expr,) = [
            r["expr"]
            for g in rule["spec"]["groups"]
            for r in g["rules"]
            if r.get("record") == "llmfleet:slo_ttft_p99_seconds"
        ]
        return str(expr)

    assert objective() == "vector(2)"
    assert objective("monitoring.prometheusRule.ttftP99SLOSeconds=5") == "vector(5)"


# --- prometheus-adapter rules -----------------------------------------------------------------


def test_prometheus_adapter_rules_render_verbatim_unless_disabled() -> None:
    source = (CHART / "files" / "prometheus-adapter-rules.yaml").read_text()
    (configmap,) = [d for d in of_kind(render(), "ConfigMap") if "config.yaml" in d["data"]]
    assert configmap["data"]["config.yaml"].strip() == source.strip()
    disabled = render("prometheusAdapter.rules.enabled=false")
    assert not [d for d in of_kind(disabled, "ConfigMap") if "config.yaml" in d["data"]]


def test_the_adapter_rule_serves_the_metric_the_hpas_target_from_vllms_queue() -> None:
    (rule,) = yaml.safe_load((CHART / "files" / "prometheus-adapter-rules.yaml").read_text())[
        "rules"
    ]
    assert rule["seriesQuery"].startswith(f"{VLLM_WAITING}{{")
    assert rule["name"] == {"matches": f"^{VLLM_WAITING}$", "as": QUEUE_METRIC}


def test_both_podmonitors_label_the_llmdeployment_the_adapter_joins_held_requests_on() -> None:
    monitors = of_kind(render(api_versions=(MONITORING_API,)), "PodMonitor")
    assert len(monitors) == 2  # engines and routers
    for monitor in monitors:
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
        relabel = [r for r in endpoint["relabelings"] if r["targetLabel"] == "llmdeployment"]
        assert relabel == [
            {
                "sourceLabels": ["__meta_kubernetes_pod_label_llmfleet_dev_deployment"],
                "targetLabel": "llmdeployment",
                "action": "replace",
            }
        ], monitor["metadata"]["name"]


# --- dashboards -------------------------------------------------------------------------------


@pytest.fixture
def chart_with_dashboards(tmp_path: Path) -> Path:
    chart = tmp_path / "llmfleet"
    shutil.copytree(CHART, chart)
    dashboards = chart / "dashboards"
    shutil.rmtree(dashboards, ignore_errors=True)
    dashboards.mkdir()
    for name in ("fleet_overview", "engine-latency"):
        (dashboards / f"{name}.json").write_text(json.dumps({"title": name, "panels": []}))
    return chart


def dashboard_configmaps(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in of_kind(docs, "ConfigMap") if any(k.endswith(".json") for k in d["data"])]


def test_no_dashboard_configmap_without_dashboard_files(tmp_path: Path) -> None:
    chart = tmp_path / "llmfleet"
    shutil.copytree(CHART, chart)
    shutil.rmtree(chart / "dashboards")
    assert not dashboard_configmaps(render(chart=chart))


def test_the_chart_ships_the_generated_dashboards() -> None:
    keys = sorted(k for cm in dashboard_configmaps(render()) for k in cm["data"])
    assert keys == ["llmdeployment.json", "operator.json"]


def test_one_labelled_configmap_per_dashboard(chart_with_dashboards: Path) -> None:
    docs = render(chart=chart_with_dashboards)
    configmaps = dashboard_configmaps(docs)
    assert sorted(k for cm in configmaps for k in cm["data"]) == [
        "engine-latency.json",
        "fleet_overview.json",
    ]
    for configmap in configmaps:
        assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert configmap["metadata"]["namespace"] == "llmfleet-system"
        ((key, text),) = configmap["data"].items()
        assert json.loads(text)["title"] == key.removesuffix(".json")
    assert len({cm["metadata"]["name"] for cm in configmaps}) == 2


def test_dashboard_label_namespace_and_annotations_are_configurable(
    chart_with_dashboards: Path,
) -> None:
    docs = render(
        "dashboards.label=grafana_dashboard_llm",
        "dashboards.labelValue=yes",
        "dashboards.namespace=monitoring",
        "dashboards.annotations.grafana_folder=LLMFleet",
        chart=chart_with_dashboards,
    )
    for configmap in dashboard_configmaps(docs):
        assert configmap["metadata"]["labels"]["grafana_dashboard_llm"] == "yes"
        assert configmap["metadata"]["namespace"] == "monitoring"
        assert configmap["metadata"]["annotations"] == {"grafana_folder": "LLMFleet"}
    assert not dashboard_configmaps(render("dashboards.enabled=false", chart=chart_with_dashboards))


# --- NOTES.txt --------------------------------------------------------------------------------


def test_notes_tell_the_user_what_to_apply_next(tmp_path: Path) -> None:
    # helm template does not render NOTES.txt: render a copy of it inside an ordinary template.
    chart = tmp_path / "llmfleet"
    shutil.copytree(CHART, chart)
    notes = (chart / "templates" / "NOTES.txt").read_text()
    (chart / "templates" / "_notes_probe.tpl").write_text(
        '{{- define "notesProbe" -}}\n' + notes + "\n{{- end -}}\n"
    )
    (chart / "templates" / "notes-probe.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\n"
        'data:\n  notes: {{ include "notesProbe" . | toJson }}\n'
    )
    result = run_helm("template", RELEASE, str(chart), "--show-only", "templates/notes-probe.yaml")
    assert result.returncode == 0, result.stderr
    text = yaml.safe_load(result.stdout)["data"]["notes"]
    for expected in (
        "kubectl apply -n default -f examples/tiny-cpu.yaml",
        "kubectl get llmd",
        "llmfleet plan -f examples/",
        "helm upgrade upgrades them",
    ):
        assert expected in text, text
