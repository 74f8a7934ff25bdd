"""`spec.engine.extraArgs` against the pinned vLLM's `vllm serve` flags (planner/engine_flags.py;
its table, planner/vllm_flags.json, is what `make engine-flags` reads from vLLM's own parser), and
every engine command LLMFleet renders, the examples' and 300 random specs', against the same
table. tests/e2e/test_engine_flags_vllm.py runs the same commands through vLLM's parser itself
and checks that the committed table is what the make target generates now."""

from __future__ import annotations

from typing import Any

import pytest
from enginecommands import example_commands, fuzzed_commands
from pydantic import ValidationError

from llmfleet.models import DEFAULT_ENGINE_IMAGE, LLMDeploymentSpec
from llmfleet.planner import Plan, PlanError, plan
from llmfleet.planner.engine_args import EXTRA_ARGS_FIELD
from llmfleet.planner.engine_flags import check_engine_args, pinned_flags

TABLE = pinned_flags()


def planned(extra: list[str], **engine: Any) -> Plan:
    manifest = {
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
        "gpus": {"count": 1, "memoryGiB": 80},
        "engine": {"extraArgs": extra, **engine},
    }
    return plan(LLMDeploymentSpec.model_validate(manifest))


def test_the_table_is_the_chart_default_engines_vllm() -> None:
    assert DEFAULT_ENGINE_IMAGE.endswith(f":v{TABLE.vllm_version}")
    assert TABLE.flags["--max-num-seqs"].takes == "one"
    assert TABLE.flags["--enforce-eager"].takes == "none"
    assert TABLE.flags["--scheduling-policy"].choices == ("fcfs", "priority")


# (extraArgs, what the refusal names, the hint it gives, reason)
REFUSED = [
    pytest.param(
        ["--max-num-seq=8"], "--max-num-seq ", "did you mean --max-num-seqs?",
        "UnknownEngineFlag", id="abbreviation-vllm-would-guess",
    ),
    pytest.param(
        ["--max-nm-seqs", "8"], "--max-nm-seqs ", "did you mean --max-num-seqs?",
        "UnknownEngineFlag", id="misspelt",
    ),
    pytest.param(
        ["--disable-log-requests"], "--disable-log-requests ", "a flag that version removed",
        "UnknownEngineFlag", id="removed-before-0.32",
    ),
    pytest.param(
        ["--swap-space", "4"], "--swap-space ", "vllm serve 0.32.0",
        "UnknownEngineFlag", id="removed-swap-space",
    ),
    pytest.param(
        ["--enable-prefix-caching", "true"], "'true' ", "follows no flag that takes a value",
        "UnknownEngineFlag", id="value-after-a-switch",
    ),
    pytest.param(
        ["--dtype", "fp16"], "--dtype 'fp16'", "auto, bfloat16, float, float16, float32, half",
        "InvalidEngineFlagValue", id="value-outside-choices",
    ),
    pytest.param(
        ["--kv_cache_dtype=fp9"], "--kv_cache_dtype 'fp9'", "auto, ", "InvalidEngineFlagValue",
        id="underscored-flag-value-outside-choices",
    ),
    pytest.param(
        ["--enforce-eager=true"], "--enforce-eager ", "takes no value",
        "InvalidEngineFlagValue", id="switch-given-a-value",
    ),
    pytest.param(
        ["--max-num-seqs"], "--max-num-seqs ", "needs a value",
        "InvalidEngineFlagValue", id="value-missing",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("extra", "names", "hint", "reason"), REFUSED)
def test_extra_args_the_pinned_vllm_would_refuse_are_refused_naming_the_flag(
    extra: list[str], names: str, hint: str, reason: str
) -> None:
    with pytest.raises(PlanError) as refused:
        planned(extra)
    assert refused.value.field == EXTRA_ARGS_FIELD
    assert refused.value.reason == reason
    assert names in refused.value.message
    assert hint in refused.value.message


@pytest.mark.parametrize(
    "extra",
    [
        pytest.param(["--enable-prefix-caching"], id="switch"),
        pytest.param(["--no-enable-prefix-caching"], id="negated-switch"),
        pytest.param(["--max_num_seqs=8"], id="underscores-as-vllm-reads-them"),
        pytest.param(["--seed", "-1"], id="negative-value"),
        pytest.param(["-q", "fp8"], id="short-flag"),
        pytest.param(["-O3"], id="optimization-level-shorthand"),
        pytest.param(["--compilation-config.mode", "3"], id="json-config-key"),
        pytest.param(["--kv-cache-dtype", "fp8"], id="value-among-choices"),
    ],
)
def test_flags_the_pinned_vllm_takes_plan(extra: list[str]) -> None:
    args = planned(extra).vllm_args
    assert all(token in args for token in extra)


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        pytest.param(["--model", "other/model"], "--model", id="model"),
        pytest.param(["--served_model_name=x"], "--served-model-name", id="served-name"),
        pytest.param(["--revision", "main"], "--revision", id="revision"),
        pytest.param(["--shutdown-timeout", "0"], "--shutdown-timeout", id="shutdown-timeout"),
        pytest.param(["--port", "9000"], "--port", id="port-as-before"),
        pytest.param(["8"], "must start with a flag", id="a-bare-value-first"),
    ],
)
def test_flags_llmfleet_sets_are_refused_by_the_schema(extra: list[str], flag: str) -> None:
    with pytest.raises(ValidationError, match=flag):
        planned(extra)


def test_another_engine_image_may_take_flags_the_pinned_vllm_does_not_know() -> None:
    newer = planned(["--some-future-flag", "1"], image="vllm/vllm-openai:v0.40.0")
    assert newer.vllm_args[-2:] == ("--some-future-flag", "1")


EXAMPLES = example_commands()
FUZZED = fuzzed_commands()


def test_the_examples_cover_a_deployment_and_a_multi_node_leader_and_worker() -> None:
    kinds = {where.split(": ")[1].split(" ", 2)[1] for where in EXAMPLES}
    assert kinds == {"template", "leaderTemplate", "workerTemplate"}
    assert len(FUZZED) == 300


@pytest.mark.parametrize("where", [*EXAMPLES, *FUZZED])
def test_every_rendered_engine_command_parses_with_the_pinned_flags(where: str) -> None:
    argv = EXAMPLES.get(where) or FUZZED[where]
    # The model positional: vLLM 0.32 still takes --model, deprecated, "to be removed".
    assert not argv[0].startswith("-")
    assert not any(a.split("=")[0] == "--model" for a in argv)
    check_engine_args(argv, TABLE, positionals=1, field=where)


@pytest.mark.parametrize(
    ("change", "refused"),
    [
        pytest.param(lambda a: [*a, "--dtype", "fp16"], "--dtype 'fp16'", id="bad-choice"),
        pytest.param(lambda a: [*a, "--max-num-seq", "8"], "--max-num-seq ", id="abbreviation"),
        pytest.param(lambda a: [*a, "--disable-log-requests"], "--disable-log-", id="removed"),
    ],
)
def test_the_command_check_can_fail(change: Any, refused: str) -> None:
    argv = next(iter(EXAMPLES.values()))
    with pytest.raises(PlanError, match=refused):
        check_engine_args(change(argv), TABLE, positionals=1)
