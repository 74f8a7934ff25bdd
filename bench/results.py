"""bench/results.json: one flat object of named figures, plus the machine and the date. Two tables
are generated from it: every figure in bench/README.md, five headline figures in README.md."""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results.json"
# The full table goes to BENCH_README, the headline figures to FRONT_README, each between the
# markers (the rest of either file is written by hand).
BENCH_README = HERE / "README.md"
FRONT_README = HERE.parent / "README.md"
TABLE_BEGIN = "<!-- bench:begin -->"
TABLE_END = "<!-- bench:end -->"

# name -> (what it measures, unit); bench/README.md's table lists them in this order.
FIGURES: dict[str, tuple[str, str]] = {
    "cluster_cold_build_s": ("Build every cluster component from empty Go caches", "s"),
    "cluster_warm_start_s": (
        "`make cluster-up` with components built (fresh state)",
        "s",
    ),
    "make_check_s": (
        "`make check` warm (lint, unit tests, the API tier: etcd and kube-apiserver with the "
        "operator in process), median of 3",
        "s",
    ),
    "make_check_s_max": ("… the slowest of the 3", "s"),
    "make_test_warm_s": (
        "`make test` warm from a clean clone, median of 3 in a row (`.ci/run`: lint, unit, API "
        "tier, e2e on the local cluster with real vLLM and the engine stand-in; three pytest "
        "workers, a lab each), tools, vLLM and base image cached. Stale since 2026-11-27: "
        "that day's tree (about 550 more tests) took 1,249 s in one clean-clone run alone on "
        "the machine, where the tree of 2026-11-26 took 1,563 s beside other work and its "
        "`make check` 128 s against the recorded 69 s; on 2026-11-28 (2,981 tests) one "
        "clean-clone run took 1,251 s on three workers and one 1,138 s on four, the default "
        "since; not re-measured three in a row",
        "s",
    ),
    "make_test_warm_s_max": ("… the slowest of 3 in a row (stale, as above)", "s"),
    "reconcile_p50_ms": ("Apply → children created, p50 over 50 LLMDeployments", "ms"),
    "reconcile_p99_ms": ("Apply → children created, p99 over 50 LLMDeployments", "ms"),
    "reconcile_500_total_s": (
        "Reconcile 500 LLMDeployments (applied at once) to status",
        "s",
    ),
    "operator_rss_mib_500": (
        "Operator resident memory holding 500 LLMDeployments",
        "MiB",
    ),
    "idle_writes_per_min": (
        "Operator API writes per minute with nothing changing (the leader Lease's renewals apart)",
        "writes/min",
    ),
    "lease_renewals_per_min": (
        "… the leader's Lease renewals per minute (one per retry period, 2 s)",
        "writes/min",
    ),
    "operator_failover_s": (
        "Two operator replicas: SIGKILL of the leader → the standby's first write of a change "
        "made meanwhile (chart's lease 15 s, renew 10 s, retry 2 s; median of 5)",
        "s",
    ),
    "operator_failover_max_s": ("… the slowest of the 5", "s"),
    "operator_failover_lease_s": ("… SIGKILL → the standby holds the Lease (median)", "s"),
    "stall_detect_s": (
        "Stall detection, 30 s window (the derived default's floor): a real CPU vLLM "
        "engine's core frozen mid-decode (SIGSTOP; /health still 200) → out of the router's "
        "rotation (median of 3)",
        "s",
    ),
    "stall_detect_max_s": ("… the slowest of the 3", "s"),
    "stall_restart_s": ("… SIGSTOP → the frozen engine's pod deleted (median)", "s"),
    "upgrade_failed_requests": (
        "`helm upgrade` from the previous release (0.1.0) to this one and the operator's rolling "
        "restart, under two clients' requests through the router to a CPU vLLM engine: failed",
        "requests",
    ),
    "upgrade_requests": ("… requests sent during the upgrade", "requests"),
    "upgrade_engine_restarts": (
        "… engine pods restarted or replaced (a CPU vLLM and a kwok one; 0.2.0 announces one "
        "rollout of every engine, `vllm serve`, so 2 is each replaced once, 2026-11-27)",
        "pods",
    ),
    "scale_reaction_prometheus_s": (
        "Load start → Prometheus shows the queue above the HPA target (vLLM, 1 → 2 pods; "
        "median). Stale since 2026-11-28: measured before the engines' startup probe went from "
        "10 s to 2 s and before late binding (the router hop admits what the engines have room "
        "for and the adapter rule adds what it holds to each pod's queue); not re-measured",
        "s",
    ),
    "scale_reaction_adapter_s": (
        "Load start → the adapter rule's value (30 s average) above target (stale, as above)",
        "s",
    ),
    "scale_reaction_desired_s": (
        "Load start → the HPA raises desired replicas (median of 3 runs; shipped target and "
        "PodMonitor interval, upstream 15 s HPA sync; stale, as above)",
        "s",
    ),
    "scale_reaction_desired_max_s": ("… the slowest of the 3 runs (stale, as above)", "s"),
    "scale_reaction_engine_start_s": (
        "New engine pod created → Ready (vLLM CPU startup) (stale, as above)",
        "s",
    ),
    "scale_reaction_ready_s": ("Load start → the new engine pod Ready (stale, as above)", "s"),
    "batching_wall_per_request_s_c1": (
        "64 equal requests through the router at concurrency 1: wall ÷ requests",
        "s",
    ),
    "batching_wall_per_request_s_c4": ("… at concurrency 4", "s"),
    "batching_wall_per_request_s_c16": ("… at concurrency 16", "s"),
    "batching_wall_per_request_s_c32": ("… at concurrency 32", "s"),
    "batching_speedup_c32": (
        "Tokens/s at concurrency 32 ÷ the same engine with --max-num-seqs 1",
        "x",
    ),
    "batch_offline_tok_s": (
        "1,000 requests through the offline batch runner (tiny model, CPU): generated tokens/s",
        "tok/s",
    ),
    "batch_online_tok_s": (
        "The same 1,000 requests through vLLM's OpenAI server, 256 in flight: generated tokens/s",
        "tok/s",
    ),
    "batch_offline_vs_online": (
        "Offline batch runner tokens/s ÷ online server tokens/s",
        "x",
    ),
    "spare_preempt_s": (
        "Batch on spare GPUs: an online engine pod created → bound to the GPU a Spare "
        "LLMBatchJob's shard held (the node runner's one GPU; the shard a real vLLM offline "
        "engine, grace period 20 s, goal ≤ 30 s; the engine the stand-in; pod-watch times), "
        "median of 3",
        "s",
    ),
    "spare_preempt_max_s": ("… the slowest of the 3", "s"),
    "spare_shard_stop_s": (
        "… the scheduler's deletion of the shard pod → the pod stopped, phase Failed (the "
        "runner's graceful stop; the engine pod binds under 0.1 s later), median",
        "s",
    ),
    "spare_online_ready_s": ("… engine pod created → Ready, median", "s"),
    "spare_idle_gpu_share_without": (
        "A day of online load replayed over 16 kwok H100s (24 hours of 5 s; engines 2 at night "
        "to 14 at 15:00, set as the HPA would): GPU-time no pod holds ÷ all GPU-time, online "
        "engines only",
        "",
    ),
    "spare_idle_gpu_share_with": (
        "… the same day with a Spare LLMBatchJob of 16 shards (GPUs bound, not work done: on "
        "kwok a preempted shard stops at once, a real one in `spare_shard_stop_s`)",
        "",
    ),
    "scale_from_zero_first_token_s": (
        "Scale to zero: a request sent at zero engines, seconds to its first token (KEDA wakes "
        "the LLMDeployment, a tiny-model CPU vLLM starts; the router holds the request), median "
        "of 3",
        "s",
    ),
    "scale_from_zero_first_token_max_s": ("… the slowest of the 3", "s"),
    "scale_to_zero_idle_s": (
        "… seconds from the last request's end until no engine pod is left, idleSeconds 30 "
        "(KEDA's cooldown after the last minute with demand, then the drain), median of 3",
        "s",
    ),
    "burst_p99_ttft_s": (
        "Burst replay (llm-d's bursty autoscaling profile, 15 -> 2 -> 10 -> 15 -> 5 -> 2 req/s "
        "over 900 s, one replica at the start; they report 262 s) through the router, the HPA "
        "and the operator, warm compile cache (the default with a model cache), late binding in "
        "the router hop, its held requests in the HPA's queue metric: P99 TTFT of every request "
        "sent. A replay on the CPU lab with engine "
        "stand-ins whose start and speed follow the planner's 32B-on-one-H100 prediction; not a "
        "GPU measurement. Measured 2026-11-28 with `python -m bench.burst` (BURST_CONFIGS=warm) "
        "alone on its lab, on the machine's 2 cores shared with other engineers' tests",
        "s",
    ),
    "burst_failed_requests": (
        "… requests failed (not 200, an error, or not finished within the client's 300 s; "
        "llm-d report 6,110 of about 7,350); replay with stand-ins, not a GPU measurement",
        "requests",
    ),
    "burst_gpu_seconds": (
        "… GPU-seconds held by engine pods over the 900 s (bound until stopped); replay with "
        "stand-ins, not a GPU measurement",
        "GPU-s",
    ),
    "burst_pod_start_s": (
        "… mean start of the pods the HPA added, created to Ready (llm-d report 103 s); replay "
        "with stand-ins, not a GPU measurement",
        "s",
    ),
    "burst_p99_ttft_s_cold": (
        "… the same with compile cache off (every pod compiles afresh), P99 TTFT. "
        "Stale since 2026-11-28: measured before late binding (the router hop in every "
        "router pod), not re-measured; replay on the "
        "CPU lab with engine stand-ins whose start and speed follow the planner's "
        "32B-on-one-H100 prediction; not a GPU measurement",
        "s",
    ),
    "burst_failed_requests_cold": (
        "… compile cache off, requests failed (stale, as above)",
        "requests",
    ),
    "burst_gpu_seconds_cold": ("… compile cache off, GPU-seconds (stale, as above)", "GPU-s"),
    "burst_pod_start_s_cold": (
        "… compile cache off, mean start of the added pods (stale, as above)",
        "s",
    ),
    "burst_p99_ttft_s_standby": (
        "… warm compile cache and one standby replica (spec.autoscaling.standby), P99 TTFT. "
        "Stale since 2026-11-28: measured before late binding (the router hop in every "
        "router pod), not re-measured; "
        "replay on the CPU lab with engine stand-ins whose start and speed follow the planner's "
        "32B-on-one-H100 prediction; not a GPU measurement",
        "s",
    ),
    "burst_failed_requests_standby": (
        "… one standby replica, requests failed (stale, as above)",
        "requests",
    ),
    "burst_gpu_seconds_standby": (
        "… one standby replica, GPU-seconds (the sleeping engine's GPU included; stale, as above)",
        "GPU-s",
    ),
    "burst_pod_start_s_standby": (
        "… one standby replica, mean start of the added pods (stale, as above)",
        "s",
    ),
    "router_overhead_p50_ms": (
        "vLLM Router: added latency per request vs one engine, p50",
        "ms",
    ),
    "router_overhead_p99_ms": (
        "vLLM Router: added latency per request vs one engine, p99",
        "ms",
    ),
    "router_hop_adapter_overhead_p50_ms": (
        "Router hop (LLMDeployments with adapters): added latency per request for an adapter vs "
        "its engine, p50",
        "ms",
    ),
    "router_hop_adapter_overhead_p99_ms": ("… p99", "ms"),
    "router_hop_base_overhead_p50_ms": (
        "Router hop: added latency per request for the base model vs vllm-router, p50 (the "
        "router's own comes on top)",
        "ms",
    ),
    "router_hop_base_overhead_p99_ms": ("… p99", "ms"),
    "router_rps": (
        "vLLM Router: requests/s passed to a no-op upstream (2 shared cores)",
        "req/s",
    ),
    "router_skew_ttft_p99_ratio": (
        "Skewed load over 3 engines: TTFT p99, power_of_two ÷ round_robin (lower is better)",
        "x",
    ),
    "router_skew_throughput_ratio": (
        "… generated tokens/s, power_of_two ÷ round_robin",
        "x",
    ),
    "router_prefix_ttft_p50_ratio": (
        "Shared-prefix chats over 2 engines (4 tenants' 700-token system prompts, 12 sessions of "
        "4 turns, prefix caching on): TTFT p50, the default policy (power_of_two) ÷ round_robin "
        "(median of 5 runs each; docs/router.md)",
        "x",
    ),
    "router_prefix_ttft_p99_ratio": ("… TTFT p99, default policy ÷ round_robin", "x"),
    "router_prefix_throughput_ratio": ("… generated tokens/s, default policy ÷ round_robin", "x"),
    "router_prefix_cache_aware_ttft_p50_s": ("… cache_aware: TTFT p50 (median of runs)", "s"),
    "router_prefix_cache_aware_ttft_p99_s": ("… cache_aware: TTFT p99", "s"),
    "router_prefix_cache_aware_hit_rate": (
        "… cache_aware: prefix-cache hit rate (vLLM's hits ÷ queries)",
        "",
    ),
    "router_prefix_power_of_two_ttft_p50_s": ("… power_of_two: TTFT p50", "s"),
    "router_prefix_power_of_two_ttft_p99_s": ("… power_of_two: TTFT p99", "s"),
    "router_prefix_power_of_two_hit_rate": ("… power_of_two: prefix-cache hit rate", ""),
    "router_prefix_round_robin_ttft_p50_s": ("… round_robin: TTFT p50", "s"),
    "router_prefix_round_robin_ttft_p99_s": ("… round_robin: TTFT p99", "s"),
    "router_prefix_round_robin_hit_rate": ("… round_robin: prefix-cache hit rate", ""),
    "lora_throughput_ratio_8": (
        "LoRA: requests spread evenly over 8 runtime-loaded rank-8 adapters ÷ the base model on "
        "an engine without --enable-lora, output tok/s (vLLM 0.32.0 CPU, tiny model, 96 "
        "streamed requests of 32 tokens at concurrency 8, --max-loras 8; the arms interleaved, "
        "median of 10 cycles, 2026-11-25)",
        "x",
    ),
    "lora_throughput_ratio_4": ("… over 4 adapters ÷ no --enable-lora", "x"),
    "lora_throughput_ratio_1": ("… all to 1 adapter ÷ no --enable-lora", "x"),
    "lora_enabled_throughput_ratio": (
        "… the base model on the LoRA engine ÷ no --enable-lora (what enabling LoRA alone costs)",
        "x",
    ),
    "lora_ttft_p99_ratio_8": ("… TTFT p99, 8 adapters ÷ no --enable-lora", "x"),
    "lora_tokens_per_s_off": ("… output tok/s, engine without --enable-lora", "tok/s"),
    "lora_tokens_per_s_base": ("… output tok/s, LoRA engine, base model only", "tok/s"),
    "lora_tokens_per_s_1": ("… output tok/s, 1 adapter", "tok/s"),
    "lora_tokens_per_s_4": ("… output tok/s, 4 adapters", "tok/s"),
    "lora_tokens_per_s_8": ("… output tok/s, 8 adapters", "tok/s"),
    "lora_ttft_p50_s_off": ("… TTFT p50, engine without --enable-lora", "s"),
    "lora_ttft_p50_s_base": ("… TTFT p50, LoRA engine, base model only", "s"),
    "lora_ttft_p50_s_1": ("… TTFT p50, 1 adapter", "s"),
    "lora_ttft_p50_s_4": ("… TTFT p50, 4 adapters", "s"),
    "lora_ttft_p50_s_8": ("… TTFT p50, 8 adapters", "s"),
    "lora_ttft_p99_s_off": (
        "… TTFT p99 (of 96 the next-to-worst), engine without --enable-lora",
        "s",
    ),
    "lora_ttft_p99_s_base": ("… TTFT p99, LoRA engine, base model only", "s"),
    "lora_ttft_p99_s_1": ("… TTFT p99, 1 adapter", "s"),
    "lora_ttft_p99_s_4": ("… TTFT p99, 4 adapters", "s"),
    "lora_ttft_p99_s_8": ("… TTFT p99, 8 adapters", "s"),
    "gpu_kv_error_max_pct": (
        "Planner KV-cache tokens vs vLLM's, worst of 13 bf16 engines (Llama-3.1-8B, Qwen2.5-7B, "
        "Qwen2.5-32B at a tight fit, Llama-3.1-8B at TP 2; utilization 0.6-0.95, context 8k-32k; "
        "H100 80GB HBM3 and H200, vLLM 0.26.0, 2026-11-23 and 2026-11-25)",
        "%",
    ),
    "gpu_kv_fp8_error_max_pct": (
        "… worst of the engines of Llama-3.1-70B in fp8 on one GPU that compiled afresh, as a new "
        "pod does (H200 at 0.9, and at 0.538: the H100's 0.95 budget, 3.7 GiB of KV cache; the "
        "planner also refuses the 3 H100 engines at 0.9 that vLLM refused), 2026-11-24/25, and "
        "Llama-3.1-8B fp8 on load at 16,384 and 8,192 batched tokens (H200, 2026-11-27)",
        "%",
    ),
    "gpu_kv_fp8_cached_compile_error_pct": (
        "… the planner's compile-cached figure (kvCacheTokensCompileCached: w8a8 GEMM inputs in 1 "
        "byte, (intermediate/TP + hidden) bytes per batched token less) vs the w8a8 engines that "
        "loaded an earlier start's torch.compile cache: Llama-3.1-70B fp8 on H100 at 0.95 and "
        "H200 at 0.9 (2026-11-24), Llama-3.1-8B's shape as an FP8 checkpoint and fp8 on load at "
        "16,384 and 8,192 batched tokens (H200, 2026-11-27), vLLM 0.26.0, worst",
        "%",
    ),
    "gpu_kv_cached_compile_engines": (
        "Engines whose log says they loaded an earlier start's compile cache, bf16 and w8a8",
        "",
    ),
    "gpu_kv_cached_compile_error_max_pct": (
        "… the planner's compile-cached KV tokens vs vLLM's on all of them, worst",
        "%",
    ),
    "gpu_w4a16_tok_s_error_max_pct": (
        "Planner output tok/s vs vLLM's for Qwen2.5-7B-Instruct-AWQ and -GPTQ-Int4 (w4a16, "
        "vLLM's Machete kernel; float16, dummy weights; batch 1, 32, 128 at 512/64-128 and "
        "greedy saturation 512/256 at 256 sequences), 1 x H200, vLLM 0.26.0, 2026-11-27, worst",
        "%",
    ),
    "gpu_w4a16_itl_b1_error_pct": ("… batch-1 ITL, worst of the two", "%"),
    "gpu_w4a16_itl_error_max_pct": ("… ITL at batch 1, 32 and 128, worst", "%"),
    "gpu_w4a16_ttft_error_max_pct": ("… batch-1 TTFT at 512 and 2,048, worst", "%"),
    "gpu_w4a16_kv_error_max_pct": ("… KV-cache tokens, worst of the two engines", "%"),
    "gpu_mxfp4_weights_error_pct": (
        'Planner weights vs vLLM\'s "Model loading took" for gpt-oss-20b (MXFP4 experts, TRITON '
        "MoE backend; dummy weights), 1 x H200, vLLM 0.26.0, 2026-11-27 (the planner is low)",
        "%",
    ),
    "gpu_mxfp4_kv_error_max_pct": (
        '… KV-cache tokens vs vLLM\'s "GPU KV cache size" at 8,192 and 131,072 tokens of '
        "context, worst (the planner is high: the unsafe side)",
        "%",
    ),
    "gpu_mxfp4_itl_b1_error_max_pct": (
        "… batch-1 ITL of gpt-oss-20b and -120b on warm engines (every point run once untimed "
        "first), 1 x H200, vLLM 0.26.0, 2026-11-28: the points MXFP4_LAYER_OVERHEAD_US is "
        "fitted to, worst",
        "%",
    ),
    "gpu_mxfp4_itl_b1_crossfit_error_max_pct": (
        "… batch-1 ITL of one model with the constant fitted to the other's alone, worst of the "
        "two ways",
        "%",
    ),
    "gpu_mxfp4_heldout_error_max_pct": (
        "… held out and stable run to run: greedy saturation 512/256 and batch-1 TTFT at 512 and "
        "8,000 tokens, both models, worst (120b's saturation: the planner is slow; 20b's: fast)",
        "%",
    ),
    "gpu_mxfp4_itl_spread_max_ratio": (
        "… one ITL point's slowest over fastest across the warm engines, at batch 8 and above, "
        "worst (20b at 256 sequences): no prediction can hold these points to a tight error",
        "x",
    ),
    "gpu_mxfp4_itl_error_max_pct": (
        "… ITL at every batch measured (1 to 256), worst (120b at 128 sequences: its step is "
        "shorter than reading every expert takes, so dummy weights routed to fewer experts)",
        "%",
    ),
    "gpu_mxfp4_tok_s_error_max_pct": (
        "… output tok/s at every batch measured and greedy saturation, worst (20b's batch 16 "
        "held a 2.3 s prefill stall)",
        "%",
    ),
    "gpu_mxfp4_ttft_error_max_pct": (
        "… batch-1 TTFT at 128, 512, 2,048 and 8,000 tokens, worst (120b at 128; 2,048 is "
        "-31 to -62 % on both, steadily on 20b)",
        "%",
    ),
    "gpu_kv_wide_mlp_error_pct": (
        "… Qwen2.5-32B's shape (MLP 5.4 x hidden) at utilization 0.6 of an H200: 20 GiB of KV "
        "cache, 2026-11-25 (the rule of 28 bytes per hidden unit erred +4 %)",
        "%",
    ),
    "gpu_kv_tp2_error_pct": (
        "… Llama-3.1-8B at TP 2 on 2 x H200 (activation peak split over the GPUs; NCCL's "
        "buffers outside vLLM's budget), 2026-11-25",
        "%",
    ),
    "gpu_kv_hybrid_error_max_pct": (
        'Planner KV-cache tokens vs vLLM\'s "GPU KV cache size" for sliding-window models sized '
        "from their config.json: Gemma 3 27B's text model at 32k, Gemma 2 9B at 8k (H200, vLLM "
        "0.26.0, 2026-11-25); the concurrency floors agree (4 and 40)",
        "%",
    ),
    "gpu_tp2_itl_error_max_pct": (
        "Planner decode step vs vLLM's at TP 2 (Llama-3.1-8B, 2 x H200), worst of 5 "
        "concurrencies 1-256 (within 2.7 % up to 128), 2026-11-25; held out of the fit, whose "
        "TP cost per layer comes from heldout-deep-10b at TP 2",
        "%",
    ),
    "gpu_top_p_cold_run_slowdown_pct": (
        "The first of 4 identical saturation runs on one engine vs the other 3, top-p 0.95 "
        "(Llama-3.1-8B, 512 sequences, 1,024 x 512/256 tokens, H200, vLLM 0.26.0 without "
        "FlashInfer, 2026-11-25): the sampler's first batches at that size",
        "%",
    ),
    "gpu_greedy_cold_run_slowdown_pct": ("… the same, greedy", "%"),
    "gpu_top_p_cost_pct": (
        "Output tok/s lost to top-p 0.95 sampling against greedy, warm runs, same engine and load",
        "%",
    ),
    "gpu_saturate_warm_spread_pct": (
        "(max - min) / mean of the 3 warm runs, the wider of top-p and greedy",
        "%",
    ),
    "gpu_lora_reserve_error_pct": (
        "Planner LoRA buffers vs the KV cache vLLM gives up when LoRA is turned on (4 adapters "
        "of rank 16; measured 360 MiB in whole 2 MiB KV blocks), Llama-3.1-8B shape, bf16; H100 "
        "80GB HBM3, vLLM 0.26.0, 2026-11-25",
        "%",
    ),
    "gpu_lora_kv_error_max_pct": (
        "… planner KV-cache tokens vs vLLM's with LoRA on, worst of 2 engines (4 adapters of "
        "rank 16, 8 of rank 64), same GPU and session",
        "%",
    ),
    "gpu_engine_args_throughput_ratio": (
        "The plan's engine arguments (512 seqs) ÷ the best of vLLM's defaults and "
        "--max-num-seqs 256: output tok/s, Llama-3.1-8B shape, 512/256 tokens, H100, 2026-11-23",
        "x",
    ),
    "gpu_prediction_error_p50_pct": (
        "Predicted vs measured output tok/s and ITL, median |error| over the points left out "
        "of calibration (H100 and H200, 3 shapes, vLLM 0.26.0, 2026-11-23/24)",
        "%",
    ),
    "gpu_prediction_error_max_pct": ("… the worst of those points", "%"),
    "gpu_prediction_points": (
        "… how many (tok/s and ITL counted apart; with the H100's 5 Llama-3.1-70B fp8 points, "
        "2026-11-24)",
        "points",
    ),
    "gpu_fp8_prediction_error_p50_pct": (
        "… of those, the H100 fp8 points, held out of the fp8 fit (17 H200 fp8 points), median",
        "%",
    ),
    "gpu_fp8_prediction_error_max_pct": ("… the worst of the H100 fp8 points", "%"),
    "gpu_heldout_tok_s_error_p50_pct": (
        "Predicted vs measured output tok/s on a dense shape held out of the fit "
        "(heldout-wide-17b: hidden 5120, 48 layers, MLP 17408; 2 x TP1, TP2 and a tight fit at "
        "0.29; points at concurrency 1-128 and greedy saturation), 2 x H200, vLLM 0.26.0, "
        "2026-11-27; the bf16 fit had the 8B H100 sweep and heldout-deep-10b (60 layers) at TP1 "
        "and TP2, and the deep shape's tight fit (0.18) is held out too; median |error|",
        "%",
    ),
    "gpu_heldout_tok_s_error_max_pct": ("… the worst of those points", "%"),
    "gpu_heldout_itl_b1_error_max_pct": (
        "… batch-1 ITL of those held-out engines, worst |error|",
        "%",
    ),
    "gpu_heldout_kv_error_max_pct": (
        "Planner KV-cache tokens vs vLLM's on both new shapes (heldout-wide-17b, "
        "heldout-deep-10b; TP1, TP2 and tight fits at 0.29 and 0.18; the KV model fits none of "
        "them), 2 x H200, vLLM 0.26.0, 2026-11-27, worst |error|",
        "%",
    ),
    "gpu_two_gpu_choice_agrees": (
        "For each new shape on 2 x H200 (bench/gpu/plan-heldout-*.yaml), the planner's choice "
        "between 2 x TP1 and TP2 is the measured winner by greedy saturation output tok/s per "
        "GPU (2 x TP1 won both: 5,091 vs 4,376 wide, 7,282 vs 6,091 deep), vLLM 0.26.0, "
        "2026-11-27 (1: both agree)",
        "",
    ),
    "gpu_four_gpu_choice_agrees": (
        "Issue 46: Llama-3.1-70B's shape on 4 x H200 of one host (bench/gpu/four_gpu.sh, "
        "dummy weights, vLLM 0.26.0, 2026-11-27): for each four-GPU twin of "
        "examples/llama-3.1-70b-8xh100.yaml planned for H200 (bf16, fp8; 512/256 and "
        "2,048/128), the planner's layout is the measured winner by greedy saturation output "
        "tok/s per GPU (1: all four agree; bench/gpu/four-gpu.json)",
        "",
    ),
    "gpu_four_gpu_chosen_over_tp4": (
        "… the chosen layout's measured output tok/s per GPU over 1 x TP4's, the smaller of "
        "the bf16 and fp8 twins at 512/256 (bf16 2 x TP2 1,256 vs 1,084; fp8 4 x TP1 2,134 vs "
        "1,495)",
        "x",
    ),
    "gpu_four_gpu_tok_s_error_p50_pct": (
        "… planner against measured saturation output tok/s per GPU of every layout run "
        "(bf16 1 x TP4, 2 x TP2; fp8 1 x TP4, 2 x TP2, 4 x TP1; both workloads), median |error|",
        "%",
    ),
    "gpu_four_gpu_tok_s_error_max_pct": ("… the worst of those ten", "%"),
    "gpu_engine_init_8b_cold_s": (
        "vLLM's engine init (load, torch.compile, profiling, CUDA graphs, KV cache; its log's "
        "`init engine ... took`) of Llama-3.1-8B's shape on one H100, dummy weights, vLLM 0.26.0, "
        "2026-11-23, compiling afresh as a new pod does; median of the engines that ran "
        "(`make bench BENCH=gpu_start`, bench/gpu/start-phases.json; not through the operator)",
        "s",
    ),
    "gpu_engine_init_8b_warm_s": (
        "… the same, loading an earlier start's torch.compile cache",
        "s",
    ),
    "gpu_compile_cache_init_speedup_8b": ("… cold over warm", "x"),
    "gpu_engine_init_70b_fp8_cold_s": (
        "vLLM's engine init of Llama-3.1-70B's shape in fp8 (quantized on load) on one H200, "
        "dummy weights, vLLM 0.26.0, 2026-11-24 to 2026-11-27, compiling afresh; median",
        "s",
    ),
    "gpu_engine_init_70b_fp8_warm_s": ("… loading an earlier start's compile cache", "s"),
    "gpu_compile_cache_init_speedup_70b_fp8": ("… cold over warm", "x"),
    "gpu_engine_init_compile_share_pct": (
        "torch.compile's share of vLLM's engine init, median over every engine in bench/gpu/logs "
        "that compiled afresh (H100 and H200, 8B to 70B, TP 1-4)",
        "%",
    ),
    "gpu_operator_first_token_cold_s": (
        "An LLMDeployment's engine pod, rendered and started by the operator on a real GPU "
        "(dev/gpulab: the lab's control plane, the operator and a node runner on the GPU machine), "
        "from its container's start to the first token it answers: Llama-3.1-8B-Instruct with a "
        "model cache claim, one H200, dummy weights, vLLM 0.26.0, 2026-11-27, a first pod "
        "compiling afresh (`make bench BENCH=gpu_operator`; phases in "
        "bench/gpu/operator-start-phases.json)",
        "s",
    ),
    "gpu_operator_first_token_warm_s": (
        "… a replacement pod of the same Deployment, loading the compile cache (vLLM's and "
        "Triton's) the first left on the claim",
        "s",
    ),
    "gpu_operator_imports_cold_s": (
        "… of it, container start to vLLM's engine core loading the model (Python imports of the "
        "API server and the engine core, CUDA initialisation), first pod on a fresh machine",
        "s",
    ),
    "gpu_operator_imports_warm_s": ("… the replacement pod (the machine's page cache warm)", "s"),
    "gpu_operator_compile_cold_s": ("… torch.compile, first pod", "s"),
    "gpu_operator_compile_warm_s": ("… torch.compile, replacement pod (compile cache hit)", "s"),
    "gpu_operator_compile_cache_init_speedup": (
        "… vLLM's engine init, first pod over replacement pod",
        "x",
    ),
    "gpu_operator_kv_error_cold_pct": (
        "… KV-cache tokens vLLM allocated vs the plan (PlanVerified=True, KVCacheMatchesPlan), "
        "first pod",
        "%",
    ),
    "gpu_operator_kv_error_warm_pct": ("… the replacement pod, with the warm compile cache", "%"),
    "gpu_operator_h100_no_triton_cache_first_token_cold_s": (
        "The same scenario on one H100 80GB HBM3 (2026-11-27) before Triton's cache moved to the "
        "claim (vLLM's compile cache alone there): first pod, container start to first token",
        "s",
    ),
    "gpu_operator_h100_no_triton_cache_first_token_warm_s": (
        "… replacement pod (it JIT-compiled the sampler's Triton kernels again)",
        "s",
    ),
    "gpu_operator_h100_no_triton_cache_imports_cold_s": ("… imports, first pod", "s"),
    "gpu_operator_h100_no_triton_cache_imports_warm_s": ("… imports, replacement pod", "s"),
    "gpu_operator_h100_no_triton_cache_compile_cold_s": ("… torch.compile, first pod", "s"),
    "gpu_operator_h100_no_triton_cache_compile_warm_s": ("… torch.compile, replacement", "s"),
    "gpu_operator_h100_no_triton_cache_compile_cache_init_speedup": (
        "… vLLM's engine init, first pod over replacement pod",
        "x",
    ),
    "gpu_operator_h100_no_triton_cache_kv_error_cold_pct": ("… KV vs plan, first pod", "%"),
    "gpu_operator_h100_no_triton_cache_kv_error_warm_pct": ("… KV vs plan, replacement", "%"),
    "gpu_standby_sleep_s": (
        "vLLM sleep mode through `vllm serve` (VLLM_SERVER_DEV_MODE=1, --enable-sleep-mode): "
        "POST /sleep?level=1 of Llama-3.1-8B's shape on one H200, dummy weights, vLLM 0.26.0, "
        "2026-11-27 (bench/gpu/sleep_contract.py; not through the operator)",
        "s",
    ),
    "gpu_standby_asleep_gpu_gib": ("… GPU memory in use while asleep (133.5 GiB awake)", "GiB"),
    "gpu_standby_wake_first_token_s": (
        "… POST /wake_up to the first token of a completion sent after it",
        "s",
    ),
    "gpu_operator_70b_fp8_first_token_cold_s": (
        "The operator's engine pod on a real GPU (dev/gpulab, scenario `70b-fp8`): "
        "Llama-3.1-70B-Instruct quantized to fp8 on load, one H200 of a two-H200 machine, model "
        "cache claim, dummy weights, vLLM 0.26.0, 2026-11-28; first pod, container start to "
        "first token (PlanVerified=True)",
        "s",
    ),
    "gpu_operator_70b_fp8_first_token_warm_s": (
        "… the replacement pod (on the machine's other GPU), loading the first pod's compile "
        "cache from the claim",
        "s",
    ),
    "gpu_operator_70b_fp8_imports_cold_s": ("… imports, first pod", "s"),
    "gpu_operator_70b_fp8_imports_warm_s": ("… imports, replacement pod", "s"),
    "gpu_operator_70b_fp8_compile_cold_s": ("… torch.compile, first pod", "s"),
    "gpu_operator_70b_fp8_compile_warm_s": ("… torch.compile, replacement (cache hit)", "s"),
    "gpu_operator_70b_fp8_compile_cache_init_speedup": (
        "… vLLM's engine init, first pod over replacement pod",
        "x",
    ),
    "gpu_operator_70b_fp8_kv_error_cold_pct": ("… KV vs plan, first pod", "%"),
    "gpu_operator_70b_fp8_kv_error_warm_pct": (
        "… KV vs the plan's fresh-compile figure, replacement (the compiled forward peaks lower)",
        "%",
    ),
    "gpu_operator_70b_fp8_kv_error_warm_cached_plan_pct": (
        "… KV vs the plan's figure for an engine that finds its compile cache "
        "(status.plan.kvCacheTokensCompileCached), replacement",
        "%",
    ),
    "gpu_operator_two_at_once_engine_init_max_s": (
        "Two Llama-3.1-8B replicas (two TP1 pods on two H200s) started by the operator at once "
        "on one model cache claim, 2026-11-28: neither found a cache (both compiled), both "
        "allocated the same KV cache; vLLM's engine init, the slower",
        "s",
    ),
    "gpu_operator_two_at_once_compile_max_s": ("… torch.compile, the slower", "s"),
    "gpu_standby_tp2_rounds_ok": (
        "vLLM sleep mode at TP 2 (`sleep_contract.py --tp 2 --cycles 5`): Llama-3.1-8B's shape "
        "on two H200s, dummy weights, vLLM 0.26.0, 2026-11-28; rounds of sleep level 1, wake "
        "and a completion that answered within their bounds (240, 120 and 60 s), of",
        "rounds",
    ),
    "gpu_standby_tp2_rounds": ("… rounds run", "rounds"),
    "gpu_standby_tp2_first_sleep_s": (
        "… the first POST /sleep (it pins the host buffers the weights go to)",
        "s",
    ),
    "gpu_standby_tp2_sleep_max_s": ("… every later POST /sleep, the slowest", "s"),
    "gpu_standby_tp2_wake_first_token_max_s": (
        "… POST /wake_up to the first token of a completion after it, the slowest round",
        "s",
    ),
    "gpu_standby_tp2_asleep_gpu_gib": ("… GPU memory in use per GPU while asleep", "GiB"),
    "gpu_serve_warm_first_token_median_s": (
        "`vllm serve` alone (bench/gpu/start_probe.py, no operator) on the operator's command line "
        "for Llama-3.1-8B, one H200 of a two-H200 machine, its compile caches warm, dummy "
        "weights, vLLM 0.26.0, 2026-11-28: process start to first token, median of 3",
        "s",
    ),
    "gpu_serve_warm_first_token_api_server_entry_median_s": (
        "… the same started as `python -m vllm.entrypoints.openai.api_server` instead of the "
        "`vllm` CLI (which imports every subcommand): no gain, median of 3",
        "s",
    ),
    "gpu_scale_from_zero_first_token_s": (
        "Scale from zero on a real GPU, through the product (dev/gpulab scenario `zero`: the "
        "lab's control plane, KEDA v2.21.0, Prometheus, the operator, the vLLM Router and a node "
        "runner on a two-H200 machine): a streamed completion sent to the router of an "
        "LLMDeployment at zero (Llama-3.1-8B, one H200, model cache claim, compile cache warm "
        "on it, dummy weights, vLLM 0.26.0, 2026-11-28), to its first token; goal 30 s",
        "s",
    ),
    "gpu_scale_from_zero_keda_s": (
        "… of it, the send to the engine pod's creation (the router's no_available_workers "
        "error scraped, KEDA's 5 s poll)",
        "s",
    ),
    "gpu_scale_from_zero_router_admission_s": (
        "… of it, the engine pod Ready to the first token (the router picking the engine up)",
        "s",
    ),
    "gpu_scale_from_zero_first_token_cold_s": (
        "… the same at once on the machine's other GPU with the compile cache in the pod "
        "(compileCache: podLocal, as without a claim): torch.compile afresh",
        "s",
    ),
    "gpu_scale_from_zero_keda_cold_s": ("… of it, the send to the engine pod's creation", "s"),
    "gpu_scale_from_zero_router_admission_cold_s": (
        "… of it, the engine pod Ready to the first token",
        "s",
    ),
    "gpu_operator_8b_real_first_token_cold_s": (
        "The operator's engine pod on real bytes (dev/gpulab scenario `8b-real`): a 15 GiB "
        "checkpoint of random bf16 weights in Llama-3.1-8B's shape on the machine's local disk "
        "(bench/gpu/load_probe.py write), page cache dropped, one H200, model cache claim, "
        "vLLM 0.26.0, 2026-11-28; first pod, container start to first token (PlanVerified=True)",
        "s",
    ),
    "gpu_operator_8b_real_first_token_warm_s": (
        "… the replacement pod: compile cache from the claim, the checkpoint in the page cache",
        "s",
    ),
    "gpu_operator_8b_real_weight_load_cold_s": (
        "… vLLM's `Model loading took`, first pod (page cache dropped: read from disk)",
        "s",
    ),
    "gpu_operator_8b_real_imports_cold_s": ("… imports, first pod", "s"),
    "gpu_operator_8b_real_imports_warm_s": ("… imports, replacement pod", "s"),
    "gpu_operator_8b_real_compile_cold_s": ("… torch.compile, first pod", "s"),
    "gpu_operator_8b_real_compile_warm_s": ("… torch.compile, replacement pod", "s"),
    "gpu_operator_8b_real_compile_cache_init_speedup": (
        "… vLLM's engine init, first pod over replacement pod",
        "x",
    ),
    "gpu_operator_8b_real_kv_error_cold_pct": ("… KV vs plan, first pod", "%"),
    "gpu_operator_8b_real_kv_error_warm_pct": ("… KV vs plan, replacement", "%"),
    "gpu_operator_8b_real_kv_error_warm_cached_plan_pct": (
        "… KV vs the plan's compile-cached figure, replacement",
        "%",
    ),
    "gpu_weight_load_8b_default_dropped_s": (
        "vLLM's `Model loading took` for that checkpoint under `vllm serve` (bench/gpu/"
        "load_probe.py time, one H200, vLLM 0.26.0, 2026-11-28), vLLM's default loader, page "
        "cache dropped; this run shared the machine with start_probe.py on the other GPU",
        "s",
    ),
    "gpu_weight_load_8b_default_warm_s": ("… default, page cache warm", "s"),
    "gpu_weight_load_8b_prefetch_dropped_s": (
        "… `--safetensors-load-strategy prefetch`, page cache dropped (alone on the machine)",
        "s",
    ),
    "gpu_weight_load_8b_prefetch_warm_s": ("… prefetch, page cache warm", "s"),
    "gpu_weight_load_8b_eager_dropped_s": (
        "… `--safetensors-load-strategy eager`, page cache dropped",
        "s",
    ),
    "gpu_weight_load_8b_eager_warm_s": ("… eager, page cache warm", "s"),
    "startup_prediction_error_max_pct": (
        "The planner's predicted `vllm.LLM()` to ready (planner/startup.py: imports, load, "
        "torch.compile cold or warm, CUDA graphs, KV profiling) vs each of the 40 engine starts "
        "in bench/gpu/start-phases.json it was fitted to (H100 and H200, 8B to 70B, TP 1-4, "
        "dummy weights, vLLM 0.26.0), worst",
        "%",
    ),
    "startup_prediction_error_p50_pct": ("… median", "%"),
    "gpu_quantized_checkpoint_kv_error_max_pct": (
        "Planner KV-cache tokens vs vLLM's for a pre-quantized checkpoint sized from its "
        "config.json's quantization_config (Llama-3.1-8B's shape as compressed-tensors FP8 W8A8, "
        "bench/gpu/models/llama-3.1-8b-fp8-ct: 944,256 tokens, and its start that loaded its "
        "compile cache against the compile-cached figure; Qwen2.5-7B-Instruct-AWQ and "
        "-GPTQ-Int4), dummy weights, H200, vLLM 0.26.0, 2026-11-27, worst",
        "%",
    ),
    "gpu_kv_cache_fp8_error_pct": (
        "Planner KV-cache tokens vs vLLM's with --kv-cache-dtype fp8 (spec.engine.kvCacheDtype; "
        "Llama-3.1-8B's shape in bf16: 1,782,288 tokens, twice bf16's), H200, vLLM 0.26.0, "
        "2026-11-27",
        "%",
    ),
    "allreduce_fit_error_p50_pct": (
        "Planner's all-reduce model (planner/allreduce.py) against the latency tables it is "
        "fitted to: aiconfigurator-core 0.12.0 (Apache-2.0), vLLM 0.24.0 custom all-reduce and "
        "NCCL 2.29.2, bf16, H100 and H200 SXM, TP 2/4/8, each message size at the backend vLLM "
        "0.32 picks for it (bench/data/allreduce/); median |error|",
        "%",
    ),
    "allreduce_fit_error_max_pct": ("… the worst table entry", "%"),
    "published_tp_error_p50_pct": (
        "Planner against published tensor-parallel vLLM results (`make bench "
        "BENCH=tp_published`): LambdaLabsML/vllm-benchmark's median TPOT of "
        "Llama-3.1-70B-FP8 on H100 at TP 1/2/4/8 (vLLM 0.5.4, 2024-09-07) and the ISC 2026 "
        "poster's 2 x TP=4 / 1 x TP=8 throughput ratios for Llama-3.3-70B (bf16, fp8) on "
        "8 x H100; median |error| (docs/planner.md lists each)",
        "%",
    ),
    "published_tp_error_max_pct": ("… the worst of those comparisons", "%"),
    "published_tp_ranking_agrees": (
        "… 1 when the planner picks every published winner (fastest TP for TPOT, 2 x TP=4 for "
        "throughput and for examples/llama-3.1-70b-8xh100.yaml, TP=8 for light-load TTFT)",
        "",
    ),
    "image_build_s": (
        "`make images` from a cold cache: the stand-in base from Debian's archive (mmdebstrap), "
        "the operator and router images with buildah (pip from PyPI), each smoke-run with crun "
        "(2 CPUs of an AMD EPYC shared with other work, 2026-11-25)",
        "s",
    ),
    "operator_image_mib": (
        "Operator image: its OCI archive (gzip layers, what a registry stores), on the stand-in "
        "base (images/README.md)",
        "MiB",
    ),
    "router_image_mib": ("… the vLLM Router image", "MiB"),
}


