"""Stall detection (spec.engine.stallDetection): an engine with requests running and no token
counted for a window is taken out of service, then restarted a window later; prefill progress,
an adapter call and an idle engine are no stall."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import REGISTRY
from pydantic import ValidationError

from llmfleet import metrics as m
from llmfleet.models import (
    LLMBatchJobSpec,
    LLMDeploymentSpec,
    describe_validation_error,
)
from llmfleet.models.stall import StallDetection
from llmfleet.models.status import LLMDeploymentStatus
from llmfleet.planner import plan
from llmfleet.reconcile.llmdeployment.stall import (
    Sample,
    Track,
    Verdict,
    judge,
    parse_sample,
    stall_window,
)
from llmfleet.reconcile.llmdeployment.stallwatch import StallWatch, opened
from llmfleet.reconcile.llmdeployment.status import Observed, ready_status
from llmfleet.render import Owner, render_fleet
from llmfleet.render.names import ADAPTERS_GATE, PROGRESS_GATE
from llmfleet.settings import OperatorSettings

FLEET = OperatorSettings().fleet

WINDOW = 30.0
H100 = {"count": 1, "memoryGiB": 80, "perNode": 8, "product": "NVIDIA-H100-80GB-HBM3"}


def deployment(**engine: Any) -> LLMDeploymentSpec:
    return LLMDeploymentSpec.model_validate(
        {
            "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
            "gpus": H100,
            "engine": engine,
        }
    )


def s(running: float, prompt: float, generated: float) -> Sample:
    return Sample(running, prompt, generated)


def verdicts(samples: list[tuple[float, Sample | None, bool]]) -> list[Verdict]:
    """Each (seconds, sample or None, busy) judged in turn, as the poll would."""
    track: Track | None = None
    out = []
    for at, sample, busy in samples:
        track, verdict = judge(track, sample, at, WINDOW, busy=busy)
        out.append(verdict)
    return out


SERVING, STALLED, RESTART = Verdict.SERVING, Verdict.STALLED, Verdict.RESTART


@pytest.mark.parametrize(
    ("samples", "expected"),
    [
        pytest.param(
            [
                (0, s(2, 100, 50), False),
                (20, s(2, 100, 50), False),
                (31, s(2, 100, 50), False),
            ],
            [SERVING, SERVING, STALLED],
            id="requests-running-no-token-for-a-window-is-stalled",
        ),
        pytest.param(
            [
                (0, s(1, 100, 50), False),
                (20, s(1, 4200, 50), False),
                (45, s(1, 4200, 50), False),
            ],
            [SERVING, SERVING, SERVING],
            id="a-prompt-prefilled-is-progress",
        ),
        pytest.param(
            [
                (0, s(3, 100, 50), False),
                (29, s(3, 100, 50), False),
                (58, s(3, 100, 51), False),
            ],
            [SERVING, SERVING, SERVING],
            id="one-generated-token-is-progress",
        ),
        pytest.param(
            [
                (0, s(1, 100, 50), False),
                (31, s(1, 100, 50), True),
                (50, s(1, 100, 50), False),
            ],
            [SERVING, SERVING, SERVING],
            id="an-adapter-call-restarts-the-clock",
        ),
        pytest.param(
            [
                (0, s(0, 100, 50), False),
                (60, s(0, 100, 50), False),
                (120, s(0, 100, 50), False),
            ],
            [SERVING, SERVING, SERVING],
            id="an-idle-engine-is-not-stalled",
        ),
        pytest.param(
            [
                (0, s(2, 100, 50), False),
                (31, s(2, 100, 50), False),
                (50, s(2, 100, 50), False),
                (62, s(2, 100, 50), False),
            ],
            [SERVING, STALLED, STALLED, RESTART],
            id="still-stalled-a-second-window-later-is-restarted",
        ),
        pytest.param(
            [
                (0, s(2, 100, 50), False),
                (31, s(2, 100, 50), False),
                (40, s(2, 100, 60), False),
            ],
            [SERVING, STALLED, SERVING],
            id="a-stalled-engine-that-moves-again-serves-again",
        ),
        pytest.param(
            [(0, s(2, 100, 50), False), (31, s(2, 100, 50), False), (70, None, False)],
            [SERVING, STALLED, STALLED],
            id="a-page-not-read-never-restarts-an-engine",
        ),
        pytest.param(
            [
                (0, s(2, 100, 50), False),
                (31, s(2, 0, 0), False),
                (45, s(2, 0, 0), False),
            ],
            [SERVING, SERVING, SERVING],
            id="counters-going-back-are-a-restarted-engine",
        ),
    ],
)
def test_stall_verdicts(
    samples: list[tuple[float, Sample | None, bool]], expected: list[Verdict]
) -> None:
    assert verdicts(samples) == expected


def metrics_page(running: float, prompt: float, generated: float) -> str:
    """vLLM's page, as prometheus_client writes it: two engines, _created samples included."""
    lines = [
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        "# TYPE vllm:num_requests_running gauge",
        f'vllm:num_requests_running{{engine="0",model_name="m"}} {running}',
        'vllm:num_requests_running{engine="1",model_name="m"} 1.0',
        "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
        "# TYPE vllm:prompt_tokens_total counter",
        f'vllm:prompt_tokens_total{{engine="0",model_name="m"}} {prompt}',
        'vllm:prompt_tokens_created{engine="0",model_name="m"} 1.7e9',
        "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
        "# TYPE vllm:generation_tokens_total counter",
        f'vllm:generation_tokens_total{{engine="0",model_name="m"}} {generated}',
        'vllm:num_requests_running_other{engine="0"} 99',
    ]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("page", "sample"),
    [
        pytest.param(metrics_page(2, 300, 70), s(3, 300, 70), id="summed-over-engines"),
        pytest.param(
            metrics_page(0, 1, 2).replace("vllm:generation_tokens_total{", "x{"),
            None,
            id="a-missing-counter-is-no-sample",
        ),
        pytest.param("<html>no metrics</html>\n", None, id="not-a-metrics-page"),
    ],
)
def test_the_engine_s_counters_are_read_from_its_metrics(page: str, sample: Sample | None) -> None:
    assert parse_sample(page) == sample


