"""Defaults that users see in `kubectl explain` and that other packages reuse."""

from __future__ import annotations

from llmfleet.fetcher.release import FETCHER_REPOSITORY, FETCHER_VERSION
from llmfleet.routerhop.release import HOP_REPOSITORY, HOP_VERSION

# Pinned rather than `latest`: the planner's memory model and the derived vLLM flags are checked
# against this release.
DEFAULT_ENGINE_IMAGE = "vllm/vllm-openai:v0.32.0"
# The adapter fetcher beside LoRA engines: the operator's image under the fetcher's own version,
# so that an operator release that leaves the fetcher alone leaves LoRA engine pods alone.
DEFAULT_FETCHER_IMAGE = f"{FETCHER_REPOSITORY}:{FETCHER_VERSION}"
# The router hop in front of vllm-router where an LLMDeployment has adapters: the operator's image
# under the hop's own version, for the same reason.
DEFAULT_ROUTER_HOP_IMAGE = f"{HOP_REPOSITORY}:{HOP_VERSION}"

DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
DEFAULT_GPUS_PER_NODE = 8
DEFAULT_CPU_KV_CACHE_GIB = 4.0
DEFAULT_SCALE_DOWN_STABILIZATION_SECONDS = 300
# Scale to zero (autoscaling.minReplicas 0): KEDA's own cooldownPeriod default, and a hold long
# enough for a GPU engine to start and load tens of GiB of weights from a volume.
DEFAULT_IDLE_SECONDS = 300
DEFAULT_WAKE_TIMEOUT_SECONDS = 600

# The planner's default context length when spec.engine.maxModelLen is unset: long enough for
# chat and RAG prompts, short enough that a 131072-token model does not reserve KV cache for
# sequences nobody sends.
DEFAULT_MAX_MODEL_LEN = 8192

# Upper bounds that keep the API server's CEL cost estimate for list rules small.
MAX_EXTRA_ARGS = 64
MAX_EXTRA_ARG_LENGTH = 1024
