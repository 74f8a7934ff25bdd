"""The LLMBatchJob's API model, CRD and rendered Indexed Job."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from localcluster.metricsstack.load import TINY_ARCHITECTURE
from pydantic import ValidationError

from llmfleet.cli import main
from llmfleet.models import DEFAULT_BATCH_IMAGE, LLMBatchJobSpec, describe_validation_error
from llmfleet.models.crd import custom_resource_definition
from llmfleet.models.resources import LLMBATCHJOB
from llmfleet.planner import PlanError, plan
from llmfleet.render.batchjob import (
    BatchOwner,
    SpareClassUnsetError,
    job_name,
    parallelism,
    render_batch_job,
)
from llmfleet.settings import OperatorSettings

FLEET = OperatorSettings().fleet

REPO = Path(__file__).resolve().parents[2]
OWNER = BatchOwner(name="nightly", namespace="team", uid="u-1")
TINY = TINY_ARCHITECTURE


def spec(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
        "gpus": {"count": 4, "memoryGiB": 80, "perNode": 8},
        "input": {"persistentVolumeClaim": {"claimName": "data", "path": "in/p.jsonl"}},
        "output": {"persistentVolumeClaim": {"claimName": "data", "path": "out/run-1"}},
    }
    base.update(over)
    return base


def job(**over: Any) -> dict[str, Any]:
    s = LLMBatchJobSpec.model_validate(spec(**over))
    return render_batch_job(OWNER, s, plan(s.deployment_spec()), FLEET)


def container(j: dict[str, Any]) -> dict[str, Any]:
    (c,) = j["spec"]["template"]["spec"]["containers"]
    return dict(c)


def arg(c: dict[str, Any], flag: str) -> str:
    args = c["args"]
    return str(args[args.index(flag) + 1])


def test_the_job_is_indexed_with_one_completion_per_shard_from_the_plan() -> None:
    j = job()
    assert j["spec"]["completionMode"] == "Indexed"
    assert (j["spec"]["completions"], j["spec"]["parallelism"]) == (4, 4)  # 4 pods of TP=1
    assert j["spec"]["backoffLimitPerIndex"] == 3
    assert j["spec"]["podReplacementPolicy"] == "Failed"
    assert j["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert j["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "llmfleet.dev/v1alpha1",
            "kind": "LLMBatchJob",
            "name": "nightly",
            "uid": "u-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert arg(container(j), "--shards") == "4"


@pytest.mark.parametrize(
    ("over", "completions", "parallelism"),
    [
        ({}, 4, 4),
        ({"shards": 32}, 32, 32),
        ({"shards": 32, "parallelism": 8}, 32, 8),
        ({"parallelism": 2}, 4, 2),
        ({"shards": 8, "parallelism": 8}, 8, 8),
    ],
    ids=["plan", "shards", "fewer-at-once", "plan-fewer-at-once", "as-many"],
)
def test_parallelism_caps_the_shards_running_at_once_and_every_shard_is_a_completion(
    over: dict[str, Any], completions: int, parallelism: int
) -> None:
    j = job(**over)

    assert (j["spec"]["completions"], j["spec"]["parallelism"]) == (completions, parallelism)
    assert arg(container(j), "--shards") == str(completions)


def test_more_at_once_than_the_planned_shards_is_refused_naming_the_field() -> None:
    s = LLMBatchJobSpec.model_validate(spec(parallelism=8))  # the plan: 4 pods of one GPU
    with pytest.raises(PlanError) as refused:
        parallelism(s, plan(s.deployment_spec()))

    assert refused.value.field == "spec.parallelism"
    assert refused.value.reason == "ParallelismAboveShards"
    assert refused.value.message.startswith("8 shards at once is more than the job's 4 shard(s)")


def test_configuration_errors_fail_the_job_at_once_and_disruptions_do_not_count() -> None:
    j = job()
    assert j["spec"]["podFailurePolicy"]["rules"] == [
        {
            "action": "FailJob",
            "onExitCodes": {"containerName": "runner", "operator": "In", "values": [2, 3]},
        },
        # A preempted, evicted or drained pod is replaced without counting against
        # backoffLimitPerIndex (the scheduler marks a victim DisruptionTarget=True).
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
    ]
    # A Job's podFailurePolicy is accepted only with restartPolicy Never.
    assert j["spec"]["template"]["spec"]["restartPolicy"] == "Never"


SPARE_CLASS = "llmfleet-spare"
SPARE_FLEET = OperatorSettings(spare_priority_class=SPARE_CLASS).fleet


def spare_job(**over: Any) -> dict[str, Any]:
    s = LLMBatchJobSpec.model_validate(spec(priority="Spare", **over))
    return render_batch_job(OWNER, s, plan(s.deployment_spec()), SPARE_FLEET)


def test_spare_shards_run_at_the_spare_class_and_differ_from_normal_in_nothing_else() -> None:
    spare, normal = spare_job(), job()
    assert spare["spec"]["template"]["spec"].pop("priorityClassName") == SPARE_CLASS
    assert spare == normal


@pytest.mark.parametrize(
    "over",
    [pytest.param({}, id="priority-left-out"), pytest.param({"priority": "Normal"}, id="normal")],
)
def test_a_normal_job_sets_no_priority_class_even_where_the_operator_has_one(
    over: dict[str, Any],
) -> None:
    s = LLMBatchJobSpec.model_validate(spec(**over))
    j = render_batch_job(OWNER, s, plan(s.deployment_spec()), SPARE_FLEET)
    assert "priorityClassName" not in j["spec"]["template"]["spec"]
    assert j == job()


def test_a_spare_job_cannot_render_without_a_spare_class() -> None:
    s = LLMBatchJobSpec.model_validate(spec(priority="Spare"))
    with pytest.raises(SpareClassUnsetError, match=r"spec\.priority Spare"):
        render_batch_job(OWNER, s, plan(s.deployment_spec()), FLEET)


GRACE = {
    # spec.terminationGracePeriodSeconds -> the pod's, and the runner's --grace-seconds
    "default": ({}, 30, None),
    "longer-for-long-generations": ({"terminationGracePeriodSeconds": 120}, 120, "120"),
    "shortest": ({"terminationGracePeriodSeconds": 10}, 10, "10"),
}


@pytest.mark.parametrize(("over", "pod_grace", "runner_grace"), GRACE.values(), ids=GRACE.keys())
def test_the_grace_period_is_the_pods_and_the_runner_stops_within_it(
    over: dict[str, Any], pod_grace: int, runner_grace: str | None
) -> None:
    j = job(**over)
    assert j["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == pod_grace
    args = container(j)["args"]
    # The runner assumes the default itself: a job that leaves it unset renders as before.
    found = args[args.index("--grace-seconds") + 1] if "--grace-seconds" in args else None
    assert found == runner_grace


def test_the_runner_gets_the_planners_engine_flags_and_the_job_settings() -> None:
    c = container(job(shards=2, defaults={"maxTokens": 64, "temperature": 0.5}))
    assert c["command"] == ["python3", "-m", "llmfleet.batch.runner"]
    assert arg(c, "--shards") == "2"
    assert arg(c, "--job") == "team/nightly"
    assert arg(c, "--defaults") == '{"max_tokens":64,"temperature":0.5}'
    assert arg(c, "--model") == "meta-llama/Llama-3.1-8B-Instruct"
    assert arg(c, "--tensor-parallel-size") == "1"
    assert c["resources"] == {"limits": {"nvidia.com/gpu": "1"}}
    assert c["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert c["image"] == DEFAULT_BATCH_IMAGE


def test_an_explicit_engine_image_is_used_as_is() -> None:
    c = container(job(engine={"image": "registry.example.com/vllm:custom"}))
    assert c["image"] == "registry.example.com/vllm:custom"


def volumes(j: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in j["spec"]["template"]["spec"]["volumes"]}


def test_one_claim_for_input_and_output_is_mounted_once_writable() -> None:
    j = job()
    c = container(j)
    assert volumes(j)["claim-0"]["persistentVolumeClaim"] == {
        "claimName": "data",
        "readOnly": False,
    }
    assert "claim-1" not in volumes(j)
    assert arg(c, "--input") == "/llmfleet/claims/data/in/p.jsonl"
    assert arg(c, "--output-dir") == "/llmfleet/claims/data/out/run-1"


def test_an_input_claim_other_than_the_output_is_mounted_read_only() -> None:
    j = job(input={"persistentVolumeClaim": {"claimName": "prompts", "path": "p.jsonl"}})
    assert volumes(j)["claim-1"]["persistentVolumeClaim"] == {
        "claimName": "prompts",
        "readOnly": True,
    }


def test_a_configmap_input_is_mounted_as_a_file() -> None:
    j = job(input={"configMap": {"name": "small", "key": "requests.jsonl"}})
    assert volumes(j)["input"]["configMap"] == {
        "name": "small",
        "items": [{"key": "requests.jsonl", "path": "input.jsonl"}],
    }
    assert arg(container(j), "--input") == "/llmfleet/input/input.jsonl"


def test_cpu_only_jobs_ask_for_cpu_and_memory_and_size_the_kv_cache() -> None:
    c = container(
        job(
            model={"name": "/models/tiny", "architecture": TINY},
            gpus=None,
            engine={"maxModelLen": 512, "cpuKVCacheGiB": 1.5},
        )
    )
    assert c["resources"]["requests"]["cpu"] == "2"
    assert {"name": "VLLM_CPU_KVCACHE_SPACE", "value": "2"} in c["env"]


def test_a_long_name_gives_a_short_stable_job_name() -> None:
    long = "a" * 80
    assert len(job_name(long)) <= 52
    assert job_name(long) == job_name(long)
    assert job_name("short") == "short"


REFUSED = {
    "no-input": (lambda s: s.pop("input"), "spec.input: Field required"),
    "zero-shards": (lambda s: s.update(shards=0), "spec.shards: Input should be greater"),
    "both-inputs": (
        lambda s: s["input"].update(configMap={"name": "c", "key": "k"}),
        "set exactly one of persistentVolumeClaim or configMap",
    ),
    "no-input-source": (lambda s: s.update(input={}), "set exactly one of"),
    "absolute-output-path": (
        lambda s: s["output"]["persistentVolumeClaim"].update(path="/etc"),
        "spec.output.persistentVolumeClaim.path: path must be relative",
    ),
    "output-path-with-parent": (
        lambda s: s["output"]["persistentVolumeClaim"].update(path="a/../../b"),
        "must not contain '..'",
    ),
    "negative-retries": (lambda s: s.update(maxRetriesPerLine=-1), "spec.maxRetriesPerLine"),
    "unknown-priority": (
        lambda s: s.update(priority="Low"),
        "spec.priority: Input should be 'Normal' or 'Spare'",
    ),
    "parallelism-above-shards": (
        lambda s: s.update(shards=4, parallelism=8),
        "spec.parallelism: parallelism must be at most shards",
    ),
    "parallelism-zero": (lambda s: s.update(parallelism=0), "spec.parallelism"),
    "grace-too-short-to-finish-a-line": (
        lambda s: s.update(terminationGracePeriodSeconds=5),
        "spec.terminationGracePeriodSeconds: Input should be greater than or equal to 10",
    ),
    "grace-keeping-an-online-engine-waiting": (
        lambda s: s.update(terminationGracePeriodSeconds=3600),
        "spec.terminationGracePeriodSeconds: Input should be less than or equal to 600",
    ),
}


@pytest.mark.parametrize(("mutate", "message"), REFUSED.values(), ids=REFUSED.keys())
def test_a_bad_spec_is_refused_with_the_field_named(mutate: Any, message: str) -> None:
    body = spec()
    mutate(body)
    with pytest.raises(ValidationError) as refused:
        LLMBatchJobSpec.model_validate(body)
    assert message in describe_validation_error(refused.value)


def test_paths_with_dots_inside_names_are_fine() -> None:
    s = LLMBatchJobSpec.model_validate(
        spec(output={"persistentVolumeClaim": {"claimName": "d", "path": "out/..hidden/x.y"}})
    )
    assert s.output.persistent_volume_claim.path == "out/..hidden/x.y"


def crd_version() -> dict[str, Any]:
    (version,) = custom_resource_definition(LLMBATCHJOB)["spec"]["versions"]
    return dict(version)


def test_the_crd_is_served_with_a_short_name_status_and_progress_columns() -> None:
    crd = custom_resource_definition(LLMBATCHJOB)
    assert crd["spec"]["names"]["shortNames"] == ["llmbj"]
    version = crd_version()
    assert version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns == [
        "Status",
        "Shards",
        "Running",
        "Progress",
        "Failed",
        "Tok/s",
        "ETA",
        "Age",
        "Reason",
        "Priority",
        "Preemptions",
    ]


def test_the_crd_says_in_cel_what_the_models_check() -> None:
    schema = crd_version()["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rules = [r["rule"] for r in schema["x-kubernetes-validations"]]
    assert rules == [
        "self == oldSelf",
        "!has(self.parallelism) || !has(self.shards) || self.parallelism <= self.shards",
        "!has(self.engine) || !has(self.engine.lora)",
        "!has(self.engine) || !has(self.engine.stallDetection)",
    ]
    source = schema["properties"]["input"]
    assert source["x-kubernetes-validations"][0]["rule"] == (
        "has(self.persistentVolumeClaim) != has(self.configMap)"
    )
    assert schema["properties"]["shards"]["minimum"] == 1
    assert schema["required"] == ["model", "input", "output"]
    # The API server refuses what the models refuse.
    assert schema["properties"]["priority"]["enum"] == ["Normal", "Spare"]
    assert schema["properties"]["priority"]["default"] == "Normal"
    grace = schema["properties"]["terminationGracePeriodSeconds"]
    assert (grace["minimum"], grace["maximum"], grace["default"]) == (10, 600, 30)


BATCH_EXAMPLES = sorted((REPO / "examples").glob("batch-*.yaml"))


@pytest.mark.parametrize("path", BATCH_EXAMPLES, ids=lambda p: p.name)
def test_batch_examples_are_valid_and_plan(path: Path) -> None:
    (doc,) = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert (doc["apiVersion"], doc["kind"]) == ("llmfleet.dev/v1alpha1", "LLMBatchJob")
    s = LLMBatchJobSpec.model_validate(doc["spec"])
    assert plan(s.deployment_spec()).replicas >= 1


def test_batch_examples_exist() -> None:
    assert len(BATCH_EXAMPLES) >= 2


def test_llmfleet_batch_run_is_a_cli_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["batch", "run", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "--input" in out
    assert "vLLM engine arguments" in out


def test_the_operator_imports_nothing_of_the_batch_runner() -> None:
    """The operator reads shards through llmfleet.shard_report only: the runner's code (and what
    it needs, vLLM among it) is not the operator's."""
    code = (
        "import sys, llmfleet.cli, llmfleet.main, llmfleet.operator_app; "
        "print(sorted(m for m in sys.modules if m.startswith('llmfleet.batch')))"
    )
    found = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert found.stdout.strip() == "[]"
