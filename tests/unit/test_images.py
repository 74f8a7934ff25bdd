"""What can be checked of the images without a Docker engine."""

from __future__ import annotations

import re
import subprocess
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

import yaml

from llmfleet.models.defaults import DEFAULT_ENGINE_IMAGE

REPO = Path(__file__).resolve().parents[2]
OPERATOR_DOCKERFILE = (REPO / "images" / "operator" / "Dockerfile").read_text()
VLLM_DOCKERFILE = (REPO / "images" / "vllm" / "Dockerfile").read_text()
PYPROJECT = tomllib.loads((REPO / "operator" / "pyproject.toml").read_text())
LLMFLEET = REPO / ".venv" / "bin" / "llmfleet"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(lines: list[str]) -> dict[str, str]:
    found = (re.fullmatch(r"\s*([A-Za-z0-9_.-]+)==([^\s;#]+)\s*", line) for line in lines)
    return {canonical(m[1]): m[2] for m in found if m}


def instructions(dockerfile: str) -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", dockerfile)
    lines = [line.strip() for line in joined.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "")
        for line in lines
        if line and not line.startswith("#")
    ]


def test_entrypoint_is_the_llmfleet_console_script() -> None:
    (script,) = [ep for ep in entry_points(group="console_scripts") if ep.name == "llmfleet"]
    assert script.value == "llmfleet.cli:main"
    assert PYPROJECT["project"]["scripts"]["llmfleet"] == "llmfleet.cli:main"
    steps = instructions(OPERATOR_DOCKERFILE)
    assert ("ENTRYPOINT", '["llmfleet"]') in steps
    assert ("CMD", '["run"]') in steps


def test_llmfleet_run_help_works() -> None:
    result = subprocess.run(
        [str(LLMFLEET), "run", "--help"], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 0, result.stderr
    for flag in ("--namespace", "--liveness", "--metrics-port", "--log-level", "--leader-election"):
        assert flag in result.stdout


def test_operator_image_runs_as_non_root_65532() -> None:
    users = [arg for op, arg in instructions(OPERATOR_DOCKERFILE) if op == "USER"]
    assert users
    assert users[-1].split(":")[0] == "65532"


def test_python_package_pins_agree_with_the_lock() -> None:
    lock = pins((REPO / "operator" / "requirements.lock").read_text().splitlines())
    # Build tools are not in the lock: pip comes from the Makefile, setuptools and wheel from
    # [build-system] of pyproject.toml.
    build = pins(PYPROJECT["build-system"]["requires"])
    makefile_pip = re.search(r"pip install .*\bpip==(\S+)", (REPO / "Makefile").read_text())
    assert makefile_pip
    build["pip"] = makefile_pip[1]
    pinned = pins(re.findall(r"[A-Za-z0-9_.-]+==[^\s\\]+", OPERATOR_DOCKERFILE))
    assert pinned, "the Dockerfile pins no Python package"
    unknown = sorted(set(pinned) - set(lock) - set(build))
    assert unknown == [], "pinned in the Dockerfile but neither locked nor a build tool"
    disagree = {
        name: (version, lock.get(name, build.get(name)))
        for name, version in pinned.items()
        if version != lock.get(name, build.get(name))
    }
    assert disagree == {}
    assert "requirements.lock" in OPERATOR_DOCKERFILE
    assert "--no-deps" in OPERATOR_DOCKERFILE


def test_python_base_image_matches_requires_python() -> None:
    bases = [arg.split()[0] for op, arg in instructions(OPERATOR_DOCKERFILE) if op == "FROM"]
    assert len(bases) == 2, "a build stage and a runtime stage"
    requires = PYPROJECT["project"]["requires-python"]
    low = re.search(r">=\s*3\.(\d+)", requires)
    high = re.search(r"<\s*3\.(\d+)", requires)
    assert low
    assert high
    for base in bases:
        match = re.fullmatch(r"python:3\.(\d+)\.\d+-slim(-\w+)?", base)
        assert match, f"{base}: not a python:3.x.y-slim image pinned to an exact version"
        assert int(low[1]) <= int(match[1]) < int(high[1]), f"{base} vs {requires}"


def test_engine_image_agrees_across_chart_dockerfile_and_operator() -> None:
    values = yaml.safe_load((REPO / "charts" / "llmfleet" / "values.yaml").read_text())
    # The last stage is the image; an earlier one only builds the llmfleet wheel.
    base = [arg for op, arg in instructions(VLLM_DOCKERFILE) if op == "FROM"][-1]
    assert {
        "chart engine.defaultImage": values["engine"]["defaultImage"],
        "images/vllm/Dockerfile FROM": base,
        "DEFAULT_ENGINE_IMAGE": DEFAULT_ENGINE_IMAGE,
    } == dict.fromkeys(
        ("chart engine.defaultImage", "images/vllm/Dockerfile FROM", "DEFAULT_ENGINE_IMAGE"),
        "vllm/vllm-openai:v0.32.0",
    )


def test_vllm_image_adds_only_the_llmfleet_wheel_for_the_batch_runner() -> None:
    steps = instructions(VLLM_DOCKERFILE)
    bases = [arg for op, arg in steps if op == "FROM"]
    assert len(bases) == 2, "a wheel build stage and the runtime stage"
    assert re.fullmatch(r"python:3\.11\.\d+-slim(-\w+)? AS wheel", bases[0])
    runs = " ".join(arg for op, arg in steps if op == "RUN")
    assert "pip wheel --no-build-isolation --no-deps" in runs
    assert "install --no-deps --no-index" in runs
    assert "import llmfleet.batch.runner" in runs
