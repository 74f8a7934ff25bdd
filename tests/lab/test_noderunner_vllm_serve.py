"""The node runner runs the operator's `vllm serve MODEL ...` with the lab's CPU vLLM: the command
through the virtualenv's python and `vllm_cli` (adaptation 1), the positional model mapped to its
local directory (adaptation 7), the engine flags rewritten as for any vLLM; the previous
release's `python3 -m vllm.entrypoints.openai.api_server --model ...` still runs (the upgrade
test starts it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from localcluster.noderunner import adaptations

PY = "/venv/bin/python"
CTX = adaptations.Context(python=Path(PY), pod_ip="127.17.0.9", models={"org/tiny": "/m/tiny"})
LAB_VLLM = [PY, "-m", adaptations.LAB_VLLM_MODULE]


@pytest.mark.parametrize(
    ("command", "args", "runs"),
    [
        pytest.param(
            ["vllm", "serve"],
            ["org/tiny", "--tensor-parallel-size", "2", "--host", "0.0.0.0", "--port", "8000"],
            [*LAB_VLLM, "serve", "/m/tiny", "--tensor-parallel-size", "1", "--port", "8000",
             "--host", "127.17.0.9", "--enforce-eager"],
            id="serve-model-mapped-flags-adapted",
        ),
        pytest.param(
            ["vllm", "serve"],
            ["other/model", "--max-num-seqs", "4"],
            [*LAB_VLLM, "serve", "other/model", "--max-num-seqs", "4", "--host", "127.17.0.9",
             "--enforce-eager"],
            id="model-not-in-the-table-kept",
        ),
        pytest.param(
            ["vllm"],
            ["serve", "org/tiny", "--headless"],
            [*LAB_VLLM, "serve", "/m/tiny", "--headless", "--host", "127.17.0.9",
             "--enforce-eager"],
            id="serve-in-args-multi-node-worker",
        ),
        pytest.param(
            ["python3", "-m", adaptations.VLLM_MODULE],
            ["--model", "org/tiny", "--gpu-memory-utilization", "0.9"],
            [PY, "-m", adaptations.VLLM_MODULE, "--model", "/m/tiny", "--host", "127.17.0.9",
             "--enforce-eager"],
            id="previous-release-openai-server-module",
        ),
    ],
)  # fmt: skip
def test_the_operators_vllm_command_runs_on_the_lab_vllm(
    command: list[str], args: list[str], runs: list[str]
) -> None:
    assert adaptations.adapt_command(command, args, CTX) == runs


@pytest.mark.parametrize(
    ("argv", "serves"),
    [
        pytest.param([*LAB_VLLM, "serve", "m"], True, id="vllm-serve"),
        pytest.param([*LAB_VLLM, "serve", "m", "--headless"], False, id="headless-worker"),
        pytest.param([PY, "-m", adaptations.VLLM_MODULE, "--model", "m"], True, id="old-module"),
        pytest.param([PY, "-m", adaptations.BATCH_RUNNER_MODULE], False, id="batch-runner"),
    ],
)
def test_only_an_openai_server_gets_the_api_servers_priority(argv: list[str], serves: bool) -> None:
    assert adaptations.is_vllm_server(argv) is serves
