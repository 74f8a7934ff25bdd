"""Every change the node runner makes to a pod's command line and environment, in one place.

A pod that lands on the local node runs its container's own `command` + `args` as a process on
this machine. vLLM's CPU build cannot run every flag a GPU pod carries, so the runner rewrites the
command line, and ONLY as listed in ADAPTATIONS below. docs/cpu-adaptations.md explains each one
and why; keep the two in step. Anything not listed runs exactly as the pod says.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# What the operator runs: `vllm serve MODEL ...` (and `--headless` on a multi-node replica's
# workers). Releases before 0.2.0 ran the OpenAI server module with --model, which the upgrade
# test still starts.
VLLM_COMMAND = "vllm"
SERVE = "serve"
VLLM_MODULE = "vllm.entrypoints.openai.api_server"
# What runs for `vllm` here: the virtualenv's own script fails (site/vllm_cli.py says why).
LAB_VLLM_MODULE = "vllm_cli"
# On real GPUs, `vllm` is vLLM's own CLI module (the GPU bundle's console script is fine too).
GPU_VLLM_MODULE = "vllm.entrypoints.cli.main"
VLLM_CLI_MODULES = (LAB_VLLM_MODULE, GPU_VLLM_MODULE)
# The LLMBatchJob runner (`python3 -m llmfleet.batch.runner`): its flags are vLLM engine flags plus
# its own, and its --host binds its metrics endpoint, so it gets the same rewrites.
BATCH_RUNNER_MODULE = "llmfleet.batch.runner"
# The image installs the llmfleet wheel; here the pod's python imports it from the checkout.
LLMFLEET_SRC = Path(__file__).resolve().parents[3] / "operator" / "src"
# Holds the sitecustomize that asks Linux for AMX tile state (item 16; the module says why).
AMX_SITE = Path(__file__).resolve().parent / "site"
PYTHON_NAMES = ("python3", "python")
# On CPU the KV cache is VLLM_CPU_KVCACHE_SPACE GiB (vLLM's own default is 4 GiB).
DEFAULT_KVCACHE_GIB = "1"
# vLLM quantization methods that need GPU kernels; the tiny test model is unquantized anyway.
GPU_ONLY_QUANTIZATION = frozenset({"fp8", "awq", "gptq", "awq_marlin", "gptq_marlin"})
TINY_MODEL_MAX_LEN = 2048

# A vLLM server pod annotated so runs the engine stand-in (dev/localcluster/standin) in vLLM's
# place, on the same command line. Not under llmfleet.dev/: the CRD refuses that prefix in
# spec.engine.podAnnotations. The settings annotations become the stand-in's environment.
STAND_IN_ANNOTATION = "lab.llmfleet.test/engine"
STAND_IN = "stand-in"
STAND_IN_MODULE = "localcluster.standin"
STAND_IN_TOKEN_SECONDS = "lab.llmfleet.test/stand-in-token-seconds"
STAND_IN_WARM_UP_SECONDS = "lab.llmfleet.test/stand-in-warm-up-seconds"
STAND_IN_SLEEP_SECONDS = "lab.llmfleet.test/stand-in-sleep-seconds"
STAND_IN_WAKE_SECONDS = "lab.llmfleet.test/stand-in-wake-seconds"
# `name=seconds,...`: the start's phases, in place of the one warm-up (standin/startphases.py).
STAND_IN_START_PHASES = "lab.llmfleet.test/stand-in-start-phases"
STAND_IN_SETTINGS = {
    STAND_IN_TOKEN_SECONDS: "LLMFLEET_STANDIN_TOKEN_S",
    STAND_IN_WARM_UP_SECONDS: "LLMFLEET_STANDIN_WARMUP_S",
    STAND_IN_SLEEP_SECONDS: "LLMFLEET_STANDIN_SLEEP_S",
    STAND_IN_WAKE_SECONDS: "LLMFLEET_STANDIN_WAKE_S",
    STAND_IN_START_PHASES: "LLMFLEET_STANDIN_START_PHASES",
}
# The container's volumeMounts (mountPath -> emulated directory), as JSON, for the sitecustomize:
# vLLM is told LoRA paths over its API at run time, where no command line rewrite reaches.
LAB_VOLUMES_ENV = "LLMFLEET_LAB_VOLUMES"
LAB_PYTHONPATH = Path(__file__).resolve().parents[2]  # dev/: `localcluster` importable

# (name, what it does): the list docs/cpu-adaptations.md describes, in the same order.
ADAPTATIONS: tuple[tuple[str, str], ...] = (
    ("python", "`python3`/`python`/`vllm` as the command -> the vLLM virtualenv's"),
    ("host", "`--host` (any value, or none) -> `--host <pod IP>`"),
    ("tensor-parallel", "`--tensor-parallel-size N` -> `1`"),
    ("gpu-memory-utilization", "`--gpu-memory-utilization X` dropped"),
    ("quantization", "`--quantization fp8|awq|gptq` dropped"),
    ("enforce-eager", "`--enforce-eager` added"),
    ("model", "`vllm serve NAME` or `--model NAME` -> the directory the table maps NAME to"),
    ("max-model-len", "`--max-model-len` capped to the served model's max_position_embeddings"),
    ("kv-cache", "env VLLM_CPU_KVCACHE_SPACE=1 unless the pod sets it"),
    ("batch-runner", "`-m llmfleet.batch.runner` gets rewrites 2-8 too (vLLM engine flags)"),
    ("pythonpath", "env PYTHONPATH starts with the checkout's operator/src (llmfleet importable)"),
    ("volumes", "paths under a volumeMount (and terminationMessagePath) -> emulated directories"),
    # Router pods (router.py): admitted without a GPU request.
    ("router", "`vllm-router` -> the router virtualenv's; `--host`/`--prometheus-host` -> pod IP"),
    ("router-identity", "in-cluster config -> KUBECONFIG with a pod-bound ServiceAccount token"),
    # vLLM server pods (pods.py MODEL_NICE): no flag or env changes, CPU scheduling only.
    ("priority", "a vLLM server's engine core and workers at nice 10, its API server at 0"),
    ("amx-permission", "env PYTHONPATH gains a sitecustomize that requests AMX tile state"),
    # Containers of images built here (oci.py: the operator's), run by crun, not as processes.
    ("container", "a built image's container runs in crun: host network, no cgroups"),
    ("api-server", "env KUBERNETES_SERVICE_HOST/PORT -> the API server's 127.0.0.1 and port"),
    ("bind-pod-ip", "`0.0.0.0` in a built image's container args -> the pod IP"),
    # vLLM server pods that ask for it (issue 32): the engine stand-in runs in vLLM's place.
    ("stand-in", f"annotation `{STAND_IN_ANNOTATION}: stand-in` -> `-m {STAND_IN_MODULE}`"),
    # vLLM told a path at run time (a LoRA adapter the pod's fetcher copied into an emptyDir).
    ("runtime-paths", "a LoRA path vLLM is sent under a volumeMount -> the emulated directory"),
    # The router hop beside vllm-router in a router pod (routerhop.py).
    ("router-hop", "the router hop: `--host`/`--upstream-host` -> pod IP; its token and CA folder"),
)

_VALUE_FLAGS = {
    "--host",
    "--tensor-parallel-size",
    "--gpu-memory-utilization",
    "--quantization",
    "--dtype",
    "--model",
    "--max-model-len",
    "--max-num-batched-tokens",
}
_SHORT = {"-tp": "--tensor-parallel-size", "-q": "--quantization"}


@dataclass(frozen=True)
class Context:
    python: Path  # the vLLM virtualenv's python
    pod_ip: str
    models: Mapping[str, str] = field(default_factory=dict)  # model name -> local directory
    # On real GPUs (realgpus.py, dev/gpulab) vLLM runs the pod's flags as they are: only the bind
    # address and the model table apply, none of the CPU adaptations.
    real_gpus: bool = False


def load_model_table(*files: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Model names -> local directories: JSON objects in `files` (later win), then `extra`."""
    table: dict[str, str] = {}
    for f in files:
        if f.is_file():
            data = json.loads(f.read_text())
            table.update({str(k): str(v) for k, v in data.items()})
    table.update(extra or {})
    return table