def test_the_window_outlasts_the_longest_prefill_and_many_inter_token_latencies() -> None:
    on = StallDetection()
    short, long = deployment(maxModelLen=2048), deployment(maxModelLen=32768)
    short_plan, long_plan = plan(short), plan(long)
    for planned in (short_plan, long_plan):
        assert planned.predicted is not None
        window = stall_window(on, planned)
        assert window >= 30
        assert window >= 100 * planned.predicted.itl_millis / 1e3
        # The predicted prefill of a prompt of maxModelLen tokens, which counts none until done.
        p = planned.predicted
        assert window > p.ttft_millis / 1e3 * planned.max_model_len / p.prompt_tokens
    assert stall_window(on, long_plan) >= stall_window(on, short_plan)


def test_window_seconds_overrides_the_derived_window_and_cpu_has_one_without_prediction() -> None:
    planned = plan(deployment())
    assert stall_window(StallDetection(windowSeconds=12), planned) == 12
    cpu = LLMDeploymentSpec.model_validate({"model": {"name": "facebook/opt-125m"}})
    cpu_plan = plan(cpu)
    assert cpu_plan.predicted is None
    assert stall_window(StallDetection(), cpu_plan) >= 60


@pytest.mark.parametrize(
    ("engine", "gates"),
    [
        pytest.param({}, [], id="off-by-default"),
        pytest.param({"stallDetection": {}}, [PROGRESS_GATE], id="on-when-set"),
        pytest.param({"stallDetection": {"enabled": False}}, [], id="enabled-false-is-off"),
        pytest.param(
            {"stallDetection": {}, "lora": {}},
            [ADAPTERS_GATE, PROGRESS_GATE],
            id="beside-the-adapters-gate",
        ),
    ],
)
def test_the_engine_pods_carry_the_progress_gate_when_on(
    engine: dict[str, Any], gates: list[str]
) -> None:
    spec = deployment(**engine)
    owner = Owner(name="chat", namespace="team-a", uid="1")
    (dep,) = [
        o
        for o in render_fleet(owner, spec, plan(spec), FLEET).objects()
        if o["kind"] == "Deployment"
        and o["metadata"]["labels"]["app.kubernetes.io/component"] == "engine"
    ]
    rendered = dep["spec"]["template"]["spec"].get("readinessGates") or []
    assert [g["conditionType"] for g in rendered] == gates


