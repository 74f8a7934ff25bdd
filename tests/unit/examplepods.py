"""The examples' LLMDeployments and the engine pod templates rendered from them, as the upgrade
and priority tests compare them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]


def llmdeployment_examples() -> dict[str, dict[str, Any]]:
    found = {}
    for path in sorted((REPO / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "LLMDeployment":
                found[path.name] = doc
    return found


EXAMPLES = llmdeployment_examples()


def engine_pod_templates(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every engine pod template, keyed by the object holding it and its path there."""
    templates = {}
    for obj in objects:
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["kind"] == "LeaderWorkerSet":
            group = obj["spec"]["leaderWorkerTemplate"]
            templates[f"{where} .spec.leaderWorkerTemplate.leaderTemplate"] = group[
                "leaderTemplate"
            ]
            templates[f"{where} .spec.leaderWorkerTemplate.workerTemplate"] = group[
                "workerTemplate"
            ]
        elif (
            obj["kind"] == "Deployment"
            and obj["metadata"]["labels"].get("app.kubernetes.io/component") == "engine"
        ):
            templates[f"{where} .spec.template"] = obj["spec"]["template"]
    return templates
