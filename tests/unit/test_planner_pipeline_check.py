"""vLLM's start-up KV cache check on every pipeline stage: the planner plans a pipeline-parallel
layout only where vLLM 0.32 would start it (llmfleet.planner.pipeline_stages).

Figures worked by hand for meta-llama/Llama-3.1-405B (catalog: 405.9B parameters, 126 layers,
8 KV heads of 128, vocabulary 128256, hidden 128 x 128 = 16384, MLP 53248):
* weights 405.9e9 x 2 B = 756.05 GiB; one embedding matrix 128256 x 16384 x 2 B = 3.91 GiB; the
  126 layers 756.05 - 2 x 3.91 = 748.22 GiB, 5.938 GiB each;
* KV at TP 8: one KV head per GPU, 2 x 128 x 2 B = 512 B per token and layer;
* GPUs under 70 GiB batch 8192 tokens: reserve 0.3 + 8192 x (6 x 53248 / 8 + 7 x 16384) B
  = 1.48 GiB.
"""

from __future__ import annotations

from typing import Any

import pytest

from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner import PlanError, plan
from llmfleet.planner.pipeline_stages import passes_kv_check, stage_layers

L405 = {"name": "meta-llama/Llama-3.1-405B-Instruct"}


def spec(
    count: int, memory: int, max_model_len: int | None = None, **more: Any
) -> LLMDeploymentSpec:
    engine = {} if max_model_len is None else {"maxModelLen": max_model_len}
    return LLMDeploymentSpec.model_validate(
        {
            "model": L405,
            "gpus": {"count": count, "memoryGiB": memory, "perNode": 8},
            "engine": engine,
            **more,
        }
    )


# Two nodes of 57 GiB GPUs, TP 8 x PP 2, 63 layers a stage: budget (57 - 0.82) x 0.9 = 50.56 GiB;
# weights 63 x 5.938 + 3.91 = 378.03 GiB a stage (the first holds the embeddings, the last the
# output head), 47.26 GiB a GPU; KV cache 50.56 - 47.26 - 1.48 = 1.82 GiB = 1954210938 B, in
# blocks of 63 x 512 x 16 = 516096 B: 3786 blocks, 60576 tokens. vLLM keeps one block back, so
# one sequence may take 3785 blocks: 60560 tokens.
#
# Three nodes of 40 GiB GPUs, TP 8 x PP 3, 42 layers a stage: budget 35.26 GiB; the first and
# last stages hold 42 x 5.938 + 3.91 = 253.32 GiB, 31.67 GiB a GPU (an even third of the weights
# would be 31.51); KV cache 35.26 - 31.67 - 1.48 = 2.11 GiB = 2265595248 B, in blocks of
# 42 x 512 x 16 = 344064 B: 6584 blocks (105344 tokens); 6583 usable, 105328 tokens. Sizing the
# stages by an even third gave 2.27 GiB, 7084 blocks, 113344 tokens: lengths up to that were
# planned and vLLM refused them on its first stage.
PLANNED = {
    "two-stages-one-sequence-beside-the-null-block": (spec(16, 57, 60560), 2, 60576),
    "three-stages-the-first-holding-the-embeddings": (spec(24, 40, 105328), 3, 105344),
    "the-shipped-405b-example-on-two-h100-nodes": (
        LLMDeploymentSpec.model_validate(
            {"model": L405, "gpus": {"count": 16, "perNode": 8, "profile": "h100-80gb"}}
        ),
        2,
        # cudaGiB 79.18 x 0.9 = 71.26; 16384 batched tokens reserve 2.66; 71.26 - 47.26 - 2.66
        # = 21.34 GiB = 22913654046 B / 516096 = 44398 blocks = 710368 tokens.
        710368,
    ),
}


@pytest.mark.parametrize(("given", "pp", "tokens"), PLANNED.values(), ids=PLANNED.keys())
def test_layouts_that_pass_vllms_check_on_every_stage_are_planned(
    given: LLMDeploymentSpec, pp: int, tokens: int
) -> None:
    p = plan(given)
    assert (p.strategy, p.pipeline_parallel_size) == ("MultiNode", pp)
    assert p.kv_cache_tokens_per_replica == tokens


REFUSED = {
    "the-null-block-leaves-one-block-too-few": (
        spec(16, 57, 60576),
        "spec.engine.maxModelLen",
        ["stage 1 (63 of 126 layers)", "3786 blocks", "3786 blocks) beside", "3787 in all"],
        "maxModelLen 60560 or less",
    ),
    "the-first-stage-holds-the-embeddings": (
        spec(24, 40, 110000),
        "spec.engine.maxModelLen",
        ["stage 1 (42 of 126 layers)", "31.67 GiB of weights", "6584 blocks", "6876 in all"],
        "maxModelLen 105328 or less",
    ),
    "a-length-set-in-extra-args-is-named-there": (
        spec(16, 57, None, engine={"extraArgs": ["--max-model-len", "60576"]}),
        "spec.engine.extraArgs",
        ["3787 in all"],
        "maxModelLen 60560 or less",
    ),
    "no-kv-cache-left-at-all-asks-for-nodes": (
        spec(16, 40),
        "spec.gpus.count",
        ["0 blocks"],
        "more nodes (spec.gpus.count)",
    ),
}


@pytest.mark.parametrize(
    ("given", "field", "numbers", "would_fit"), REFUSED.values(), ids=REFUSED.keys()
)
def test_layouts_vllm_would_refuse_are_refused_naming_the_field_and_what_fits(
    given: LLMDeploymentSpec, field: str, numbers: list[str], would_fit: str
) -> None:
    with pytest.raises(PlanError) as refused:
        plan(given)
    assert refused.value.field == field, refused.value
    for number in numbers:
        assert number in str(refused.value)
    assert would_fit in str(refused.value)


def test_the_lengths_the_refusal_offers_are_planned() -> None:
    assert plan(spec(16, 57, 60560)).pipeline_parallel_size == 2
    assert plan(spec(24, 40, 105328)).pipeline_parallel_size == 3


@pytest.mark.parametrize(
    ("layers", "pp", "split"),
    [
        (126, 2, (63, 63)),
        (126, 3, (42, 42, 42)),
        # 126 = 4 x 31 + 2: the two middle stages take one more (vLLM's get_pp_indices).
        (126, 4, (31, 32, 32, 31)),
        # 80 = 3 x 26 + 2: every stage but the last, from the last but one back.
        (80, 3, (27, 27, 26)),
        (32, 1, (32,)),
    ],
)
def test_stages_get_layers_as_vllm_splits_them(
    layers: int, pp: int, split: tuple[int, ...]
) -> None:
    assert stage_layers(layers, pp) == split


@pytest.mark.parametrize(
    ("blocks", "per_sequence", "starts"),
    [(3786, 3786, False), (3787, 3786, True), (1, 0, True), (0, 0, False)],
)
def test_vllm_starts_only_with_a_sequence_beside_the_null_block(
    blocks: int, per_sequence: int, starts: bool
) -> None:
    assert passes_kv_check(blocks, per_sequence) is starts
