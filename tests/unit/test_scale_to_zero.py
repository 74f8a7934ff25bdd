"""Scale to zero (autoscaling.minReplicas 0): what the spec accepts, what it renders (a KEDA
ScaledObject in place of the HPA, a router that holds requests), and the status it reports."""

from __future__ import annotations

import argparse
from typing import Any

import pytest
from chartrender import render
from cliargs import flag
from pydantic import ValidationError

from llmfleet.cli import build_parser
from llmfleet.commands.run import settings_from_args
from llmfleet.models import LLMDeploymentSpec
from llmfleet.models.errors import field_problems
from llmfleet.models.status import LLMDeploymentStatus
from llmfleet.planner import plan
from llmfleet.reconcile.llmdeployment.autoscaler_status import scaled_to_zero
from llmfleet.reconcile.llmdeployment.status import Observed, ready_status
from llmfleet.render import Owner, render_fleet
from llmfleet.render.router import hold_args
from llmfleet.render.scaledobject import demand_query, queue_query
from llmfleet.settings import OperatorSettings

OWNER = Owner(name="chat", namespace="team-a", uid="1234")
PROMETHEUS = "http://prometheus.monitoring.svc:9090"
H100 = {"count": 2, "memoryGiB": 80, "perNode": 8, "product": "NVIDIA-H100-80GB-HBM3"}


def spec(autoscaling: dict[str, Any], **more: Any) -> LLMDeploymentSpec:
    return LLMDeploymentSpec.model_validate(
        {
            "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
            "gpus": H100,
            "autoscaling": autoscaling,
            **more,
        }
    )


def kinds(s: LLMDeploymentSpec) -> dict[str, dict[str, Any]]:
    return {
        f"{o['kind']}/{o['metadata']['name']}": o
        for o in render_fleet(
            OWNER, s, plan(s), OperatorSettings(keda_prometheus_url=PROMETHEUS).fleet
        ).objects()
    }


