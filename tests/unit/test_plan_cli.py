"""`llmfleet plan`: offline planning of manifests, and errors that name the field."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
import yaml

from llmfleet.cli import main

DATA = Path(__file__).parent / "data"
LLAMA_70B = DATA / "llama-70b.yaml"

SMALL = """
apiVersion: llmfleet.dev/v1alpha1
kind: LLMDeployment
metadata: {name: small}
spec:
  model: {name: meta-llama/Llama-3.1-8B-Instruct}
  gpus: {count: 2, memoryGiB: 80}
"""
CONFIGMAP = """
apiVersion: v1
kind: ConfigMap
metadata: {name: unrelated}
data: {a: b}
"""


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "manifest.yaml"
    path.write_text(text)
    return str(path)


def test_json_output_of_70b_on_8_h100(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "-f", str(LLAMA_70B), "-o", "json"]) == 0

    result = json.loads(capsys.readouterr().out)
    assert (result["strategy"], result["replicas"], result["tensorParallelSize"]) == (
        "MultiPod",
        2,
        4,
    )
    assert result["weightsGiBPerGPU"] == pytest.approx(32.88, abs=0.01)
    # The model is not among the flags: `vllm serve` takes it first.
    assert result["vllmArgs"][:2] == ["--served-model-name", "llama-70b"]


def test_yaml_output_has_one_document_per_deployment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = write(tmp_path, LLAMA_70B.read_text() + "---" + CONFIGMAP + "---" + SMALL)

    assert main(["plan", "-f", manifest, "-o", "yaml"]) == 0

    plans = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [(p["strategy"], p["replicas"]) for p in plans] == [("MultiPod", 2), ("MultiPod", 2)]


def test_table_is_the_default_and_shows_reason_and_args(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["plan", "-f", str(LLAMA_70B)]) == 0

    out = capsys.readouterr().out
    assert out.startswith("LLMDeployment llama-70b\n")
    assert re.search(r"^  Strategy:\s+MultiPod$", out, re.MULTILINE)
    assert re.search(
        r"^  Reason:\n    Architecture from the built-in catalog\. Weights: 16-bit, from "
        r"spec\.model\.quantization none\.\s+meta-llama/Llama-3\.1-70B-Instruct has",
        out,
        re.MULTILINE,
    )
    # The product has performance constants, so the layout is chosen by predicted speed.
    reason = " ".join(out.split())
    assert "Objective Throughput takes the most predicted output tokens/s per GPU" in reason
    assert "2 pods of TP=4" in reason
    # 512 sequences per pod (478,928 KV tokens // 768, capped at 512): ceil(512 / 4) = 128.
    assert re.search(r"^  HPA target:\s+128 requests waiting per pod$", out, re.MULTILINE)
    assert re.search(r"^  Workload:\s+512 prompt \+ 256 output tokens$", out, re.MULTILINE)
    assert re.search(
        r"^  Predicted:\s+[\d,]+ output tok/s per replica \([\d,]+ per GPU\) at 512 sequences; "
        r"TTFT [\d,]+ ms; ITL [\d.]+ ms alone, [\d.]+ ms at 512$",
        out,
        re.MULTILINE,
    )
    # Every layout of the 8 GPUs, the chosen one starred, the others with why they lost.
    assert re.search(r"^  Candidates:$", out, re.MULTILINE)
    assert re.search(r"^    \*  2 x TP=4\s+8\s+478,928\s+512\s", out, re.MULTILINE)
    assert re.search(r"^    1 x TP=8: [\d,]+ out tok/s per GPU", out, re.MULTILINE)
    # TP=2 leaves 19,712 tokens of KV cache per pod: two 8,192-token requests at a time.
    assert re.search(
        r"^    4 x TP=2: its KV cache holds 2 full-length \(maxModelLen\) sequences, fewer",
        out,
        re.MULTILINE,
    )
    assert "  vLLM command:\n    vllm serve meta-llama/Llama-3.1-70B-Instruct\n" in out
    assert "    --tensor-parallel-size 4\n" in out


def test_reads_standard_input(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(SMALL))

    assert main(["plan", "-f", "-", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["replicas"] == 2


@pytest.mark.parametrize(
    ("spec_yaml", "expected"),
    [
        pytest.param(
            "model: {name: x}\n  gpus: {count: 12, memoryGiB: 80, perNode: 8}",
            "LLMDeployment bad: spec.gpus.count: count must be at most perNode",
            id="cross-field-rule",
        ),
        pytest.param(
            "model: {name: meta-llama/Llama-3.1-8B}\n  gpus: {count: 0, memoryGiB: 80}",
            "LLMDeployment bad: spec.gpus.count: Input should be greater than or equal to 1",
            id="bound",
        ),
        pytest.param(
            "model: {name: meta-llama/Llama-3.1-405B}\n  gpus: {count: 8, memoryGiB: 80}",
            "LLMDeployment bad: spec.gpus: meta-llama/Llama-3.1-405B (756.0 GiB",
            id="plan-error-with-numbers",
        ),
        pytest.param(
            "model: {name: /models/unknown}",
            "LLMDeployment bad: spec.model.architecture: /models/unknown is not in the built-in "
            "catalog and is a path in the container, whose config.json the operator cannot read",
            id="unknown-model-at-a-path",
        ),
        pytest.param(
            "model: {name: meta-llama/Llama-3.1-8B}\n  engine: {extraArgs: [--max-num-seq=8]}",
            "LLMDeployment bad: spec.engine.extraArgs: --max-num-seq is not a whole flag of vllm "
            "serve 0.32.0; did you mean --max-num-seqs?",
            id="extra-arg-the-engine-does-not-know",
        ),
        pytest.param(
            "modle: {name: x}",
            "LLMDeployment bad: spec.model: Field required",
            id="typo-reports-the-missing-field",
        ),
        pytest.param(
            "modle: {name: x}",
            "LLMDeployment bad: spec.modle: Extra inputs are not permitted",
            id="typo-reports-the-unknown-field",
        ),
    ],
)
def test_invalid_deployment_exits_2_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spec_yaml: str, expected: str
) -> None:
    manifest = write(
        tmp_path, f"kind: LLMDeployment\nmetadata: {{name: bad}}\nspec:\n  {spec_yaml}\n"
    )

    assert main(["plan", "-f", manifest]) == 2

    captured = capsys.readouterr()
    assert expected in captured.err
    assert "Traceback" not in captured.err
    assert captured.out == ""


def test_valid_deployments_are_still_shown_beside_an_invalid_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = "kind: LLMDeployment\nmetadata: {name: broken}\nspec: {model: {name: org/x}}\n"
    manifest = write(tmp_path, SMALL + "---\n" + broken)

    assert main(["plan", "-f", manifest, "-o", "json"]) == 2

    captured = capsys.readouterr()
    assert json.loads(captured.out)["replicas"] == 2
    assert captured.err.startswith("LLMDeployment broken: spec.model.architecture:")


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        pytest.param(CONFIGMAP, "no LLMDeployment documents", id="no-deployments"),
        pytest.param("kind: [unclosed", "is not valid YAML", id="broken-yaml"),
        pytest.param(
            "kind: LLMDeployment\nmetadata: {name: nospec}\n",
            "LLMDeployment nospec: spec: an object with at least spec.model.name is required",
            id="missing-spec",
        ),
    ],
)
def test_unusable_input_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, expected: str
) -> None:
    assert main(["plan", "-f", write(tmp_path, content)]) == 2
    assert expected in capsys.readouterr().err


def test_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "-f", str(tmp_path / "absent.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_table_shows_the_lora_reserve_only_with_lora(capsys: pytest.CaptureFixture[str]) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "llama-3.1-8b-lora.yaml"
    assert main(["plan", "-f", str(example)]) == 0
    with_lora = capsys.readouterr().out
    assert main(["plan", "-f", str(LLAMA_70B)]) == 0
    without = capsys.readouterr().out

    assert re.search(
        r"LoRA: +up to 4 adapters of rank <= 16 at once: 0\.35 GiB of buffers per GPU; "
        r"CPU cache of 8: 0\.63 GiB per pod",
        with_lora,
    )
    assert "--enable-lora" in with_lora
    assert "LoRA" not in without
