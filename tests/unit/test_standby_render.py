"""What a standby engine runs (render/standby.py): sleep mode behind the dev-mode fence, in pods
that neither the serving Deployment nor its HPA counts, out of rotation until woken. Not yet
part of render_fleet (the wake and sleep loop is not built)."""

from __future__ import annotations

from typing import Any

import pytest

from llmfleet import devfence
from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner import plan
from llmfleet.planner.engine_flags import pinned_flags
from llmfleet.render import Owner, render_fleet
from llmfleet.render.names import PROGRESS_GATE
from llmfleet.render.standby import STANDBY_GATE, render_standby
from llmfleet.settings import OperatorSettings

FLEET = OperatorSettings().fleet

OWNER = Owner(name="chat", namespace="team-a", uid="1234")
H100 = {"count": 2, "memoryGiB": 80, "product": "NVIDIA-H100-80GB-HBM3"}


def spec(standby: int = 1, **engine: Any) -> LLMDeploymentSpec:
    body: dict[str, Any] = {
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
        "gpus": H100,
        "autoscaling": {"standby": {"replicas": standby}} if standby else {},
        "engine": engine,
    }
    return LLMDeploymentSpec.model_validate(body)


def standby(s: LLMDeploymentSpec) -> dict[str, dict[str, Any]]:
    rendered = render_standby(OWNER, s, plan(s), FLEET)
    assert rendered is not None
    return {o["kind"]: o for o in rendered.objects()}


def vllm(deployment: dict[str, Any]) -> dict[str, Any]:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["name"] == "vllm"
    return container


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_no_standby_replicas_render_nothing() -> None:
    assert render_standby(OWNER, spec(standby=0), plan(spec(standby=0)), FLEET) is None


def test_the_standby_deployment_runs_the_asked_replicas_as_engines_the_e2e_test_selects() -> None:
    s = spec(standby=2)
    deployment = standby(s)["Deployment"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["metadata"]["name"] == "chat-standby"
    assert deployment["spec"]["replicas"] == 2
    # tests/e2e/test_standby.py's selector
    selector = {
        "llmfleet.dev/deployment": "chat",
        "app.kubernetes.io/component": "engine",
        "llmfleet.dev/standby": "true",
    }
    assert matches(selector, labels)
    assert matches(deployment["spec"]["selector"]["matchLabels"], labels)


def test_neither_the_serving_deployment_nor_its_hpa_counts_a_standby_pod() -> None:
    s = spec()
    standby_labels = standby(s)["Deployment"]["spec"]["template"]["metadata"]["labels"]
    (serving,) = [
        o
        for o in render_fleet(OWNER, s, plan(s), FLEET).objects()
        if o["kind"] == "Deployment" and o["metadata"]["name"] == "chat-tp1"
    ]
    assert not matches(serving["spec"]["selector"]["matchLabels"], standby_labels)


def test_standby_engines_run_sleep_mode_with_the_fence_in_front() -> None:
    objects = standby(spec())
    container = vllm(objects["Deployment"])
    args = container["args"]
    assert "--enable-sleep-mode" in args
    middleware = args[args.index("--middleware") + 1]
    env = {e["name"]: e for e in container["env"]}
    assert env["VLLM_SERVER_DEV_MODE"]["value"] == "1"
    # The fence's module, importable from the mounted ConfigMap alone.
    module, _, cls = middleware.rpartition(".")
    (mount,) = [
        m for m in container["volumeMounts"] if m["mountPath"] == env["PYTHONPATH"]["value"]
    ]
    volumes = {v["name"]: v for v in objects["Deployment"]["spec"]["template"]["spec"]["volumes"]}
    config_map = volumes[mount["name"]]["configMap"]["name"]
    assert config_map == objects["ConfigMap"]["metadata"]["name"]
    source = objects["ConfigMap"]["data"][f"{module}.py"]
    namespace: dict[str, Any] = {}
    exec(compile(source, f"{module}.py", "exec"), namespace)
    assert isinstance(namespace[cls], type)
    # The token comes from the standby Secret, never in the pod spec.
    ref = env[devfence.TOKEN_ENV]["valueFrom"]["secretKeyRef"]
    assert ref["name"] == "chat-standby"
    assert "value" not in env[devfence.TOKEN_ENV]


def test_the_pinned_vllm_takes_the_flags_standby_adds() -> None:
    flags = pinned_flags().flags
    assert flags["--enable-sleep-mode"].takes == "none"
    assert flags["--middleware"].takes == "one"


@pytest.mark.parametrize("stall", [None, {"enabled": True}], ids=["plain", "stall-watched"])
def test_a_standby_pod_is_in_rotation_only_through_the_standby_gate(
    stall: dict[str, Any] | None,
) -> None:
    s = spec(**({"stallDetection": stall} if stall else {}))
    gates = standby(s)["Deployment"]["spec"]["template"]["spec"]["readinessGates"]
    kinds = [g["conditionType"] for g in gates]
    assert STANDBY_GATE in kinds
    assert PROGRESS_GATE not in kinds