def router_args(s: LLMDeploymentSpec) -> list[str]:
    router = kinds(s)["Deployment/chat-router"]
    args: list[str] = router["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def test_min_replicas_zero_renders_a_scaled_object_instead_of_the_hpa() -> None:
    s = spec({"minReplicas": 0, "maxReplicas": 3, "idleSeconds": 120})
    objects = kinds(s)
    assert "HorizontalPodAutoscaler/chat" not in objects
    so = objects["ScaledObject/chat"]
    assert so["apiVersion"] == "keda.sh/v1alpha1"
    engine = next(k for k in objects if k.startswith("Deployment/chat-tp"))
    assert so["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": engine.split("/")[1],
    }
    assert "replicas" not in objects[engine]["spec"]  # KEDA and its HPA own them
    assert (so["spec"]["minReplicaCount"], so["spec"]["maxReplicaCount"]) == (0, 3)
    # Idle for idleSeconds before the last pod goes, and a new one serves that long first.
    assert so["spec"]["cooldownPeriod"] == so["spec"]["initialCooldownPeriod"] == 120
    # The HPA KEDA makes keeps the HPA's behavior: up at once, down one pod at a time.
    behavior = so["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleUp"]["stabilizationWindowSeconds"] == 0
    assert behavior["scaleDown"]["policies"] == [{"type": "Pods", "value": 1, "periodSeconds": 60}]
    queue, demand = so["spec"]["triggers"]
    assert queue["metadata"]["threshold"] == str(plan(s).target_queue_depth)
    for trigger in (queue, demand):
        assert trigger["metadata"]["serverAddress"] == PROMETHEUS
        assert trigger["metadata"]["activationThreshold"] == "0"
        assert 'namespace="team-a",llmdeployment="chat"' in trigger["metadata"]["query"]


def test_min_replicas_one_keeps_the_hpa_and_renders_no_scaled_object() -> None:
    objects = kinds(spec({"minReplicas": 1, "maxReplicas": 3}))
    assert "HorizontalPodAutoscaler/chat" in objects
    assert not [k for k in objects if k.startswith("ScaledObject/")]
    # Upstream's 5 attempts, not the hold's.
    assert flag(router_args(spec({"minReplicas": 1, "maxReplicas": 3})), "--retry-max-retries") == [
        "5"
    ]


def test_the_wake_up_reads_the_routers_requests_without_an_engine() -> None:
    # At zero no engine exists, so no vLLM series does: only the router can say someone asked.
    query = demand_query(OWNER)
    assert 'vllm_router_request_errors_total{namespace="team-a",llmdeployment="chat",' in query
    assert 'error_type="no_available_workers"' in query
    # So can the router hop, which holds a request until an engine is Ready to take it.
    held = 'llmfleet_router_hop_requests_held{namespace="team-a",llmdeployment="chat"}'
    assert held in query
    # Each part that has no series counts 0 instead of emptying the sum.
    assert query.count("or vector(0)") == 5


def test_the_queue_trigger_counts_the_requests_the_hop_holds_for_room() -> None:
    # Held in the hop, a request is in no engine's vllm:num_requests_waiting: both make the queue.
    query = queue_query(OWNER)
    assert 'vllm:num_requests_waiting{namespace="team-a",llmdeployment="chat"}' in query
    assert 'llmfleet_router_hop_requests_held{namespace="team-a",llmdeployment="chat"}' in query
    assert query.count("or vector(0)") == 2


@pytest.mark.parametrize(
    ("autoscaling", "router", "on"),
    [
        ({"minReplicas": 0, "maxReplicas": 1}, {}, True),
        ({"minReplicas": 1, "maxReplicas": 1}, {}, False),
        ({"minReplicas": 0, "maxReplicas": 1}, {"enabled": True}, True),
    ],
    ids=["scale-to-zero-turns-the-router-on", "one-pod-needs-none", "explicitly-on"],
)
def test_scale_to_zero_always_has_a_router_to_hold_requests(
    autoscaling: dict[str, Any], router: dict[str, Any], on: bool
) -> None:
    objects = kinds(spec(autoscaling, router=router))
    assert ("Deployment/chat-router" in objects) is on


@pytest.mark.parametrize(
    ("seconds", "retries"),
    [(30, 25), (600, 310), (3600, 1810)],
    ids=["30s", "default-600s", "an-hour"],
)
def test_the_router_holds_a_request_for_about_the_wake_timeout(seconds: int, retries: int) -> None:
    args = hold_args(seconds)
    assert flag(args, "--retry-max-retries") == [str(retries)]
    assert flag(args, "--retry-max-backoff-ms") == ["2000"]
    # The ramp of backoffs (50 ms x 1.5^k up to 2 s) plus one 2 s wait per retry after it.
    ramp = sum(min(0.05 * 1.5**k, 2.0) for k in range(10))
    held = ramp + (retries - 10) * 2.0
    assert seconds <= held <= seconds + ramp + 2


def test_the_router_of_a_scale_to_zero_deployment_carries_the_hold() -> None:
    args = router_args(spec({"minReplicas": 0, "wakeTimeoutSeconds": 120}))
    assert flag(args, "--retry-max-retries") == [str(10 + 60)]


def test_max_replicas_defaults_to_twice_the_planned_count_at_zero() -> None:
    planned = plan(spec({"minReplicas": 0}))
    assert (planned.min_replicas, planned.max_replicas) == (0, 2 * planned.replicas)


def problems(autoscaling: dict[str, Any], **more: Any) -> list[str]:
    with pytest.raises(ValidationError) as caught:
        spec(autoscaling, **more)
    return [str(p) for p in field_problems(caught.value)]


@pytest.mark.parametrize(
    ("autoscaling", "more", "expected"),
    [
        (
            {"idleSeconds": 60},
            {},
            "spec.autoscaling.minReplicas: idleSeconds and wakeTimeoutSeconds apply only to "
            "scale to zero",
        ),
        (
            {"minReplicas": 2, "wakeTimeoutSeconds": 60},
            {},
            "spec.autoscaling.minReplicas: idleSeconds and wakeTimeoutSeconds apply only",
        ),
        (
            {"minReplicas": 0, "enabled": False},
            {},
            "spec.autoscaling.minReplicas: minReplicas 0 (scale to zero) needs the autoscaler",
        ),
        (
            {"minReplicas": 0},
            {"router": {"enabled": False}},
            "spec.router.enabled: autoscaling.minReplicas 0 needs the router",
        ),
        ({"minReplicas": 0, "idleSeconds": 5}, {}, "spec.autoscaling.idleSeconds"),
        ({"minReplicas": -1}, {}, "spec.autoscaling.minReplicas"),
    ],
    ids=[
        "idle-window-without-scale-to-zero",
        "wake-timeout-without-scale-to-zero",
        "zero-without-the-autoscaler",
        "zero-without-a-router",
        "idle-window-too-short",
        "negative-minimum",
    ],
)
def test_contradictory_scale_to_zero_specs_name_the_field(
    autoscaling: dict[str, Any], more: dict[str, Any], expected: str
) -> None:
    found = problems(autoscaling, **more)
    assert any(p.startswith(expected) for p in found), found


# --- status ---------------------------------------------------------------------------------

ZERO_PLAN = plan(spec({"minReplicas": 0, "maxReplicas": 2}))


def engine(spec_replicas: int, ready: int) -> dict[str, Any]:
    return {
        "metadata": {"name": "chat-tp2"},
        "spec": {"replicas": spec_replicas},
        "status": {"replicas": spec_replicas, "readyReplicas": ready, "updatedReplicas": ready},
    }


def scaled_object(ready: bool = True, active: bool = False) -> dict[str, Any]:
    return {
        "spec": {"cooldownPeriod": 300},
        "status": {
            "lastActiveTime": "2026-11-25T01:00:00Z",
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "ScaledObjectReady" if ready else "PrometheusScalerError",
                    "message": "ok" if ready else "connection refused",
                },
                {"type": "Active", "status": "True" if active else "False"},
            ],
        },
    }


