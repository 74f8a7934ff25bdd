"""Where an engine pod's vLLM keeps its compile cache (spec.engine.compileCache).

With a model cache claim, VLLM_CACHE_ROOT is a directory on it, so a new replica reads what the
first one compiled instead of compiling again. vLLM already keys its torch.compile cache
(vllm/compilation/backends.py, VllmBackend.__call__: torch_compile_cache/<hash> of the
compile-relevant VLLM_* environment, VllmConfig.compute_hash() with the vLLM version and the
model, cache, parallel and compilation configs, the traced source files, and the torch/Inductor
factors, which include the GPU) in 0.32, as vLLM's torch.compile design notes describe it
since before 0.26. Other files under VLLM_CACHE_ROOT are
keyed less: the custom all-reduce's P2P check (distributed/device_communicators/
all_reduce_utils.py) only by CUDA_VISIBLE_DEVICES. So the directory is keyed as well, by the
engine image, the model, the GPU type and vLLM's arguments: a different vLLM, GPU or argument
never reads another's entries, even where vLLM's own key would miss it.

Replicas starting at once share a directory: Inductor's and Triton's artifacts and vLLM's AOT
and model-info files are written to a temporary file and renamed into place (torch's
write_atomic, Triton's FileCacheManager.put, os.replace), so a reader sees a whole file or
none. vLLM's own index of them, vllm_compile_cache.py, is rewritten in place
(CompilerManager.save_to_file) once all artifacts are saved; replicas with one key write the
same index, and one that reads it while it is being written fails its start once and the
kubelet restarts it (docs/autoscaling.md, "Compile cache").
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from llmfleet.models import EngineSpec, GpuSpec, ModelSpec
from llmfleet.render.modelpod import HF_HOME

# Beside the Hugging Face hub's own directory on the model cache claim.
CACHE_DIR = f"{HF_HOME}/vllm-cache"
KEY_LENGTH = 16


def compile_cache_key(
    image: str, model: ModelSpec, gpus: GpuSpec | None, engine_args: Sequence[str]
) -> str:
    """The directory name of one engine configuration's cache: the same for pods that run the
    same image, model, GPU type and vLLM arguments, different when any of them differs."""
    factors = {
        "image": image,
        "model": model.name,
        # The GPU as the spec names it (product, profile or memory); tensor parallelism is in
        # the arguments.
        "gpu": gpus.model_dump(mode="json", exclude={"count", "per_node"}) if gpus else "cpu",
        "args": list(engine_args),
    }
    digest = hashlib.sha256(json.dumps(factors, sort_keys=True).encode()).hexdigest()
    return digest[:KEY_LENGTH]


def on_claim(model: ModelSpec, engine: EngineSpec) -> bool:
    return engine.compile_cache == "auto" and model.cache is not None


def compile_cache_env(
    model: ModelSpec,
    engine: EngineSpec,
    gpus: GpuSpec | None,
    image: str,
    engine_args: Sequence[str],
) -> list[dict[str, Any]]:
    """The variables that place (or turn off) vLLM's cache. Pod-local needs none: HOME=/tmp puts
    it at /tmp/.cache/vllm, as before compileCache existed, so those pods keep their template."""
    if engine.compile_cache == "disabled":
        return [{"name": "VLLM_DISABLE_COMPILE_CACHE", "value": "1"}]
    if on_claim(model, engine):
        key = compile_cache_key(image, model, gpus, engine_args)
        return [{"name": "VLLM_CACHE_ROOT", "value": f"{CACHE_DIR}/{key}"}]
    return []


def compile_cache_location(model: ModelSpec, engine: EngineSpec) -> str:
    """One line for status and `llmfleet plan`."""
    if engine.compile_cache == "disabled":
        return "disabled: vLLM compiles at every start"
    if on_claim(model, engine):
        assert model.cache is not None
        return (
            f"claim {model.cache.claim_name}, {CACHE_DIR}/<key of image, model, GPU and "
            "arguments>: kept across pods"
        )
    return "in the pod (/tmp/.cache/vllm): lost with it"
