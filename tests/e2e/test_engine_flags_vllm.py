"""The engine commands LLMFleet renders, through the pinned vLLM's own `vllm serve` parser: every
example LLMDeployment's and 300 seeded random specs' (tests/enginecommands.py, the same ones the
unit tier checks against the flag table), parsed in one process of the lab's CPU vLLM 0.32
(dev/dataplane/engine_flags.py parse; `make test` installs it). And the flag table the planner
refuses extraArgs with is what `make engine-flags` generates from that vLLM now, so neither can
drift from the engine.

Here rather than in the unit tier: the unit tier's virtualenv has no vLLM (a few GB), and
`make check` does not install it."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from enginecommands import REPO, example_commands, fuzzed_commands

from llmfleet.planner import PlanError
from llmfleet.planner.engine_flags import TABLE_FILE, check_engine_args, pinned_flags

ENGINE_FLAGS = REPO / "dev" / "dataplane" / "engine_flags.py"
TABLE = REPO / "operator" / "src" / "llmfleet" / "planner" / TABLE_FILE
# What the kubelet puts for $(VAR) in a multi-node replica's args before vLLM sees them.
POD_ENV = {"LWS_WORKER_INDEX": "1", "LWS_LEADER_ADDRESS": "fleet-0.fleet.team-a"}
MODEL = "meta-llama/Llama-3.1-8B-Instruct"

# (arguments after `vllm serve`, what vLLM's parser says (None: it parses), whether LLMFleet
# refuses them as extraArgs): LLMFleet refuses all vLLM refuses, and abbreviations besides.
CASES = {
    "misspelt": (["--max-nm-seqs", "8"], "unrecognized arguments: --max-nm-seqs", True),
    "removed": (["--disable-log-requests"], "unrecognized arguments: --disable-log-requests", True),
    "outside choices": (["--dtype", "fp16"], "argument --dtype: invalid choice: 'fp16'", True),
    "switch given a value": (["--enforce-eager=1"], "ignored explicit argument '1'", True),
    "abbreviation": (["--max-num-seq=8"], None, True),
    "tuning flag": (["--max_num_seqs=8", "--enable-prefix-caching", "-O3"], None, False),
}


def run_vllm(python: Path, what: str, stdin: str = "") -> str:
    done = subprocess.run(
        [str(python), str(ENGINE_FLAGS), what],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def as_the_pod_runs_it(argv: list[str]) -> list[str]:
    def value(match: re.Match[str]) -> str:
        return POD_ENV[match.group(1)]

    return [re.sub(r"\$\((\w+)\)", value, a) for a in argv]


@pytest.fixture(scope="module")
def verdicts(vllm_python: Path) -> dict[str, str | None]:
    """What vLLM's parser says of each command (None: parsed), all in one vLLM process."""
    commands = {**example_commands(), **fuzzed_commands()}
    commands |= {f"case {name}": [MODEL, *argv] for name, (argv, _, _) in CASES.items()}
    argvs = [as_the_pod_runs_it(argv) for argv in commands.values()]
    said = json.loads(run_vllm(vllm_python, "parse", json.dumps(argvs)))
    return dict(zip(commands, said, strict=True))


def test_every_rendered_engine_command_parses_with_vllms_own_parser(
    verdicts: dict[str, str | None],
) -> None:
    rendered = {where: said for where, said in verdicts.items() if not where.startswith("case ")}
    assert len(rendered) >= 300 + 8
    assert {where: said for where, said in rendered.items() if said is not None} == {}


@pytest.mark.parametrize("case", sorted(CASES))
def test_vllm_refuses_a_misspelt_or_removed_flag_and_llmfleet_refuses_it_first(
    case: str, verdicts: dict[str, str | None]
) -> None:
    argv, vllm_says, refused = CASES[case]
    said = verdicts[f"case {case}"]
    if vllm_says is None:
        assert said is None
    else:
        assert said is not None
        assert vllm_says in said
    try:
        check_engine_args(argv, pinned_flags())
    except PlanError:
        assert refused, f"LLMFleet refuses {argv}, which vLLM takes"
    else:
        assert not refused, f"LLMFleet lets {argv} through to a crash-looping engine"


def test_the_committed_flag_table_is_what_make_engine_flags_generates(vllm_python: Path) -> None:
    generated = json.loads(run_vllm(vllm_python, "table"))
    assert json.loads(TABLE.read_text()) == generated, (
        f"{TABLE.relative_to(REPO)} differs from the pinned vLLM's parser: run make engine-flags"
    )
