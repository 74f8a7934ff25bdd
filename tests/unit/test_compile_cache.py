"""vLLM's compile cache outlives the pod when the model has a cache claim (spec.engine.compileCache
auto): every engine pod of one configuration (a Deployment's, a LeaderWorkerSet's leader and
workers, an LLMBatchJob's shards) points VLLM_CACHE_ROOT at one directory on the claim, and a
different image, GPU or vLLM argument points at another, so no pod reads a stale entry."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from llmfleet.cli import main
from llmfleet.models import LLMBatchJobSpec, LLMDeploymentSpec, describe_validation_error
from llmfleet.models.status import LLMDeploymentStatus, status_json
from llmfleet.planner import plan
from llmfleet.reconcile.llmdeployment.status import Observed, ready_status
from llmfleet.render import Owner, render_fleet
from llmfleet.render.batchjob import BatchOwner, render_batch_job
from llmfleet.render.compilecache import CACHE_DIR, compile_cache_location
from llmfleet.settings import OperatorSettings

FLEET = OperatorSettings().fleet

OWNER = Owner("chat", "ml", "uid-1")
H100 = {"count": 1, "memoryGiB": 80, "perNode": 8, "product": "NVIDIA-H100-80GB-HBM3"}
H200 = {"count": 1, "memoryGiB": 141, "perNode": 8, "product": "NVIDIA-H200"}
MODEL = {"name": "meta-llama/Llama-3.1-8B-Instruct", "cache": {"claimName": "hf"}}
NO_CLAIM = {"name": "meta-llama/Llama-3.1-8B-Instruct"}
# Two nodes of 8 GPUs: a LeaderWorkerSet of a leader and a worker per replica.
MULTINODE = {
    "model": {"name": "meta-llama/Llama-3.1-405B-Instruct", "cache": {"claimName": "hf"}},
    "gpus": {"count": 16, "memoryGiB": 80, "perNode": 8},
    "strategy": "MultiNode",
}


def spec(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": MODEL, "gpus": H100}
    body.update(over)
    return body


def engine_envs(body: dict[str, Any]) -> list[dict[str, str]]:
    """The vLLM container's plain environment of every engine pod template rendered for `body`."""
    s = LLMDeploymentSpec.model_validate(body)
    templates = []
    for obj in render_fleet(OWNER, s, plan(s), FLEET).objects():
        if obj["kind"] == "Deployment" and obj["metadata"]["name"].startswith("chat-tp"):
            templates.append(obj["spec"]["template"])
        elif obj["kind"] == "LeaderWorkerSet":
            group = obj["spec"]["leaderWorkerTemplate"]
            templates += [group["leaderTemplate"], group["workerTemplate"]]
    assert templates, "no engine pod template rendered"
    return [
        {e["name"]: e["value"] for e in t["spec"]["containers"][0]["env"] if "value" in e}
        for t in templates
    ]


def cache_root(body: dict[str, Any]) -> str | None:
    (env,) = {tuple(sorted(e.items())) for e in engine_envs(body)}
    return dict(env).get("VLLM_CACHE_ROOT")


def volume_of(body: dict[str, Any], path: str) -> dict[str, Any]:
    """The pod volume that `path` lives on, in the engine pod template."""
    s = LLMDeploymentSpec.model_validate(body)
    (engine,) = [
        o
        for o in render_fleet(OWNER, s, plan(s), FLEET).objects()
        if o["kind"] == "Deployment" and o["metadata"]["name"].startswith("chat-tp")
    ]
    pod = engine["spec"]["template"]["spec"]
    mounts = pod["containers"][0]["volumeMounts"]
    (mount,) = sorted(
        (m for m in mounts if path.startswith(m["mountPath"] + "/")),
        key=lambda m: -len(m["mountPath"]),
    )[:1]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    return dict(volume)


@pytest.mark.parametrize(
    ("model", "setting", "on_claim", "disabled"),
    [
        pytest.param(MODEL, None, True, False, id="claim, default auto: on the claim"),
        pytest.param(MODEL, "auto", True, False, id="claim, auto: on the claim"),
        pytest.param(MODEL, "podLocal", False, False, id="claim, podLocal: in the pod"),
        pytest.param(MODEL, "disabled", False, True, id="claim, disabled"),
        pytest.param(NO_CLAIM, None, False, False, id="no claim, auto: in the pod"),
        pytest.param(NO_CLAIM, "disabled", False, True, id="no claim, disabled"),
    ],
)
def test_where_the_compile_cache_lives(
    model: dict[str, Any], setting: str | None, on_claim: bool, disabled: bool
) -> None:
    body = spec(model=model, **({"engine": {"compileCache": setting}} if setting else {}))
    (env,) = engine_envs(body)
    root = env.get("VLLM_CACHE_ROOT")
    if on_claim:
        assert root is not None
        assert root.startswith(CACHE_DIR + "/")
        assert volume_of(body, root)["persistentVolumeClaim"] == {"claimName": "hf"}
        # Triton's kernels (vLLM's sampler warm-up JIT-compiles them) under the same key.
        assert env["TRITON_CACHE_DIR"] == f"{root}/triton"
    else:
        # vLLM's default, ~/.cache/vllm, with HOME on the pod's /tmp emptyDir.
        assert root is None
        assert "TRITON_CACHE_DIR" not in env
        assert env["HOME"] == "/tmp"
    assert (env.get("VLLM_DISABLE_COMPILE_CACHE") == "1") is disabled