# The five figures README.md shows: (what a user gets, the value with {figure} placeholders, each
# formatted with its unit). Every placeholder is a figure of FIGURES.
HEADLINES: tuple[tuple[str, str], ...] = (
    (
        "The planner's predicted output tok/s and ITL against vLLM's on H100 and H200, error over "
        "the runs left out of its fit",
        "{gpu_prediction_error_p50_pct} median, {gpu_prediction_error_max_pct} worst, over "
        "{gpu_prediction_points}",
    ),
    (
        "Operator failover: SIGKILL of the leader to the standby's first write (two replicas, "
        "the chart's lease settings)",
        "{operator_failover_s} median of 5, {operator_failover_max_s} slowest",
    ),
    (
        "`helm upgrade` from the previous release under load through the router: requests "
        "failed, engine pods restarted",
        "{upgrade_failed_requests} failed of {upgrade_requests}, {upgrade_engine_restarts} "
        "restarted",
    ),
    (
        "Scale from zero: a request sent at zero engines, to its first token (tiny model, CPU "
        "vLLM; the router holds the request)",
        "{scale_from_zero_first_token_s} median of 3",
    ),
    (
        "vLLM Router's default policy vs round_robin on shared-prefix chats over 2 engines",
        "{router_prefix_ttft_p50_ratio} the TTFT p50, {router_prefix_throughput_ratio} the "
        "tokens/s",
    ),
)
_PLACEHOLDER = re.compile(r"\{(\w+)\}")


