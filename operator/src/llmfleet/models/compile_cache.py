"""`spec.engine.compileCache`: where vLLM keeps what it can reuse across starts (its torch.compile,
Inductor and Triton artifacts), docs/autoscaling.md "Compile cache"."""

from __future__ import annotations

from typing import Literal

# Not "off": YAML 1.1, as kubectl and PyYAML read it, takes an unquoted off for false.
CompileCache = Literal["auto", "podLocal", "disabled"]

COMPILE_CACHE_DESCRIPTION = (
    "Where vLLM keeps its compile cache (torch.compile, Inductor and Triton artifacts, and the "
    "other files it reuses across starts: VLLM_CACHE_ROOT). auto: on spec.model.cache's claim "
    "when set, in a directory keyed by the engine image, the model, the GPU type and vLLM's "
    "arguments, so new replicas start with what the first one compiled (an 8B on an H100 "
    "initialises in 14 s instead of 52 s); without a claim, in the pod (lost with it). "
    "podLocal: always in the pod, e.g. where the claim's storage is slow. disabled: vLLM "
    "compiles at every start and reads no cache (VLLM_DISABLE_COMPILE_CACHE). Changing what it "
    "sets rolls the engine pods once. One of auto, podLocal, disabled. Default auto."
)