def is_vllm(command: Sequence[str]) -> bool:
    return (
        VLLM_MODULE in command
        or BATCH_RUNNER_MODULE in command
        or (len(command) > 1 and Path(command[0]).name == VLLM_COMMAND)
    )


def _serve_at(argv: Sequence[str]) -> int | None:
    """Where `serve` is in `vllm serve ...` (or `python -m <vLLM's CLI> serve ...`), whose next
    argument is the model; None for any other command."""
    if len(argv) > 1 and Path(argv[0]).name == VLLM_COMMAND and argv[1] == SERVE:
        return 1
    for i in range(2, len(argv) - 1):
        if argv[i - 1] == "-m" and argv[i] in VLLM_CLI_MODULES and argv[i + 1] == SERVE:
            return i + 1
    return None


def is_vllm_server(argv: Sequence[str]) -> bool:
    """A vLLM that serves the OpenAI API (not a multi-node replica's headless workers)."""
    return VLLM_MODULE in argv or (_serve_at(argv) is not None and "--headless" not in argv)


def adapt_command(command: Sequence[str], args: Sequence[str], ctx: Context) -> list[str]:
    """The argv to execute for a container with `command` and `args`."""
    cmd = list(command)
    if cmd and cmd[0] in PYTHON_NAMES:
        cmd[0] = str(ctx.python)
    elif cmd and cmd[0] == VLLM_COMMAND:
        module = GPU_VLLM_MODULE if ctx.real_gpus else LAB_VLLM_MODULE
        cmd[:1] = [str(ctx.python), "-m", module]
    if not is_vllm([*command, *args]):
        return [*cmd, *args]
    argv = [*cmd, *args]
    serve = _serve_at(argv)
    if serve is None:
        return [*cmd, *_adapt_vllm_args(args, ctx)]
    head, rest = argv[: serve + 1], argv[serve + 1 :]
    if rest and not rest[0].startswith("-"):
        head.append(ctx.models.get(rest[0], rest[0]))
        rest = rest[1:]
    return [*head, *_adapt_vllm_args(rest, ctx)]