def machine() -> dict[str, Any]:
    mem_kib = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kib = int(line.split()[1])
    cpu = platform.processor() or "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    return {
        "cpus": os.cpu_count(),
        "memory_gib": round(mem_kib / 2**20, 1),
        "cpu": cpu,
        "python": platform.python_version(),
    }


def load() -> dict[str, Any]:
    if RESULTS.exists():
        data: dict[str, Any] = json.loads(RESULTS.read_text())
        return data
    return {}


def save(figures: dict[str, float]) -> dict[str, Any]:
    data = load()
    data.update({k: round(v, 3) for k, v in figures.items()})
    data["machine"] = machine()
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    data["date"] = today
    # A run measures some figures only: each keeps the date it was measured on.
    data["dates"] = {**data.get("dates", {}), **dict.fromkeys(figures, today)}
    # ... and the processor it was measured on (machines differ between sessions).
    data["cpus_by_figure"] = {
        **data.get("cpus_by_figure", {}),
        **dict.fromkeys(figures, data["machine"]["cpu"]),
    }
    RESULTS.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return data


def value(data: dict[str, Any], name: str) -> str:
    """One figure as the tables print it: its number and unit."""
    return f"{data[name]:g} {FIGURES[name][1]}".rstrip()


def table(data: dict[str, Any]) -> str:
    """Every figure of FIGURES that `data` holds, in order, and where and when they were
    measured (bench/README.md)."""
    rows = ["| figure | what | value |", "| --- | --- | --- |"]
    for name, (what, _) in FIGURES.items():
        if name in data:
            rows.append(f"| `{name}` | {what} | {value(data, name)} |")
    m = data.get("machine", {})
    rows.append("")
    dates = data.get("dates") or {}
    counts: dict[str, int] = {}
    for name in FIGURES:
        if name in data:
            day = dates.get(name, data.get("date", "?"))
            counts[day] = counts.get(day, 0) + 1
    days = [f"{day} ({n} figure{'' if n == 1 else 's'})" for day, n in sorted(counts.items())]
    when = days[0] if len(days) == 1 else f"{', '.join(days[:-1])} and {days[-1]}"
    by_cpu: dict[str, int] = {}
    for name in FIGURES:
        if name in data and not name.startswith("gpu_"):
            cpu = (data.get("cpus_by_figure") or {}).get(name, m.get("cpu", "?"))
            by_cpu[cpu] = by_cpu.get(cpu, 0) + 1
    cpus = ", ".join(f"{cpu}: {n} figures" for cpu, n in sorted(by_cpu.items()))
    rows.append(
        f"Measured {when} on {m.get('cpus', '?')} CPUs ({cpus}), {m.get('memory_gib', '?')} GiB "
        "(the GPU figures on the GPUs they name); from `bench/results.json` (`make bench`), "
        "whose `dates` and `cpus_by_figure` give each figure's."
    )
    return "\n".join(rows)