@pytest.mark.parametrize(
    ("stall", "field", "words"),
    [
        pytest.param(
            {"windowSeconds": 1},
            "windowSeconds",
            "greater than or equal to 6",
            id="low",
        ),
        pytest.param({"enabled": "sometimes"}, "enabled", "valid boolean", id="not-a-boolean"),
        pytest.param({"windowSecond": 30}, "windowSecond", "Extra inputs", id="misspelt"),
    ],
)
def test_bad_settings_are_refused_naming_the_field(
    stall: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(ValidationError) as e:
        deployment(stallDetection=stall)
    text = describe_validation_error(e.value)
    assert f"engine.stallDetection.{field}" in text
    assert words in text


def test_a_batch_job_refuses_stall_detection_naming_the_field() -> None:
    with pytest.raises(ValidationError) as e:
        LLMBatchJobSpec.model_validate(
            {
                "model": {"name": "facebook/opt-125m"},
                "input": {"persistentVolumeClaim": {"claimName": "d", "path": "in/p.jsonl"}},
                "output": {"persistentVolumeClaim": {"claimName": "d", "path": "out/run-1"}},
                "engine": {"stallDetection": {}},
            }
        )
    assert "engine.stallDetection" in describe_validation_error(e.value)


def engine_pod(name: str, ip: str, gate: str | None = None, **status: Any) -> dict[str, Any]:
    conditions = [{"type": "ContainersReady", "status": "True"}]
    if gate is not None:
        conditions.append({"type": PROGRESS_GATE, "status": gate})
    return {
        "metadata": {"name": name, "uid": f"uid-{name}"},
        "spec": {"readinessGates": [{"conditionType": PROGRESS_GATE}]},
        "status": {"podIP": ip, "conditions": conditions} | status,
    }


class Engines:
    """The pages each engine IP serves, and a clock the test moves."""

    def __init__(self) -> None:
        self.pages: dict[str, str | None] = {}
        self.now = 1000.0

    def scrape(self, ip: str, port: int) -> str | None:
        return self.pages.get(ip)


def test_a_wedged_engine_is_taken_out_then_restarted_and_a_healthy_one_keeps_serving() -> None:
    engines = Engines()
    watch = StallWatch(8000, engines.scrape, lambda: engines.now)
    wedged, healthy = engine_pod("e-1", "10.0.0.1"), engine_pod("e-2", "10.0.0.2")
    engines.pages = {
        "10.0.0.1": metrics_page(2, 10, 5),
        "10.0.0.2": metrics_page(1, 10, 5),
    }

    first = watch.check("ns", "chat", [wedged, healthy], WINDOW)
    assert first.gates == {"e-1": True, "e-2": True}  # new engines: the gate opens
    assert first.stalled == ()

    wedged, healthy = (
        engine_pod("e-1", "10.0.0.1", "True"),
        engine_pod("e-2", "10.0.0.2", "True"),
    )
    engines.now += WINDOW + 1
    engines.pages["10.0.0.2"] = metrics_page(1, 10, 80)
    out = watch.check("ns", "chat", [wedged, healthy], WINDOW)
    assert (out.stalled, out.newly_stalled, out.restart) == (("e-1",), ("e-1",), ())
    assert out.gates == {"e-1": False}
    assert "e-1" in out.degraded()

    wedged = engine_pod("e-1", "10.0.0.1", "False")
    engines.now += WINDOW + 1
    engines.pages["10.0.0.2"] = metrics_page(1, 10, 160)
    again = watch.check("ns", "chat", [wedged, healthy], WINDOW)
    assert (again.stalled, again.newly_stalled, again.restart) == (
        ("e-1",),
        (),
        ("e-1",),
    )
    assert again.gates == {}


def test_a_busy_engine_is_not_judged_and_pods_without_the_gate_are_not_read() -> None:
    engines = Engines()
    watch = StallWatch(8000, engines.scrape, lambda: engines.now)
    loading = engine_pod("e-1", "10.0.0.1", "True")
    plain = engine_pod("p-1", "10.0.0.9") | {"spec": {}}
    engines.pages = {
        "10.0.0.1": metrics_page(1, 10, 5),
        "10.0.0.9": metrics_page(1, 10, 5),
    }
    watch.check("ns", "chat", [loading, plain], WINDOW)
    engines.now += WINDOW + 1
    report = watch.check("ns", "chat", [loading, plain], WINDOW, busy=frozenset({"e-1"}))
    assert report.stalled == ()
    assert report.gates == {}


def test_each_watched_deployment_is_due_every_third_of_its_window() -> None:
    engines = Engines()
    watch = StallWatch(8000, engines.scrape, lambda: engines.now)
    watch.check("ns", "fast", [], 30.0)
    watch.check("ns", "slow", [], 300.0)
    assert watch.due() == []
    engines.now += 10
    assert watch.due() == [("ns", "fast")]
    assert watch.due() == []
    engines.now += 90
    assert watch.due() == [("ns", "fast"), ("ns", "slow")]
    watch.forget("ns", "fast")
    engines.now += 100
    assert watch.due() == [("ns", "slow")]


def test_status_says_degraded_engine_stalled_naming_the_pod() -> None:
    spec = deployment(stallDetection={"windowSeconds": 20})
    engine = {
        "metadata": {"name": "chat-tp1"},
        "spec": {"replicas": 1},
        "status": {"readyReplicas": 1, "replicas": 1, "updatedReplicas": 1},
    }
    message = "engine pod chat-tp1-abc has requests running and counted no token for 20 s"
    status = ready_status(
        old=LLMDeploymentStatus(),
        generation=1,
        plan=plan(spec),
        observed=Observed(engine=engine, old_engines=(), hpa=None, pods=(), stalled=message),
        endpoint="http://chat.team-a:8000",
    )
    (degraded,) = [c for c in status.conditions if c.type == "Degraded"]
    assert (degraded.status, degraded.reason) == ("True", "EngineStalled")
    assert "chat-tp1-abc" in degraded.message


def test_stalls_are_counted_per_deployment_until_it_is_deleted() -> None:
    labels = {"namespace": "stall-ns", "llmdeployment": "chat"}
    m.count_engine_stalls("stall-ns", "chat", 1)
    m.count_engine_stalls("stall-ns", "chat", 2)
    assert REGISTRY.get_sample_value("llmfleet_engine_stalls_total", labels) == 3
    m.forget("stall-ns", "chat")
    assert REGISTRY.get_sample_value("llmfleet_engine_stalls_total", labels) is None


def test_turned_off_the_gates_of_pods_still_carrying_it_open_and_nothing_is_read() -> None:
    closed, shut_out = (
        engine_pod("e-1", "10.0.0.1"),
        engine_pod("e-2", "10.0.0.2", "False"),
    )
    serving = engine_pod("e-3", "10.0.0.3", "True")
    assert opened([closed, shut_out, serving]) == {"e-1": True, "e-2": True}