def bind_pod_ip(args: Sequence[str], pod_ip: str) -> list[str]:
    """Every `0.0.0.0` in `args` (a bind to all addresses, e.g. the operator's
    `--liveness=http://0.0.0.0:8080/healthz`, `--metrics-host=0.0.0.0`) -> the pod IP: pods share
    the host's network here, and two binding every address would take each other's port."""
    return [a.replace("0.0.0.0", pod_ip) for a in args]


def adapt_env(env: Mapping[str, str], real_gpus: bool = False) -> dict[str, str]:
    out = dict(env)
    if not real_gpus:
        out.setdefault("VLLM_CPU_KVCACHE_SPACE", DEFAULT_KVCACHE_GIB)
    pod_paths = filter(None, out.get("PYTHONPATH", "").split(":"))
    paths = [str(LLMFLEET_SRC), *([] if real_gpus else [str(AMX_SITE)]), *pod_paths]
    out["PYTHONPATH"] = ":".join(paths)
    return out


def _split(args: Sequence[str]) -> list[tuple[str | None, str | None, str]]:
    """(normalised flag, value, original token) per flag; values of known flags are attached."""
    out: list[tuple[str | None, str | None, str]] = []
    i = 0
    while i < len(args):
        tok = args[i]
        name, eq, inline = tok.partition("=")
        flag = _SHORT.get(name, "--" + name[2:].replace("_", "-") if name.startswith("--") else "")
        if flag in _VALUE_FLAGS:
            if eq:
                out.append((flag, inline, tok))
            elif i + 1 < len(args):
                out.append((flag, args[i + 1], tok))
                i += 1
            else:
                out.append((flag, None, tok))
        else:
            out.append((None, None, tok))
        i += 1
    return out


def _model_max_len(model_dir: str) -> int | None:
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    value = config.get("max_position_embeddings")
    return int(value) if value else None


def _adapt_vllm_args(args: Sequence[str], ctx: Context) -> list[str]:
    if ctx.real_gpus:
        return _real_gpu_args(args, ctx)
    out: list[str] = []
    model_limit: int | None = None
    for flag, value, _ in _split(args):
        if flag == "--model" and value is not None:
            model_limit = _model_max_len(ctx.models.get(value, value))
    for flag, value, tok in _split(args):
        if flag is None:
            out.append(tok)
        elif flag in ("--host", "--gpu-memory-utilization") or (
            flag == "--quantization" and (value or "").lower() in GPU_ONLY_QUANTIZATION
        ):
            continue
        elif flag == "--tensor-parallel-size":
            out += [flag, "1"]
        elif flag == "--model" and value is not None:
            out += [flag, ctx.models.get(value, value)]
        elif flag == "--max-model-len" and value is not None and value.isdigit():
            limit = model_limit or TINY_MODEL_MAX_LEN
            out += [flag, str(min(int(value), limit))]
        elif value is None:
            out.append(tok)
        else:
            out += [flag, value]
    out += ["--host", ctx.pod_ip]
    if "--enforce-eager" not in out:
        out.append("--enforce-eager")
    return out


def _real_gpu_args(args: Sequence[str], ctx: Context) -> list[str]:
    out: list[str] = []
    for flag, value, tok in _split(args):
        if flag == "--host":
            continue
        if flag == "--model" and value is not None:
            out += [flag, ctx.models.get(value, value)]
        elif flag is None or value is None:
            out.append(tok)
        else:
            out += [flag, value]
    return [*out, "--host", ctx.pod_ip]


def stand_in(
    argv: Sequence[str], env: Mapping[str, str], annotations: Mapping[str, str]
) -> tuple[list[str], dict[str, str]] | None:
    """The argv and environment that run the engine stand-in in place of vLLM's OpenAI server
    (`<python> -m vllm_cli serve` -> `<python> -m localcluster.standin`, or
    `-m vllm.entrypoints.openai.api_server` -> `-m localcluster.standin`, the model and every
    flag kept), for a pod annotated `lab.llmfleet.test/engine: stand-in`; None for any other pod
    or command (the batch runner, a multi-node worker's `vllm serve --headless`)."""
    if annotations.get(STAND_IN_ANNOTATION) != STAND_IN or not is_vllm_server(argv):
        return None
    serve = _serve_at(argv)
    if serve is not None:
        python = argv[0] if serve > 1 else str(Path(argv[0]).parent / "python")
        program, rest = [python, "-m", STAND_IN_MODULE], list(argv[serve + 1 :])
    else:
        module = [i for i in range(1, len(argv)) if argv[i] == VLLM_MODULE and argv[i - 1] == "-m"]
        if not module:
            return None
        program, rest = [*argv[: module[0]], STAND_IN_MODULE], list(argv[module[0] + 1 :])
    out = dict(env)
    out["PYTHONPATH"] = ":".join(filter(None, (str(LAB_PYTHONPATH), env.get("PYTHONPATH"))))
    for key, var in STAND_IN_SETTINGS.items():
        if key in annotations:
            out[var] = annotations[key]
    return [*program, *rest], out
