"""vLLM 0.32's `vllm:` metric families, as its /metrics serves them (vllm/v1/metrics/loggers.py,
buckets.py): name, type, help text, and the histograms' buckets. Written down from the real
engine's page; tests/e2e/test_engine_standin_contract.py compares them with it."""

from __future__ import annotations

import itertools

# (name, help text), in vLLM's order. Counters are named without `_total` (prometheus_client
# writes `X_total` and an `X_created` gauge); histograms after them.
GAUGES = {
    "vllm:num_requests_running": "Number of requests in model execution batches.",
    "vllm:num_requests_waiting": "Number of requests waiting to be processed.",
    "vllm:num_requests_waiting_by_reason": (
        "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for "
        "scheduling capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV "
        "transfer, blocked status). Sum of all reasons equals vllm:num_requests_waiting."
    ),
    "vllm:engine_sleep_state": (
        "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is "
        "awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2."
    ),
    "vllm:kv_cache_usage_perc": "KV-cache usage. 1 means 100 percent usage.",
    "vllm:cache_config_info": "Information of the LLMEngine CacheConfig",
}
_MFU = "(for Model Flops Utilization calculations)."
COUNTERS = {
    "vllm:estimated_flops_per_gpu": f"Estimated number of floating point operations per GPU {_MFU}",
    "vllm:estimated_read_bytes_per_gpu": (
        f"Estimated number of bytes read from memory per GPU {_MFU}"
    ),
    "vllm:estimated_write_bytes_per_gpu": (
        f"Estimated number of bytes written to memory per GPU {_MFU}"
    ),
    "vllm:prefix_cache_queries": "Prefix cache queries, in terms of number of queried tokens.",
    "vllm:prefix_cache_hits": "Prefix cache hits, in terms of number of cached tokens.",
    "vllm:external_prefix_cache_queries": (
        "External prefix cache queries from KV connector cross-instance cache sharing, in terms "
        "of number of queried tokens."
    ),
    "vllm:external_prefix_cache_hits": (
        "External prefix cache hits from KV connector cross-instance cache sharing, in terms of "
        "number of cached tokens."
    ),
    "vllm:mm_cache_queries": "Multi-modal cache queries, in terms of number of queried items.",
    "vllm:mm_cache_hits": "Multi-modal cache hits, in terms of number of cached items.",
    "vllm:num_preemptions": "Cumulative number of preemption from the engine.",
    "vllm:prompt_tokens": "Number of prefill tokens processed.",
    "vllm:prompt_tokens_by_source": "Number of prompt tokens by source.",
    "vllm:prompt_tokens_cached": "Number of cached prompt tokens (local + external).",
    "vllm:prompt_tokens_cached_by_source": (
        "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), host "
        "(offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or "
        "external_unspecified. Counted at admission; sums to vllm:prefix_cache_hits + "
        "vllm:external_prefix_cache_hits."
    ),
    "vllm:generation_tokens": "Number of generation tokens processed.",
    "vllm:request_success": "Count of successfully processed requests.",
    "vllm:admission_rejections": (
        "Number of admission attempts rejected by a queue limit, by reason."
    ),
}
# name -> (help text, bucket family)
HISTOGRAMS = {
    "vllm:request_prompt_tokens": ("Number of prefill tokens processed.", "tokens"),
    "vllm:request_generation_tokens": ("Number of generation tokens processed.", "tokens"),
    "vllm:iteration_tokens_total": ("Histogram of number of tokens per engine_step.", "iter"),
    "vllm:request_max_num_generation_tokens": (
        "Histogram of maximum number of requested generation tokens.",
        "tokens",
    ),
    "vllm:request_params_n": ("Histogram of the n request parameter.", "n"),
    "vllm:request_params_max_tokens": ("Histogram of the max_tokens request parameter.", "tokens"),
    "vllm:time_to_first_token_seconds": ("Histogram of time to first token in seconds.", "ttft"),
    "vllm:inter_token_latency_seconds": ("Histogram of inter-token latency in seconds.", "itl"),
    "vllm:request_time_per_output_token_seconds": (
        "Histogram of time_per_output_token_seconds per request.",
        "itl",
    ),
    "vllm:e2e_request_latency_seconds": ("Histogram of e2e request latency in seconds.", "lat"),
    "vllm:request_queue_time_seconds": (
        "Histogram of time spent in WAITING phase for request.",
        "lat",
    ),
    "vllm:request_inference_time_seconds": (
        "Histogram of time spent in RUNNING phase for request.",
        "lat",
    ),
    "vllm:request_prefill_time_seconds": (
        "Histogram of time spent in PREFILL phase for request.",
        "lat",
    ),
    "vllm:request_decode_time_seconds": (
        "Histogram of time spent in DECODE phase for request.",
        "lat",
    ),
    "vllm:request_num_preemptions": (
        "Histogram of the number of times a request was preempted.",
        "preempt",
    ),
    "vllm:request_prefill_kv_computed_tokens": (
        "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
        "tokens",
    ),
}

_LATENCY = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)
_TTFT = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5)
_ITL = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5)
BUCKETS: dict[str, tuple[float, ...]] = {
    "lat": (*_LATENCY, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0),
    "ttft": (*_TTFT, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0),
    "itl": (*_ITL, 10.0, 20.0, 40.0, 80.0),
    "iter": (1.0, *(2.0**k for k in range(3, 15))),
    "n": (1.0, 2.0, 5.0, 10.0, 20.0),
    "preempt": (1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0),
}
FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")
PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
CACHED_SOURCES = ("device", "host", "disk", "p2p", "external_unspecified")
SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")
ADMISSION_REASONS = ("max_num_queued_reqs", "max_num_queued_tokens")


def one_two_five(max_value: int) -> tuple[float, ...]:
    """vLLM's request-token buckets: 1, 2, 5, 10, 20, 50, ... up to max_model_len."""
    out: list[float] = []
    for exponent in itertools.count():
        for m in (1, 2, 5):
            if m * 10**exponent > max_value:
                return tuple(out)
            out.append(float(m * 10**exponent))
    raise AssertionError("unreachable")


def buckets(family: str, max_model_len: int) -> tuple[float, ...]:
    return one_two_five(max_model_len) if family == "tokens" else BUCKETS[family]