def headlines(data: dict[str, Any]) -> str:
    """The HEADLINES rows (README.md), each value filled in from `data`."""
    rows = ["| what | measured | figures |", "| --- | --- | --- |"]
    days = set()
    for what, template in HEADLINES:
        names = _PLACEHOLDER.findall(template)
        measured = _PLACEHOLDER.sub(lambda m: value(data, m[1]), template)
        figures = ", ".join(f"`{n}`" for n in dict.fromkeys(names))
        rows.append(f"| {what} | {measured} | {figures} |")
        days |= {(data.get("dates") or {}).get(n, data.get("date", "?")) for n in names}
    cpus = (data.get("machine") or {}).get("cpus", "?")
    rows.append("")
    rows.append(
        f"Measured {' and '.join(sorted(days))} (the CPU figures on {cpus} CPUs, the GPU figures "
        "on the GPUs they name); generated from `bench/results.json`. Every figure, and how "
        "each is measured: [bench/README.md](bench/README.md)."
    )
    return "\n".join(rows)


def write_between_markers(path: Path, body: str) -> None:
    """Replace what stands between TABLE_BEGIN and TABLE_END in `path` with `body`."""
    text = path.read_text()
    pattern = re.compile(re.escape(TABLE_BEGIN) + ".*?" + re.escape(TABLE_END), re.S)
    if not pattern.search(text):
        raise ValueError(f"{path}: no {TABLE_BEGIN} ... {TABLE_END} to write the figures between")
    new = f"{TABLE_BEGIN}\n{body}\n{TABLE_END}"
    path.write_text(pattern.sub(lambda _: new, text))


