"""`llmfleet plan`: run the layout planner offline on LLMDeployment manifests."""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from llmfleet.catalog.gpu_profiles import DEFAULT_GPU_PROFILES, GpuProfiles, parse_gpu_profiles
from llmfleet.catalog.hub import (
    Config,
    ConfigSource,
    HubDeniedError,
    HubError,
    described,
    endpoint_from_env,
    load_config_file,
)
from llmfleet.models import KIND, LLMDeploymentSpec, field_problems
from llmfleet.models.model_spec import ModelSpec
from llmfleet.planner import Plan, PlanError, plan
from llmfleet.planner.efficiencies import MXFP4_CALIBRATION_NAME
from llmfleet.planner.engine_args import group_args
from llmfleet.planner.explain import compile_cached_words, start_phases_words
from llmfleet.planner.memory import round_up
from llmfleet.planner.startup import PROBE_BUDGET_FLOOR_SECONDS
from llmfleet.render.compilecache import compile_cache_location

EXIT_INVALID = 2
OUTPUT_FORMATS = ("table", "json", "yaml")


@dataclass(frozen=True)
class _Planned:
    label: str
    model: str
    plan: Plan
    compile_cache: str


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="show the layout the operator would choose for LLMDeployment manifests",
        description=(
            "Plan every LLMDeployment in FILE offline, exactly as the operator would. Exits 2 "
            "when a manifest is invalid or cannot be planned."
        ),
    )
    parser.add_argument(
        "-f",
        "--filename",
        required=True,
        help="YAML file with one or more documents; - reads standard input",
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=OUTPUT_FORMATS,
        default="table",
        help="table (default, for people), or json / yaml with one plan per LLMDeployment",
    )
    parser.add_argument(
        "--gpu-profiles",
        type=Path,
        default=None,
        help="YAML map of GPU profiles (as the chart's gpuProfiles value); default: the "
        "chart's default profiles",
    )
    parser.add_argument(
        "--model-config",
        type=Path,
        default=None,
        metavar="FILE",
        help="a model's config.json, sizing every LLMDeployment whose architecture neither "
        "spec.model.architecture nor the built-in catalog gives (air-gapped use); without it "
        "a model named by a path is sized from that folder's config.json on this machine, and "
        "a Hub id's config.json is read from the Hub (env HF_ENDPOINT, and HF_TOKEN for gated "
        "models)",
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    source = "standard input" if args.filename == "-" else args.filename
    try:
        text = sys.stdin.read() if args.filename == "-" else Path(args.filename).read_text()
        documents = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except OSError as error:
        return _fail(f"cannot read {source}: {error.strerror or error}")
    except yaml.YAMLError as error:
        return _fail(f"{source} is not valid YAML: {error}")

    try:
        profiles = (
            parse_gpu_profiles(args.gpu_profiles.read_text())
            if args.gpu_profiles
            else DEFAULT_GPU_PROFILES
        )
    except (OSError, yaml.YAMLError, ValidationError) as error:
        return _fail(f"cannot load GPU profiles from {args.gpu_profiles}: {error}")

    try:
        given = load_config_file(args.model_config) if args.model_config else None
    except (OSError, ValueError) as error:
        return _fail(f"cannot load --model-config {args.model_config}: {error}")

    configs = _ModelConfigs(given)
    planned: list[_Planned] = []
    problems: list[str] = []
    found = False
    for index, document in enumerate(_deployments(documents)):
        found = True
        label = _label(document, index)
        outcome = _plan_document(document, profiles, configs)
        if isinstance(outcome, list):
            problems.extend(f"{label}: {problem}" for problem in outcome)
        else:
            valid = LLMDeploymentSpec.model_validate(document["spec"])
            where = compile_cache_location(valid.model, valid.engine)
            planned.append(_Planned(label, valid.model.name, outcome, where))
    if not found:
        return _fail(f"no {KIND} documents in {source}")

    if planned:
        sys.stdout.write(_render(planned, args.output))
    for problem in problems:
        print(problem, file=sys.stderr)
    return EXIT_INVALID if problems else 0


class _ModelConfigs:
    """config.json for the models that need one: the --model-config file, else the Hub's."""

    def __init__(self, given: Config | None) -> None:
        self.given = given
        self.token = os.environ.get("HF_TOKEN") or None
        self.source = ConfigSource(endpoint_from_env())

    def for_model(self, model: ModelSpec) -> Config | None:
        if self.given is not None:
            return self.given
        local = Path(model.name) / "config.json"
        if model.name.startswith("/") and local.is_file():
            # A model folder on this machine: the CLI reads it where the operator cannot.
            try:
                return load_config_file(local)
            except (OSError, ValueError) as error:
                raise PlanError("spec.model.name", f"cannot load {local}: {error}") from None
        try:
            return self.source.for_model(model, lambda: self.token)
        except HubError as error:
            hint = ""
            if isinstance(error, HubDeniedError):
                hint = " set HF_TOKEN to a token with access to it," if not self.token else ""
            raise PlanError(
                "spec.model.architecture",
                f"cannot read config.json of {described(model)}: {error};{hint} pass its "
                "config.json with --model-config FILE, or set spec.model.architecture",
            ) from None


def _gib(value: float) -> str:
    # Tiny test models would otherwise print as 0.00 GiB.
    return f"{value:.2f} GiB" if value >= 0.01 or value == 0 else f"{value * 1024:.1f} MiB"


def _gib_up(value: float) -> str:
    # Rounded up, as the plan's reason gives reserves.
    return _gib(round_up(value) if value >= 0.01 else value)


def _fail(message: str) -> int:
    print(f"llmfleet plan: {message}", file=sys.stderr)
    return EXIT_INVALID


def _deployments(documents: list[Any]) -> Iterator[dict[str, Any]]:
    for document in documents:
        if isinstance(document, dict) and document.get("kind") == KIND:
            yield document


def _label(document: dict[str, Any], index: int) -> str:
    metadata = document.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return f"{KIND} {name}" if isinstance(name, str) else f"{KIND} #{index + 1}"


def _plan_document(
    document: dict[str, Any], profiles: GpuProfiles, configs: _ModelConfigs
) -> Plan | list[str]:
    spec = document.get("spec")
    if not isinstance(spec, dict):
        return ["spec: an object with at least spec.model.name is required"]
    try:
        valid = LLMDeploymentSpec.model_validate(spec)
        return plan(valid, profiles, configs.for_model(valid.model))
    except ValidationError as error:
        return [str(problem) for problem in field_problems(error, root="spec")]
    except PlanError as error:
        return [str(error)]


def _render(planned: list[_Planned], output: str) -> str:
    dumps = [item.plan.model_dump(by_alias=True, mode="json") for item in planned]
    if output == "json":
        # One JSON document per LLMDeployment; `jq` reads the stream as it is.
        return "".join(json.dumps(dump, indent=2) + "\n" for dump in dumps)
    if output == "yaml":
        return yaml.safe_dump_all(dumps, sort_keys=False, default_flow_style=False)
    return "\n".join(_table(item) for item in planned)


def _table(item: _Planned) -> str:
    p = item.plan
    rows = [
        ("Model", item.model),
        ("Strategy", p.strategy),
        (
            "Replicas",
            f"{p.replicas} (autoscaling {p.min_replicas}-{p.max_replicas}"
            + (": scales to zero when idle)" if p.min_replicas == 0 else ")"),
        ),
        (
            "GPUs per replica",
            f"{p.gpus_per_replica} (tensor parallel {p.tensor_parallel_size})"
            if p.pipeline_parallel_size == 1
            else f"{p.gpus_per_replica} over {p.pipeline_parallel_size} nodes (tensor parallel "
            f"{p.tensor_parallel_size} x pipeline parallel {p.pipeline_parallel_size})",
        ),
        ("Total GPUs", str(p.total_gpus)),
        ("Weights per GPU", f"{_gib(p.weights_gib_per_gpu)} of {_gib(p.weights_gib)} in all"),
        ("Weights format", p.weights_format),
        (
            "KV cache",
            f"{p.kv_cache_tokens_per_replica:,} tokens per replica "
            f"({p.kv_cache_gib_per_gpu:.2f} GiB per GPU)"
            + compile_cached_words(p.kv_cache_tokens_per_replica, p.kv_cache_tokens_compile_cached),
        ),
        ("Max model len", f"{p.max_model_len:,} tokens"),
        ("Max sequences", f"{p.max_concurrent_sequences} per replica"),
        ("Batched tokens", f"{p.max_num_batched_tokens:,} per step"),
        ("Shared memory", f"{p.shm_size_gib} GiB"),
        ("Startup budget", _startup_budget(p)),
        ("Compile cache", item.compile_cache),
    ]
    if p.startup is not None:
        rows.append(("Start, cold", start_phases_words(p.startup.cold)))
        rows.append(("Start, warm", start_phases_words(p.startup.warm)))
        rows.append(
            (
                "Start assumes",
                f"weights read at {p.startup.weight_load_gib_per_second:g} GiB/s per GPU, "
                f"downloaded at {p.startup.download_gib_per_second:g} GiB/s; warm: a compile "
                "cache from an earlier start"
                + (
                    ", the weights in spec.model.cache"
                    if p.startup.warm.download_seconds < p.startup.cold.download_seconds
                    else ""
                ),
            )
        )
    unit = "replica" if p.pipeline_parallel_size > 1 else "pod"
    rows.append(("HPA target", f"{p.target_queue_depth} requests waiting per {unit}"))
    if p.predicted is not None:
        q = p.predicted
        rows.append(("Workload", f"{q.prompt_tokens} prompt + {q.output_tokens} output tokens"))
        rows.append(
            (
                "Predicted",
                f"{q.output_tokens_per_second:,.0f} output tok/s per replica "
                f"({q.output_tokens_per_second_per_gpu:,.0f} per GPU) at {q.concurrency} "
                f"sequences; TTFT {q.ttft_millis:,.0f} ms; ITL {q.itl_millis_batch1:.1f} ms "
                f"alone, {q.itl_millis:.1f} ms at {q.concurrency}",
            )
        )
        if q.sampling:
            rows.append(("Predicted for", q.sampling))
        if q.calibration == MXFP4_CALIBRATION_NAME:
            rows.append(("Speed", q.calibration))
        if q.max_concurrency_within_slo is not None:
            rows.append(("Within SLO", f"up to {q.max_concurrency_within_slo} sequences per pod"))
    if p.lora is not None:
        rows.append(("LoRA", _lora(p)))
    if p.standby is not None:
        rows.append(("Standby", _standby(p)))
    if p.cpu_memory_gib is not None:
        rows.append(("Memory request", f"{p.cpu_memory_gib} GiB"))
    if p.node_selector:
        rows.append(("Node selector", ", ".join(f"{k}={v}" for k, v in p.node_selector.items())))
    width = max(len(name) for name, _ in rows) + 2
    lines = [item.label]
    lines += [f"  {name + ':':<{width}}{value}" for name, value in rows]
    lines += ["", "  Reason:"]
    lines += textwrap.wrap(p.reason, width=96, initial_indent="    ", subsequent_indent="    ")
    if p.candidates and any(c.predicted for c in p.candidates):
        lines += ["", "  Candidates:", _candidate_table(p)]
    lines += ["", "  vLLM command:", f"    vllm serve {item.model}"]
    lines += [f"    {' '.join(group.tokens)}" for group in group_args(p.vllm_args)]
    return "\n".join(lines) + "\n"


def _startup_budget(p: Plan) -> str:
    if p.startup is None:
        return f"{p.startup_budget_seconds} s"
    return (
        f"{p.startup_budget_seconds} s (startupProbe: twice the cold start from the container's "
        f"start, at least {PROBE_BUDGET_FLOOR_SECONDS} s)"
    )


def _lora(p: Plan) -> str:
    lora = p.lora
    assert lora is not None
    where = "per GPU" if p.gpus_per_replica else "in host memory"
    return (
        f"up to {lora.max_adapters} adapters of rank <= {lora.max_rank} at once: "
        f"{_gib_up(lora.gpu_gib_per_gpu)} of buffers {where}; CPU cache of "
        f"{lora.max_cpu_adapters}: {_gib_up(lora.cpu_gib_per_pod)} per pod"
    )


def _standby(p: Plan) -> str:
    standby = p.standby
    assert standby is not None
    return (
        f"{standby.replicas} asleep, holding {standby.gpus} GPUs and "
        f"{_gib_up(standby.host_memory_gib_per_replica)} of host memory each for the offloaded "
        f"weights; one wakes above {standby.wake_queue_depth} waiting per pod, sleeps again "
        f"at or below {standby.sleep_queue_depth} for {standby.cooldown_seconds} s"
    )


def _candidate_table(p: Plan) -> str:
    header = ("", "layout", "GPUs", "KV tokens/pod", "seqs", "out tok/s/GPU", "TTFT ms", "ITL ms")
    rows = [header]
    verdicts = []
    for c in p.candidates:
        q = c.predicted
        layout = f"{c.replicas} x TP={c.tensor_parallel_size}"
        rows.append(
            (
                "*" if c.chosen else "",
                layout,
                str(c.replicas * c.tensor_parallel_size),
                f"{c.kv_cache_tokens_per_replica:,}",
                str(c.max_num_seqs),
                f"{q.output_tokens_per_second_per_gpu:,.0f}" if q else "-",
                f"{q.ttft_millis:,.0f}" if q else "-",
                f"{q.itl_millis_batch1:.1f}/{q.itl_millis:.1f}" if q else "-",
            )
        )
        if not c.chosen:
            verdicts.append(f"    {layout}: {c.verdict}")
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    text = [
        "    "
        + "  ".join(
            cell.rjust(w) if i > 1 else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ]
    text.append("    (ITL: a lone request / at the planned concurrency; * chosen)")
    return "\n".join(text + verdicts)