def keda_hpa(desired: int, disabled: bool) -> dict[str, Any]:
    cond = (
        {"type": "ScalingActive", "status": "False", "reason": "ScalingDisabled", "message": "0"}
        if disabled
        else {"type": "ScalingActive", "status": "True", "reason": "ValidMetricFound"}
    )
    return {"status": {"desiredReplicas": desired, "conditions": [cond]}}


ROUTER = {"metadata": {"name": "chat-router"}, "status": {"readyReplicas": 1}}


@pytest.mark.parametrize(
    ("eng", "hpa", "so", "expected"),
    [
        (
            engine(0, 0),
            keda_hpa(0, disabled=True),
            scaled_object(),
            {
                "ScaledToZero": ("True", "Idle"),
                "Available": ("True", "ScaledToZero"),
                "Degraded": ("False", "AsPlanned"),
                "Progressing": ("False", "Stable"),
            },
        ),
        (
            engine(1, 0),
            keda_hpa(0, disabled=True),
            scaled_object(active=True),
            {
                "ScaledToZero": ("False", "Waking"),
                "Available": ("False", "NoEngineReady"),
                "Progressing": ("True", "RollingOut"),
            },
        ),
        (
            engine(2, 2),
            keda_hpa(2, disabled=False),
            scaled_object(active=True),
            {"ScaledToZero": ("False", "Serving"), "Available": ("True", "EnginesReady")},
        ),
        (
            engine(0, 0),
            keda_hpa(0, disabled=True),
            scaled_object(ready=False),
            {
                "ScaledToZero": ("Unknown", "ScalerNotReady"),
                "Degraded": ("True", "AutoscalerBlind"),
            },
        ),
    ],
    ids=["idle-at-zero", "waking-for-a-request", "serving", "keda-cannot-reach-prometheus"],
)
def test_status_says_when_the_fleet_is_at_zero(
    eng: dict[str, Any],
    hpa: dict[str, Any],
    so: dict[str, Any],
    expected: dict[str, tuple[str, str]],
) -> None:
    status = ready_status(
        old=LLMDeploymentStatus(),
        generation=1,
        plan=ZERO_PLAN,
        observed=Observed(
            engine=eng, old_engines=(), hpa=hpa, pods=(), router=ROUTER, scaled_object=so
        ),
        endpoint="http://chat-router.team-a.svc:8000/v1",
    )
    got = {c.type: (c.status, c.reason) for c in status.conditions}
    assert {k: got[k] for k in expected} == expected
    assert status.replicas == _int_spec(eng)
    assert status.gpus == _int_spec(eng) * ZERO_PLAN.gpus_per_replica


def _int_spec(eng: dict[str, Any]) -> int:
    return int(eng["spec"]["replicas"])


def test_idle_message_says_since_when_and_that_no_gpu_is_held() -> None:
    cond = scaled_to_zero(scaled_object(), desired=0, current=0, ready=0, generation=3)
    assert "since 2026-11-25T01:00:00Z" in cond.message
    assert "0 GPUs" in cond.message


# --- how the operator learns the Prometheus URL ------------------------------------------------


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["run", *argv])


def test_the_chart_value_reaches_the_operator_as_its_flag() -> None:
    (deployment,) = [
        d for d in render(f"keda.prometheusUrl={PROMETHEUS}") if d["kind"] == "Deployment"
    ]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    (url_arg,) = [a for a in args if a.startswith("--keda-prometheus-url=")]
    assert (
        settings_from_args(parse(url_arg, "--no-leader-election")).keda_prometheus_url == PROMETHEUS
    )
    (default,) = [d for d in render() if d["kind"] == "Deployment"]
    assert not [
        a
        for a in default["spec"]["template"]["spec"]["containers"][0]["args"]
        if a.startswith("--keda-prometheus-url")
    ]


def test_a_url_that_is_not_http_stops_the_operator_naming_the_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        parse("--keda-prometheus-url=prometheus:9090")
    assert "--keda-prometheus-url" in capsys.readouterr().err