def write_tables(data: dict[str, Any]) -> None:
    """Every figure into bench/README.md, the headline figures into README.md."""
    write_between_markers(BENCH_README, table(data))
    write_between_markers(FRONT_README, headlines(data))


Runs = list[dict[str, Any]]


def raw_runs_main(
    prog: str,
    doc: str,
    raw: Path,
    *,
    repeat: tuple[str, int, str],
    measure: Callable[[int], Runs],
    plot: Callable[[Runs], None],
    summarize: Callable[[Runs], dict[str, float]],
) -> int:
    """The command line of a benchmark that keeps its raw runs in `raw` (one JSON object a line):
    measure (`repeat`: the option, its default, what it counts) or, with --summarize, read the
    runs back; then plot, summarize and record the figures as `make bench` does."""
    flag, default, what = repeat
    p = argparse.ArgumentParser(prog=prog, description=doc.splitlines()[0])
    p.add_argument(
        flag,
        type=int,
        default=default,
        dest="repeat",
        metavar="N",
        help=f"{what} (default {default})",
    )
    p.add_argument(
        "--summarize",
        action="store_true",
        help=f"measure nothing: figures and plot from {raw.name}",
    )
    args = p.parse_args()
    if args.summarize:
        measured = [json.loads(line) for line in raw.read_text().splitlines() if line]
    else:
        measured = measure(args.repeat)
    plot(measured)
    figures = summarize(measured)
    write_tables(save(figures))
    for k, v in sorted(figures.items()):
        print(f"   {k} = {v:.3f}")
    return 0
