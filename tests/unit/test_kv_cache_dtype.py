"""spec.engine.kvCacheDtype (or --kv-cache-dtype in extraArgs): an fp8 KV cache holds twice the
tokens in the same memory, as vLLM allocates it, decodes long contexts faster, is passed to vLLM
when not auto, and PlanVerified holds the engines to that figure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from llmfleet.catalog.known_models import lookup_architecture
from llmfleet.models import LLMDeploymentSpec
from llmfleet.models.crd import custom_resource_definition
from llmfleet.models.resources import LLMDEPLOYMENT
from llmfleet.planner import Plan, PlanError, plan
from llmfleet.planner.kv_cache import KV_BLOCK_TOKENS
from llmfleet.planner.performance import Gpu, pod_model
from llmfleet.reconcile.llmdeployment.plan_verified import plan_verified

MODEL = "meta-llama/Llama-3.1-8B-Instruct"  # in the catalog
H100 = {"count": 1, "profile": "h100-80gb"}
DEEPSEEK = json.loads(
    (Path(__file__).parent / "data/hf-configs/deepseek-ai--DeepSeek-V3.json").read_text()
)


def planned(engine: dict[str, Any], **rest: Any) -> Plan:
    return plan(
        LLMDeploymentSpec.model_validate(
            {"model": {"name": MODEL}, "gpus": H100, "engine": engine, **rest}
        )
    )


@pytest.mark.parametrize(
    "engine",
    [
        pytest.param({"kvCacheDtype": "fp8"}, id="fp8"),
        pytest.param({"kvCacheDtype": "fp8_e4m3"}, id="fp8-e4m3"),
        pytest.param({"kvCacheDtype": "fp8_e5m2"}, id="fp8-e5m2"),
        pytest.param({"extraArgs": ["--kv-cache-dtype", "fp8"]}, id="extra-args"),
        pytest.param({"extraArgs": ["--kv_cache_dtype=fp8_e4m3"]}, id="extra-args-underscored"),
    ],
)
def test_an_fp8_kv_cache_holds_twice_the_tokens_in_the_same_memory(
    engine: dict[str, Any],
) -> None:
    sixteen = planned({})
    fp8 = planned(engine)

    assert fp8.kv_cache_gib_per_gpu == sixteen.kv_cache_gib_per_gpu
    # One byte per element instead of two: twice the blocks, to within the one block the
    # rounding of the cache into whole blocks can lose.
    doubled = 2 * sixteen.kv_cache_tokens_per_replica
    assert doubled <= fp8.kv_cache_tokens_per_replica < doubled + 2 * KV_BLOCK_TOKENS
    assert fp8.max_concurrent_sequences >= sixteen.max_concurrent_sequences


def test_multi_latent_attention_caches_its_latent_in_one_byte_per_element() -> None:
    gpus = {"count": 8, "profile": "h200-141gb"}
    spec = {"model": {"name": "deepseek-ai/DeepSeek-V3"}, "gpus": gpus}
    sixteen = plan(LLMDeploymentSpec.model_validate(spec), model_config=DEEPSEEK)
    fp8 = plan(
        LLMDeploymentSpec.model_validate({**spec, "engine": {"kvCacheDtype": "fp8"}}),
        model_config=DEEPSEEK,
    )

    # 61 layers x (512 latent + 64 rotary) x 1 byte per token on every GPU, not x 2.
    assert "34.3125 KiB of KV cache per token" in " ".join(fp8.reason.split())
    assert fp8.kv_cache_tokens_per_replica >= 2 * sixteen.kv_cache_tokens_per_replica


@pytest.mark.parametrize(
    ("engine", "rendered"),
    [
        pytest.param({}, None, id="auto-passes-nothing"),
        pytest.param({"kvCacheDtype": "auto"}, None, id="auto-named"),
        pytest.param({"kvCacheDtype": "fp8"}, ["fp8"], id="fp8"),
        pytest.param({"kvCacheDtype": "bfloat16"}, ["bfloat16"], id="bfloat16"),
        # The user's flag replaces the derived one in place: vLLM sees it once.
        pytest.param(
            {"kvCacheDtype": "fp8", "extraArgs": ["--kv-cache-dtype", "fp8_e5m2"]},
            ["fp8_e5m2"],
            id="extra-args-win",
        ),
    ],
)
def test_the_kv_cache_dtype_is_passed_to_vllm_when_not_auto(
    engine: dict[str, Any], rendered: list[str] | None
) -> None:
    args = list(planned(engine).vllm_args)

    given = [args[i + 1] for i, arg in enumerate(args) if arg == "--kv-cache-dtype"]
    assert given == (rendered or [])


def test_a_kv_cache_dtype_in_extra_args_the_planner_cannot_size_is_refused_naming_the_allowed() -> (
    None
):
    with pytest.raises(PlanError) as refused:
        planned({"extraArgs": ["--kv-cache-dtype", "nvfp4"]})

    assert refused.value.field == "spec.engine.extraArgs"
    assert "--kv-cache-dtype 'nvfp4'" in refused.value.message
    assert "auto, bfloat16, float16, fp8, fp8_e4m3, fp8_e5m2" in refused.value.message


def test_a_kv_cache_dtype_the_engine_does_not_take_is_refused_before_planning() -> None:
    with pytest.raises(ValidationError, match="'auto', 'bfloat16', 'float16', 'fp8', 'fp8_e4m3'"):
        LLMDeploymentSpec.model_validate(
            {"model": {"name": MODEL}, "engine": {"kvCacheDtype": "int8"}}
        )
    schema = custom_resource_definition(LLMDEPLOYMENT)["spec"]["versions"][0]["schema"][
        "openAPIV3Schema"
    ]
    engine = schema["properties"]["spec"]["properties"]["engine"]["properties"]
    # The API server refuses any other value, naming these (tests/api/test_llmdeployment.py).
    assert engine["kvCacheDtype"]["enum"] == [
        "auto",
        "bfloat16",
        "float16",
        "fp8",
        "fp8_e4m3",
        "fp8_e5m2",
    ]


def test_an_fp8_kv_cache_decodes_long_contexts_faster() -> None:
    llama = lookup_architecture(MODEL)
    assert llama is not None
    gpu = Gpu(hbm_gbps=3350, bf16_tflops=989, fp8_tflops=1979, interconnect_gbps=450)
    common: dict[str, Any] = {
        "dtype": "auto",
        "quantization": "none",
        "tensor_parallel_size": 1,
        "gpu": gpu,
        "max_num_batched_tokens": 8192,
    }
    sixteen = pod_model(llama, **common)
    fp8 = pod_model(llama, kv_cache_dtype="fp8", **common)

    # 64 sequences at 16k tokens of context read 128 KiB per token each step in 16 bits.
    assert fp8.itl_s(64, 16_000, 0) < 0.75 * sixteen.itl_s(64, 16_000, 0)
    # One short sequence reads mostly weights: the cache's dtype hardly matters.
    assert fp8.itl_s(1, 100, 0) == pytest.approx(sixteen.itl_s(1, 100, 0), rel=0.02)


def test_plan_verified_holds_the_engines_to_the_fp8_figure() -> None:
    sixteen = planned({}).kv_cache_tokens_per_replica
    fp8 = planned({"kvCacheDtype": "fp8"}).kv_cache_tokens_per_replica

    assert plan_verified(fp8, fp8, 1).status == "True"
    # An engine that ignored the setting would allocate the 16-bit figure: half the plan's.
    assert plan_verified(sixteen, fp8, 1).status == "False"


def test_a_spec_whose_kv_cache_does_not_fit_hears_that_fp8_would() -> None:
    # Llama-3.1-8B on one 24 GiB GPU at 40,000 tokens: 4.72 GiB left after weights and reserve,
    # one sequence needs 4.88 GiB in 16 bits and 2.44 in fp8.
    small = {"count": 1, "memoryGiB": 24}
    engine = {"maxModelLen": 40_000}
    with pytest.raises(PlanError) as refused:
        planned(engine, gpus=small)

    assert "spec.engine.kvCacheDtype fp8 (1 full-length sequence of KV cache" in str(refused.value)
    assert planned({**engine, "kvCacheDtype": "fp8"}, gpus=small).max_concurrent_sequences >= 1


@pytest.mark.parametrize(
    ("spec", "field", "said"),
    [
        pytest.param(
            {
                "model": {"name": "deepseek-ai/DeepSeek-V3"},
                "gpus": {"count": 8, "profile": "h200-141gb"},
                "engine": {"kvCacheDtype": "fp8_e5m2"},
            },
            "spec.engine.kvCacheDtype",
            "kvCacheDtype fp8_e5m2: no attention backend of vLLM 0.32 on NVIDIA GPUs reads it for "
            "multi-latent attention (kvLoraRank), so the engine would not start; use one of auto, "
            "bfloat16, float16, fp8, fp8_e4m3",
            id="mla-e5m2-on-gpus",
        ),
        pytest.param(
            {
                "model": {"name": "deepseek-ai/DeepSeek-V3"},
                "gpus": {"count": 8, "profile": "h200-141gb"},
                "engine": {"extraArgs": ["--kv-cache-dtype=fp8_e5m2"]},
            },
            "spec.engine.extraArgs",
            "kvCacheDtype fp8_e5m2: no attention backend",
            id="mla-e5m2-in-extra-args",
        ),
        pytest.param(
            {"model": {"name": MODEL}, "engine": {"kvCacheDtype": "bfloat16"}},
            "spec.engine.kvCacheDtype",
            "kvCacheDtype bfloat16: no attention backend of vLLM 0.32 on CPUs reads it for this "
            "model, so the engine would not start; use one of auto, fp8, fp8_e4m3, fp8_e5m2",
            id="16-bit-named-on-cpu",
        ),
    ],
)
def test_a_kv_cache_dtype_no_attention_backend_reads_is_refused_before_any_pod(
    spec: dict[str, Any], field: str, said: str
) -> None:
    with pytest.raises(PlanError) as refused:
        plan(LLMDeploymentSpec.model_validate(spec), model_config=DEEPSEEK)

    assert refused.value.field == field
    assert said in refused.value.message
