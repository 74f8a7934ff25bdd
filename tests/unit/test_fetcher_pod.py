"""The adapter fetcher beside LoRA engines (render/fetcher.py): a second container of the
operator's image in every single-node LoRA engine pod, whatever the adapters' sources (adding an
s3:// adapter must not change the pod template), sharing a volume the engine reads, given the
object store's settings, and admitted by the NetworkPolicy from the operator only."""

from __future__ import annotations

from typing import Any

import pytest
from loralayouts import LAYOUTS, MODEL, OWNER, engine_pod_templates, vllm, with_lora
from stuckpods import waiting

from llmfleet.fetcher.paths import FETCH_ROOT, FETCHER_PORT
from llmfleet.models import LLMDeploymentSpec
from llmfleet.models.network_policy import parse_engine_network_policy
from llmfleet.planner import plan
from llmfleet.reconcile.machinery.pod_blockers import blockers
from llmfleet.reconcile.machinery.references import deployment_references
from llmfleet.render import render_fleet
from llmfleet.settings import OperatorSettings

IMAGE = "registry.example/llmfleet/operator@sha256:" + "a" * 64
STORE = {"endpoint": "https://minio.storage:9000", "region": "eu-west-1", "secretRef": "s3-keys"}


def fetcher(template: dict[str, Any]) -> dict[str, Any] | None:
    found = [c for c in template["spec"]["containers"] if c["name"] == "adapter-fetcher"]
    return found[0] if found else None


def templates(spec: LLMDeploymentSpec, image: str = IMAGE) -> dict[str, dict[str, Any]]:
    out = {}
    for obj in render_fleet(
        OWNER, spec, plan(spec), OperatorSettings(adapter_fetcher_image=image).fleet
    ).objects():
        if obj["kind"] == "Deployment" and not obj["metadata"]["name"].endswith("-router"):
            out[obj["metadata"]["name"]] = obj["spec"]["template"]
    return out


@pytest.mark.parametrize("layout", ["single-pod", "multi-pod", "cpu-only"])
def test_a_single_node_lora_engine_runs_the_fetcher_on_a_volume_it_shares(layout: str) -> None:
    (template,) = templates(with_lora(LAYOUTS[layout])).values()
    container = fetcher(template)

    assert container is not None
    assert container["image"] == IMAGE
    assert container["command"] == ["llmfleet"]
    assert container["args"][:2] == ["fetch-adapters", "--host"]
    assert f"--port {FETCHER_PORT} --dir {FETCH_ROOT}" in " ".join(container["args"])
    volume = next(v for v in template["spec"]["volumes"] if v["name"] == "adapter-fetch")
    assert volume["emptyDir"]["sizeLimit"].endswith("Mi")
    assert {"name": "adapter-fetch", "mountPath": FETCH_ROOT} in container["volumeMounts"]
    assert {"name": "adapter-fetch", "mountPath": FETCH_ROOT, "readOnly": True} in vllm(template)[
        "volumeMounts"
    ]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "fetcher"}


def test_engines_without_lora_and_multi_node_replicas_run_no_fetcher() -> None:
    without = engine_pod_templates(LLMDeploymentSpec.model_validate(LAYOUTS["single-pod"]))
    multi_node = engine_pod_templates(with_lora(LAYOUTS["multi-node"]))

    assert all(fetcher(t) is None for t in [*without.values(), *multi_node.values()])
    assert all(
        v["name"] != "adapter-fetch" for t in multi_node.values() for v in t["spec"]["volumes"]
    )


def test_adding_object_store_and_revisioned_adapters_leaves_the_pod_template_as_it_was() -> None:
    body = {**LAYOUTS["single-pod"], "engine": {"lora": {}}}
    before = templates(LLMDeploymentSpec.model_validate(body))
    after = templates(
        LLMDeploymentSpec.model_validate(
            {
                **body,
                "adapters": [
                    {"name": "sql", "source": "s3://team/sql"},
                    {"name": "chat", "source": "gs://team/chat"},
                    {"name": "tool", "source": "org/tool-lora", "revision": "v2"},
                ],
            }
        )
    )

    assert after == before


def test_the_object_store_reaches_the_fetcher_as_flags_and_the_secret_as_environment() -> None:
    spec = with_lora(LAYOUTS["single-pod"], objectStore=STORE)
    container = fetcher(next(iter(templates(spec).values())))

    assert container is not None
    args = " ".join(container["args"])
    assert "--s3-endpoint https://minio.storage:9000" in args
    assert "--s3-region eu-west-1" in args
    assert container["envFrom"] == [{"secretRef": {"name": "s3-keys"}}]


