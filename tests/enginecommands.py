"""The engine command lines LLMFleet renders, for the tests that hold them to vLLM's parser: every
example LLMDeployment's, and those of seeded random specs (the same ones on every run, so the
unit tier's table check and the e2e tier's real-parser check see the same commands).

A command is what follows `vllm serve` in an engine container: the model, then the flags.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner import PlanError, plan
from llmfleet.planner.engine_flags import UNKNOWN_REASON, VALUE_REASON
from llmfleet.render import Owner, render_fleet
from llmfleet.render.engine import ENGINE_COMMAND
from llmfleet.settings import OperatorSettings

FLEET = OperatorSettings().fleet

REPO = Path(__file__).resolve().parents[1]
OWNER = Owner("fleet", "team-a", "0a1b2c3d-uid")
# extraArgs a user may give, each accepted by the pinned vLLM: tuning flags, a derived flag
# overridden (argparse takes the user's, which the planner reads), JSON and negative values.
EXTRA_ARGS: tuple[tuple[str, ...], ...] = (
    (),
    ("--enable-prefix-caching",),
    ("--no-enable-prefix-caching",),
    ("--enforce-eager",),
    ("--max_num_seqs=24",),
    ("--max-model-len", "4k"),
    ("--seed", "-1"),
    ("--kv-cache-dtype", "fp8"),
    ("--block-size", "16"),
    ("--generation-config", "vllm"),
    ("--override-generation-config", '{"temperature": 0.2}'),
    ("--trust-remote-code",),
    ("-O3",),
    ("--enable-chunked-prefill", "--disable-log-stats"),
)
HEADS = (8, 16, 32, 40, 64)


def engine_commands(objects: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Each engine container's arguments after `vllm serve`, keyed by where it is."""
    found = {}
    for obj in objects:
        spec = obj.get("spec", {})
        templates = {"template": spec.get("template")}
        group = spec.get("leaderWorkerTemplate")
        if group:
            templates = {k: group[k] for k in ("leaderTemplate", "workerTemplate")}
        for key, template in templates.items():
            for container in (template or {}).get("spec", {}).get("containers", []):
                if container.get("command") == list(ENGINE_COMMAND):
                    where = f"{obj['kind']}/{obj['metadata']['name']} {key} {container['name']}"
                    found[where] = list(container["args"])
    return found


def rendered(spec: LLMDeploymentSpec) -> dict[str, list[str]]:
    return engine_commands(render_fleet(OWNER, spec, plan(spec), FLEET).objects())


def example_commands() -> dict[str, list[str]]:
    """Every examples/*.yaml LLMDeployment's engine commands."""
    out = {}
    for path in sorted((REPO / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "LLMDeployment":
                spec = LLMDeploymentSpec.model_validate(doc["spec"])
                for where, argv in rendered(spec).items():
                    out[f"{path.name}: {where}"] = argv
    return out


def random_manifest(rng: random.Random) -> dict[str, Any]:
    heads = rng.choice(HEADS)
    context = rng.choice((2048, 8192, 32768, 131072))
    per_node = rng.choice((1, 2, 4, 8))
    engine: dict[str, Any] = {
        "gpuMemoryUtilization": round(rng.uniform(0.6, 0.95), 2),
        "schedulingPolicy": rng.choice(("fcfs", "priority")),
        "extraArgs": list(rng.choice(EXTRA_ARGS)),
    }
    if rng.random() < 0.5:
        engine["maxModelLen"] = rng.choice((512, 2048, 4096, context))
    if rng.random() < 0.3:
        engine["maxNumSeqs"] = rng.randint(1, 64)
    if rng.random() < 0.2:
        engine["lora"] = {"maxAdapters": rng.choice((1, 4)), "maxRank": rng.choice((8, 16, 64))}
    model: dict[str, Any] = {
        "name": rng.choice(("org/generated", "/models/generated", "s3://bucket/generated")),
        "dtype": rng.choice(("auto", "bfloat16", "float16")),
        "quantization": rng.choice(("none", "none", "fp8")),
        "architecture": {
            "parametersBillions": round(rng.uniform(0.5, 500), 1),
            "numLayers": rng.randint(8, 126),
            "numAttentionHeads": heads,
            "numKeyValueHeads": rng.choice([d for d in (1, 2, 4, 8) if heads % d == 0]),
            "headDim": 128,
            "maxPositionEmbeddings": context,
        },
    }
    if rng.random() < 0.4:
        model["servedModelName"] = rng.choice(("chat", "llama-70b", "model-é"))
    if rng.random() < 0.3:
        model["revision"] = rng.choice(("main", "a1b2c3d"))
    manifest: dict[str, Any] = {
        "model": model,
        "objective": rng.choice(("Throughput", "Latency")),
        "engine": engine,
    }
    if rng.random() < 0.9:
        manifest["gpus"] = {
            "count": per_node * rng.choice((1, 1, 2, 4)),
            "perNode": per_node,
            "memoryGiB": rng.choice((24, 48, 80, 141)),
        }
    return manifest


def fuzzed_commands(count: int = 300, seed: int = 42) -> dict[str, list[str]]:
    """The engine commands of `count` random specs that plan (specs the planner refuses, say for
    not fitting, are drawn again)."""
    rng = random.Random(seed)
    out: dict[str, list[str]] = {}
    drawn = 0
    while len(out) < count:
        drawn += 1
        assert drawn < count * 20, f"only {len(out)} of {drawn} random specs planned"
        try:
            spec = LLMDeploymentSpec.model_validate(random_manifest(rng))
            commands = rendered(spec)
        except PlanError as error:
            # Not fitting is the generator's luck; a refused flag is a wrong EXTRA_ARGS.
            if error.reason in (UNKNOWN_REASON, VALUE_REASON):
                raise AssertionError(f"EXTRA_ARGS holds what vLLM refuses: {error}") from error
            continue
        except ValidationError:
            continue
        where, argv = next(iter(commands.items()))
        out[f"random spec {drawn} (seed {seed}): {where}"] = argv
    return out