def test_pods_without_a_claim_keep_the_environment_they_had() -> None:
    # No claim, default setting: the pod template is what it was before compileCache existed.
    (env,) = engine_envs(spec(model=NO_CLAIM))
    assert not {"VLLM_CACHE_ROOT", "TRITON_CACHE_DIR", "VLLM_DISABLE_COMPILE_CACHE"} & env.keys()


@pytest.mark.parametrize(
    ("change", "same_key"),
    [
        pytest.param({}, True, id="identical spec: same key"),
        pytest.param({"engine": {"extraArgs": ["--enforce-eager"]}}, False, id="an extra arg"),
        pytest.param({"engine": {"maxModelLen": 4096}}, False, id="a derived arg changes"),
        pytest.param({"engine": {"image": "vllm/vllm-openai:v0.26.0"}}, False, id="the image"),
        pytest.param({"gpus": H200}, False, id="the GPU"),
        pytest.param(
            {"model": {**MODEL, "name": "Qwen/Qwen2.5-7B-Instruct"}}, False, id="the model"
        ),
        # Where a pod's labels or the claim's name change, vLLM's artifacts do not.
        pytest.param({"engine": {"podLabels": {"team": "a"}}}, True, id="a pod label"),
        pytest.param({"model": {**MODEL, "cache": {"claimName": "other"}}}, True, id="the claim"),
    ],
)
def test_the_cache_directory_changes_with_what_vllm_compiles_for(
    change: dict[str, Any], same_key: bool
) -> None:
    base = cache_root(spec())
    changed = cache_root(spec(**change))
    assert base is not None
    assert changed is not None
    assert (base == changed) is same_key


def test_a_multinode_replicas_leader_and_workers_share_one_directory() -> None:
    envs = engine_envs(MULTINODE)
    assert len(envs) == 2
    roots = {env.get("VLLM_CACHE_ROOT") for env in envs}
    (root,) = roots
    assert root is not None
    assert root.startswith(CACHE_DIR + "/")


def batch_env(**over: Any) -> dict[str, str]:
    body = {
        "model": MODEL,
        "gpus": {"count": 4, "memoryGiB": 80, "perNode": 8},
        "input": {"persistentVolumeClaim": {"claimName": "data", "path": "in/p.jsonl"}},
        "output": {"persistentVolumeClaim": {"claimName": "data", "path": "out/run-1"}},
        **over,
    }
    s = LLMBatchJobSpec.model_validate(body)
    job = render_batch_job(BatchOwner("b", "ml", "uid-2"), s, plan(s.deployment_spec()), FLEET)
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


@pytest.mark.parametrize(
    ("over", "expected_under"),
    [
        pytest.param({}, CACHE_DIR, id="batch with a claim: on the claim"),
        pytest.param({"engine": {"compileCache": "podLocal"}}, None, id="batch podLocal"),
        pytest.param({"model": NO_CLAIM}, None, id="batch without a claim"),
    ],
)
def test_batch_shards_keep_the_cache_on_the_claim_too(
    over: dict[str, Any], expected_under: str | None
) -> None:
    root = batch_env(**over).get("VLLM_CACHE_ROOT")
    if expected_under is None:
        assert root is None
    else:
        assert root is not None
        assert root.startswith(expected_under + "/")


@pytest.mark.parametrize("bad", ["off", "Auto", "pod-local", ""])
def test_an_unknown_setting_is_refused_naming_the_field_and_the_allowed_values(bad: str) -> None:
    with pytest.raises(ValidationError) as error:
        LLMDeploymentSpec.model_validate(spec(engine={"compileCache": bad}))
    said = describe_validation_error(error.value)
    assert "compileCache" in said
    for allowed in ("auto", "podLocal", "disabled"):
        assert allowed in said


PLAN_MANIFEST = """
apiVersion: llmfleet.dev/v1alpha1
kind: LLMDeployment
metadata: {name: chat}
spec:
  model: {name: meta-llama/Llama-3.1-8B-Instruct%s}
  gpus: {count: 1, memoryGiB: 80}
  engine: {compileCache: %s}
"""


@pytest.mark.parametrize(
    ("model_extra", "setting", "said"),
    [
        pytest.param(", cache: {claimName: hf}", "auto", "claim hf", id="on the claim"),
        pytest.param("", "auto", "in the pod", id="no claim"),
        pytest.param(", cache: {claimName: hf}", "podLocal", "in the pod", id="podLocal"),
        pytest.param(", cache: {claimName: hf}", "disabled", "disabled", id="disabled"),
    ],
)
def test_plan_says_where_the_compile_cache_lives_on_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    model_extra: str,
    setting: str,
    said: str,
) -> None:
    manifest = tmp_path / "chat.yaml"
    manifest.write_text(PLAN_MANIFEST % (model_extra, setting))
    assert main(["plan", "-f", str(manifest)]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if "Compile cache:" in x]
    assert said in line


def test_status_says_where_the_compile_cache_lives() -> None:
    s = LLMDeploymentSpec.model_validate(spec())
    status = ready_status(
        old=LLMDeploymentStatus(),
        generation=1,
        plan=plan(s),
        observed=Observed(None, (), None, ()),
        endpoint="e",
        compile_cache=compile_cache_location(s.model, s.engine),
    )
    assert "claim hf" in str(status_json(status)["compileCache"])