def test_the_fetcher_gets_the_hub_token_and_its_own_address_not_the_engines_settings() -> None:
    body = {
        **LAYOUTS["single-pod"],
        "model": {**MODEL, "tokenSecretRef": {"name": "hf", "key": "t"}},
    }
    spec = with_lora(body, objectStore={"region": "us-east-2"})
    container = fetcher(next(iter(templates(spec).values())))

    assert container is not None
    env = {e["name"]: e for e in container["env"]}
    assert set(env) == {"HF_TOKEN", "POD_IP", "LLMFLEET_FETCHER_TOKEN"}
    assert env["LLMFLEET_FETCHER_TOKEN"]["valueFrom"] == {
        "secretKeyRef": {"name": f"{OWNER.name}-fetcher", "key": "token"}
    }
    assert env["HF_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "hf", "key": "t"}}
    assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert "$(POD_IP)" in container["args"]
    assert "envFrom" not in container


def test_only_the_operator_may_reach_the_fetcher_through_the_network_policy() -> None:
    policy = parse_engine_network_policy(
        '{"operator": [{"namespaceSelector": {"matchLabels": {"name": "llmfleet"}}}]}'
    )
    spec = with_lora(LAYOUTS["multi-pod"])
    (netpol,) = [
        o
        for o in render_fleet(
            OWNER, spec, plan(spec), OperatorSettings(engine_network_policy=policy).fleet
        ).objects()
        if o["kind"] == "NetworkPolicy"
    ]
    rules = netpol["spec"]["ingress"]
    fetcher_rule = next(r for r in rules if r["ports"][0]["port"] == "fetcher")

    assert fetcher_rule["from"] == [{"namespaceSelector": {"matchLabels": {"name": "llmfleet"}}}]


def test_the_operators_token_reaches_the_fetcher_and_never_the_engine() -> None:
    (template,) = templates(with_lora(LAYOUTS["single-pod"])).values()
    container = fetcher(template)

    assert container is not None
    refs = [e["valueFrom"].get("secretKeyRef") for e in container["env"] if "valueFrom" in e]
    assert {"name": f"{OWNER.name}-fetcher", "key": "token"} in refs
    engine_refs = [e.get("valueFrom", {}).get("secretKeyRef") for e in vllm(template)["env"]]
    assert {"name": f"{OWNER.name}-fetcher", "key": "token"} not in engine_refs


def size_limit_mib(template: dict[str, Any]) -> int:
    volume = next(v for v in template["spec"]["volumes"] if v["name"] == "adapter-fetch")
    return int(volume["emptyDir"]["sizeLimit"].removesuffix("Mi"))


def test_the_volume_is_sized_by_rank_and_adapters_kept_and_the_fetcher_refuses_first() -> None:
    base = with_lora(LAYOUTS["single-pod"], maxRank=16, maxCpuAdapters=4)
    (small,) = templates(base).values()
    (higher_rank,) = templates(
        with_lora(LAYOUTS["single-pod"], maxRank=64, maxCpuAdapters=4)
    ).values()
    (more_kept,) = templates(
        with_lora(LAYOUTS["single-pod"], maxRank=16, maxCpuAdapters=8)
    ).values()

    assert size_limit_mib(small) < size_limit_mib(higher_rank)
    assert size_limit_mib(small) < size_limit_mib(more_kept)
    container = fetcher(small)
    assert container is not None
    args = container["args"]
    assert args[args.index("--max-adapters") + 1] == "4"
    total = int(args[args.index("--max-total-bytes") + 1])
    # The fetcher's cap lies within the volume's limit, or the kubelet evicts the engine first.
    assert total <= size_limit_mib(small) << 20
    assert int(args[args.index("--max-bytes") + 1]) <= total


def test_a_missing_object_store_secret_is_named_by_its_field() -> None:
    spec = with_lora(LAYOUTS["single-pod"], objectStore=STORE)
    pod = waiting("CreateContainerConfigError", 'secret "s3-keys" not found', "adapter-fetcher")
    (found,) = blockers([pod], deployment_references(spec, plan(spec)))

    assert (found.field, found.reason) == (
        "spec.engine.lora.objectStore.secretRef",
        "AdapterStoreSecretNotFound",
    )
