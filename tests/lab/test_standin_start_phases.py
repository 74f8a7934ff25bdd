"""The engine stand-in's start phase by phase (LLMFLEET_STANDIN_START_PHASES,
dev/localcluster/standin/startphases.py): its port stays closed through the listed phases, its
log names each as it ends, and a malformed list stops it at start naming the variable."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from localcluster.standin import startphases
from standin_model import tiny_model

REPO = Path(__file__).resolve().parents[2]
STAND_IN = (sys.executable, "-m", "localcluster.standin")

PARSED = {
    "one phase": ("imports=38", (("imports", 38.0),)),
    "the planner's warm start": (
        "imports=38,weight_load=64.1,compile=8.3",
        (("imports", 38.0), ("weight_load", 64.1), ("compile", 8.3)),
    ),
    "spaces around items": (" a=1 , b-2=0 ", (("a", 1.0), ("b-2", 0.0))),
}


@pytest.mark.parametrize(("text", "expected"), PARSED.values(), ids=PARSED.keys())
def test_a_phase_list_reads_as_names_and_seconds_in_order(
    text: str, expected: startphases.Phases
) -> None:
    assert startphases.parse(text) == expected


@pytest.mark.parametrize(
    "text",
    ["imports", "imports=", "imports=soon", "imports=-1", "=3", "Imports=3", "a=1,,b=2", "a=nan"],
)
def test_a_malformed_phase_list_is_refused_naming_the_variable_and_the_form(text: str) -> None:
    with pytest.raises(ValueError, match=r"LLMFLEET_STANDIN_START_PHASES=.*name=seconds"):
        startphases.parse(text)


def test_without_a_phase_list_the_start_is_the_warm_up_alone() -> None:
    assert startphases.phases("", 2.5) == (("warm-up", 2.5),)


REMAINING = {
    "imports shorter than the first phase": (0.4, ((("a", 0.6), ("b", 2.0)))),
    "imports longer than the first phase": (1.5, ((("a", 0.0), ("b", 1.5)))),
    "imports longer than every phase": (9.0, ((("a", 0.0), ("b", 0.0)))),
}


@pytest.mark.parametrize(("elapsed", "expected"), REMAINING.values(), ids=REMAINING.keys())
def test_time_already_spent_is_taken_from_the_first_phases(
    elapsed: float, expected: startphases.Phases
) -> None:
    assert startphases.remaining((("a", 1.0), ("b", 2.0)), elapsed) == expected


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _health(url: str) -> int:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
            return int(r.status)
    except OSError:
        return 0


def _stand_in(tmp_path: Path, phases: str) -> tuple[subprocess.Popen[str], str]:
    model = tiny_model(tmp_path)
    port = _free_port()
    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "PYTHONPATH": str(REPO / "dev"),
        startphases.PHASES_ENV: phases,
    }
    proc = subprocess.Popen(
        [*STAND_IN, "--model", model, "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return proc, f"http://127.0.0.1:{port}"


def test_the_port_opens_after_every_phase_and_the_log_names_each(tmp_path: Path) -> None:
    proc, url = _stand_in(tmp_path, "imports=1.5,compile=1.5")
    started = time.monotonic()
    try:
        while _health(url) != 200:
            assert proc.poll() is None, "the stand-in exited"
            assert time.monotonic() - started < 30, "the stand-in did not start"
            time.sleep(0.05)
        opened = time.monotonic() - started
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert opened >= 3.0
    assert "start phase imports over" in out
    assert out.index("start phase imports over") < out.index("start phase compile over")


def test_a_malformed_phase_list_ends_the_start_with_exit_code_1(tmp_path: Path) -> None:
    proc, _ = _stand_in(tmp_path, "compile=later")
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 1
    assert "LLMFLEET_STANDIN_START_PHASES='compile=later'" in out
