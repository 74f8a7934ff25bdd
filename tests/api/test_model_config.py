"""An LLMDeployment of a model that neither the catalog nor the spec describes, planned from its
config.json as a stand-in for the Hugging Face Hub serves it (the chart's huggingFace.endpoint,
the operator's --hf-endpoint): the same plan as with the architecture typed in, and a Hub that
does not have the model, or fails, named in Planned and an Event."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hubstub import Answer, HubStub, hub_stub
from kubernetes import client
from localcluster.operator_process import condition, get_llmd
from localcluster.operator_thread import ThreadOperator
from localcluster.supervisor import Cluster
from localcluster.waiting import wait_until
from manifests import apply, deployments, llmd

from llmfleet.catalog.hfconfig import architecture_from_config
from llmfleet.catalog.known_models import lookup_architecture
from llmfleet.render.names import DEPLOYMENT_LABEL

pytestmark = pytest.mark.cluster

# The published config.json of meta-llama/Llama-3.1-8B, under a repo id the catalog lacks.
CONFIG = json.loads((Path(__file__).parents[1] / "unit/data/llama-3.1-8b-config.json").read_text())
REPO = "acme-labs/llama-8b-support-ft"
# A profile with performance constants, so the plans carry predicted figures to compare.
GPUS = {"profile": "h100-80gb", "count": 2}


@pytest.fixture(scope="module")
def hub() -> Iterator[HubStub]:
    with hub_stub() as stub:
        yield stub


@pytest.fixture(scope="module")
def hub_operator(chart: ThreadOperator, hub: HubStub) -> Iterator[ThreadOperator]:
    """The package's operator, installed and started with huggingFace.endpoint at the stand-in,
    then put back as it was."""
    was_running, values = chart.running(), chart.chart_values
    chart.stop()
    chart.chart_values = (*values, f"huggingFace.endpoint={hub.url}")
    chart.install_identity()
    chart.start()
    yield chart
    chart.stop()
    chart.chart_values = values
    chart.install_identity()
    if was_running:
        chart.start()


def planned(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    obj = get_llmd(api, namespace, name)
    return obj if condition(obj, "Planned").get("status") == "True" else None


def refused(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    found = condition(get_llmd(api, namespace, name), "Planned")
    return found if found.get("status") == "False" else None


def warning_events(api: client.ApiClient, namespace: str, name: str, reason: str) -> list[str]:
    return [
        e.message
        for e in client.CoreV1Api(api)
        .list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}")
        .items
        if e.type == "Warning" and e.reason == reason
    ]


def test_a_model_without_architecture_plans_as_its_config_json_typed_in(
    hub_operator: ThreadOperator,
    hub: HubStub,
    api: client.ApiClient,
    cluster: Cluster,
    namespace: str,
) -> None:
    assert lookup_architecture(REPO) is None
    hub.serve_config(REPO, CONFIG)
    typed = architecture_from_config(CONFIG).model_dump(by_alias=True, exclude_none=True)
    apply(cluster, namespace, llmd("typed", model={"name": REPO, "architecture": typed}, gpus=GPUS))
    apply(cluster, namespace, llmd("fetched", model={"name": REPO}, gpus=GPUS))

    by_hand = wait_until(lambda: planned(api, namespace, "typed"), what="typed planned")
    fetched = wait_until(lambda: planned(api, namespace, "fetched"), what="fetched planned")

    assert fetched["status"]["plan"] == by_hand["status"]["plan"]
    assert fetched["status"]["predicted"] == by_hand["status"]["predicted"]
    assert fetched["status"]["plan"]["kvCacheTokensPerReplica"] > 0
    # The CRD's status schema keeps the predicted start (a field it lacked would be pruned).
    startup = fetched["status"]["plan"]["startup"]
    assert startup["cold"]["totalSeconds"] > startup["warm"]["totalSeconds"] > 0
    assert startup["probeBudgetSeconds"] >= 2 * startup["cold"]["compileSeconds"]
    args = {
        d.metadata.labels[DEPLOYMENT_LABEL]: d.spec.template.spec.containers[0].args
        for d in deployments(api, namespace)
    }
    assert args["fetched"] == args["typed"]
    assert (
        f"Architecture from config.json of {REPO}@main." in condition(fetched, "Planned")["message"]
    )
    assert "Architecture from spec.model.architecture." in condition(by_hand, "Planned")["message"]
    # Read once for both and every resync since: the cache, and "typed" never asked.
    assert len(hub.asked(REPO)) == 1
    assert "Authorization" not in hub.asked(REPO)[0]


def test_a_model_the_hub_does_not_have_is_refused_naming_the_field_and_url(
    hub_operator: ThreadOperator,
    hub: HubStub,
    api: client.ApiClient,
    cluster: Cluster,
    namespace: str,
) -> None:
    apply(cluster, namespace, llmd("typo", model={"name": "acme-labs/no-such-model"}))

    found = wait_until(lambda: refused(api, namespace, "typo"), what="typo refused")

    assert found["reason"] == "ModelConfigNotFound"
    assert found["message"].startswith(
        "spec.model.name: no config.json of acme-labs/no-such-model@main"
    )
    assert (
        f"{hub.url}/acme-labs/no-such-model/resolve/main/config.json answered 404"
        in found["message"]
    )
    wait_until(
        lambda: warning_events(api, namespace, "typo", "ModelConfigNotFound"),
        what="a Warning Event ModelConfigNotFound",
    )


def test_a_hub_that_fails_is_named_and_retried_until_it_answers(
    hub_operator: ThreadOperator,
    hub: HubStub,
    api: client.ApiClient,
    cluster: Cluster,
    namespace: str,
) -> None:
    repo = "acme-labs/llama-8b-later"
    hub.answer(repo, Answer(503, b"maintenance"))
    apply(cluster, namespace, llmd("later", model={"name": repo}))

    found = wait_until(lambda: refused(api, namespace, "later"), what="later refused")
    assert found["reason"] == "ModelConfigUnavailable"
    assert f"{hub.url}/{repo}/resolve/main/config.json answered 503" in found["message"]
    wait_until(
        lambda: warning_events(api, namespace, "later", "ModelConfigUnavailable"),
        what="a Warning Event ModelConfigUnavailable",
    )

    hub.serve_config(repo, CONFIG)
    # Retried with the resource's backoff, not at the next resync.
    wait_until(lambda: planned(api, namespace, "later"), timeout=30, what="later planned")
    assert len(hub.asked(repo)) >= 2


# A pre-quantized checkpoint's published config.json (4-bit AWQ), under a repo id of its own.
AWQ = json.loads(
    (
        Path(__file__).parents[1] / "unit/data/hf-configs/Qwen--Qwen2.5-7B-Instruct-AWQ.json"
    ).read_text()
)
AWQ_REPO = "acme-labs/qwen-7b-awq"


def test_a_quantized_checkpoint_is_planned_in_its_format_and_a_spec_contradicting_it_refused(
    hub_operator: ThreadOperator,
    hub: HubStub,
    api: client.ApiClient,
    cluster: Cluster,
    namespace: str,
) -> None:
    hub.serve_config(AWQ_REPO, AWQ)
    apply(cluster, namespace, llmd("awq", model={"name": AWQ_REPO}, gpus=GPUS))
    apply(
        cluster,
        namespace,
        llmd("gptq", model={"name": AWQ_REPO, "quantization": "gptq"}, gpus=GPUS),
    )

    found = wait_until(lambda: planned(api, namespace, "awq"), what="awq planned")
    wrong = wait_until(lambda: refused(api, namespace, "gptq"), what="gptq refused")

    assert (
        f"Weights: 4-bit AWQ weights, one 16-bit scale and zero point per 128 inputs, from the "
        f"quantization_config of config.json of {AWQ_REPO}@main."
    ) in condition(found, "Planned")["message"]
    # Not the 14.2 GiB the 16-bit model would take.
    assert "5.2 GiB of 4-bit AWQ weights" in condition(found, "Planned")["message"]
    (deployment,) = [
        d for d in deployments(api, namespace) if d.metadata.labels[DEPLOYMENT_LABEL] == "awq"
    ]
    assert "--quantization" not in deployment.spec.template.spec.containers[0].args
    assert wrong["reason"] == "QuantizationMismatch"
    assert wrong["message"].startswith(
        f"spec.model.quantization: gptq contradicts config.json of "
        f"{AWQ_REPO}@main, whose quantization_config says quant_method awq"
    )
    wait_until(
        lambda: warning_events(api, namespace, "gptq", "QuantizationMismatch"),
        what="a Warning Event QuantizationMismatch",
    )
