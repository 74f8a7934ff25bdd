"""Generated LLMDeployments, valid and malformed, against the real API server with the operator
running: each is refused at admission with a message naming a field, or has status conditions
within STATUS_SECONDS; the operator logs no traceback. Specs name a token Secret, an API-key
Secret and a model-cache claim that exist or do not: status never blames one that exists, and
names the field of a missing claim once the engine pods wait for it. CI runs FUZZ_EXAMPLES (200);
`make fuzz` runs 1,000 (LLMFLEET_FUZZ_EXAMPLES) and prints the tally."""

from __future__ import annotations

import itertools
import os
import re
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client
from localcluster.metricsstack.load import TINY_ARCHITECTURE

from llmfleet import API_GROUP as GROUP
from llmfleet import API_VERSION as VERSION
from llmfleet.models.deployment import KIND, PLURAL
from llmfleet.render.names import DEPLOYMENT_LABEL

from .harness import E2E_GPU_PRODUCT, Operator, bound_claim, wait_until

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.lab("kwok's GPU nodes (the e2e pool) and the operator's log"),
]

FUZZ_EXAMPLES = int(os.environ.get("LLMFLEET_FUZZ_EXAMPLES", "200"))
STATUS_SECONDS = 10.0
# Where the API server's refusal names what is wrong.
NAMES_A_FIELD = re.compile(r"spec(\.[A-Za-z]+|\[)|metadata\.name")

junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.lists(st.integers(0, 9), max_size=2),
    st.dictionaries(st.sampled_from(["x", "count", "name"]), st.integers(0, 9), max_size=2),
)


def maybe(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`valid` 19 times in 20, anything else once: with a dozen fields, about half the specs
    pass the schema and reach the operator."""
    return st.integers(0, 19).flatmap(lambda n: junk if n == 0 else valid)


def optional(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional={k: maybe(v) for k, v in fields.items()})


# Objects the specs reference: these exist in the namespace, ABSENT does not.
PRESENT_SECRET, PRESENT_KEY, PRESENT_CLAIM, ABSENT = "present", "token", "present-cache", "absent"
secret_refs = st.sampled_from(
    [
        {"name": PRESENT_SECRET, "key": PRESENT_KEY},
        {"name": ABSENT, "key": PRESENT_KEY},
        {"name": PRESENT_SECRET, "key": ABSENT},
    ]
)
text = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=24
)
model = st.fixed_dictionaries(
    {
        "name": maybe(
            st.sampled_from(
                [
                    "meta-llama/Llama-3.1-8B-Instruct",
                    "meta-llama/Llama-3.1-70B-Instruct",
                    "Qwen/Qwen2.5-72B-Instruct",
                    "/models/tiny",
                    "acme/unknown",
                ]
            )
        )
    },
    optional={
        "servedModelName": maybe(text),
        "dtype": maybe(st.sampled_from(["auto", "bfloat16", "float16", "float32"])),
        "quantization": maybe(st.sampled_from(["none", "fp8", "int8", "awq", "gptq"])),
        "architecture": maybe(st.just(dict(TINY_ARCHITECTURE))),
        "tokenSecretRef": maybe(secret_refs),
        "cache": maybe(st.sampled_from([{"claimName": PRESENT_CLAIM}, {"claimName": ABSENT}])),
    },
)
gpus = optional(
    count=st.integers(0, 40),
    memoryGiB=st.sampled_from([16, 24, 40, 80, 141]),
    perNode=st.sampled_from([1, 2, 4, 8]),
    product=st.sampled_from([E2E_GPU_PRODUCT, "NVIDIA-A100-SXM4-80GB", "NoSuchGPU"]) | text,
)
spec = st.fixed_dictionaries(
    {"model": maybe(model)},
    optional={
        "gpus": maybe(gpus),
        "strategy": maybe(st.sampled_from(["Auto", "SinglePod", "MultiPod"])),
        "objective": maybe(st.sampled_from(["Throughput", "Latency"])),
        "workload": maybe(
            optional(promptTokens=st.integers(1, 10**5), outputTokens=st.integers(1, 10**5))
        ),
        "slo": maybe(optional(ttftMillis=st.integers(1, 10**4), itlMillis=st.integers(1, 500))),
        "engine": maybe(
            optional(
                maxModelLen=st.integers(1, 200_000),
                maxNumSeqs=st.integers(0, 2048),
                gpuMemoryUtilization=st.floats(0, 1.2),
                extraArgs=st.lists(
                    st.sampled_from(["--enable-prefix-caching", "--port", "9", "--max-num-seqs"])
                    | text,
                    max_size=3,
                ),
                apiKeySecretRef=secret_refs,
            )
        ),
        "autoscaling": maybe(
            optional(
                enabled=st.booleans(),
                minReplicas=st.integers(0, 12),
                maxReplicas=st.integers(0, 12),
                targetQueueDepth=st.integers(0, 100),
            )
        ),
        "router": maybe(optional(enabled=st.booleans())),
    },
)


def admit(
    custom: client.CustomObjectsApi, namespace: str, manifest: dict[str, Any]
) -> tuple[int, str] | None:
    """Create `manifest`; the API server's status and message if it refused."""
    try:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, manifest)
    except client.ApiException as e:
        return int(e.status or 0), str(e.body)
    return None


@pytest.fixture
def referenced(api: client.ApiClient, namespace: str) -> Iterator[None]:
    """The Secret and the bound claim that specs may name."""
    core = client.CoreV1Api(api)
    core.create_namespaced_secret(
        namespace, {"metadata": {"name": PRESENT_SECRET}, "stringData": {PRESENT_KEY: "x"}}
    )
    pv = bound_claim(core, namespace, PRESENT_CLAIM, f"/nonexistent/{namespace}")
    yield
    core.delete_persistent_volume(pv)


def blamed(conditions: list[dict[str, Any]]) -> str:
    return " ".join(str(c.get("message", "")) for c in conditions if c["type"] != "Planned")


def names_missing_claim(
    custom: client.CustomObjectsApi, core: client.CoreV1Api, namespace: str, name: str
) -> bool:
    """Whether status names the missing claim, or no engine pod waits for it yet."""
    pods = core.list_namespaced_pod(namespace, label_selector=f"{DEPLOYMENT_LABEL}={name}").items
    if not pods:
        return True  # scaled to zero, or not created yet: nothing to say
    obj = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    said = blamed((obj.get("status") or {}).get("conditions") or [])
    return f'spec.model.cache.claimName: persistentvolumeclaim "{ABSENT}" not found' in said


def test_every_generated_spec_is_refused_naming_a_field_or_gets_status(
    api: client.ApiClient, namespace: str, operator: Operator, referenced: None
) -> None:
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    names = (f"fuzz-{i}" for i in itertools.count())
    tally: Counter[str] = Counter()
    log_start = operator.log_path.stat().st_size if operator.log_path.exists() else 0

    @settings(
        max_examples=FUZZ_EXAMPLES,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    @given(spec)
    def one(body: dict[str, Any]) -> None:
        name = next(names)
        manifest = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KIND,
            "metadata": {"name": name},
            "spec": body,
        }
        refusal = admit(custom, namespace, manifest)
        if refusal is not None:
            status, message = refusal
            assert status in (400, 422), (status, message)
            assert NAMES_A_FIELD.search(message), message
            tally["refused at admission"] += 1
            return
        deadline = time.monotonic() + STATUS_SECONDS
        while True:
            obj = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
            conditions = (obj.get("status") or {}).get("conditions") or []
            if conditions:
                planned = next((c for c in conditions if c["type"] == "Planned"), {})
                # Planned says the operator took the spec; an ApplyRefused alone would mean
                # the API server refused what the operator rendered from an admitted spec.
                assert planned, (body, conditions)
                tally[f"status, Planned={planned['status']}"] += 1
                # An object that exists is never said to be missing.
                assert f'"{PRESENT_SECRET}" not found' not in blamed(conditions), conditions
                assert f'"{PRESENT_CLAIM}" not found' not in blamed(conditions), conditions
                cache = ((body.get("model") or {}).get("cache")) or {}
                if planned["status"] == "True" and cache.get("claimName") == ABSENT:
                    wait_until(
                        lambda: names_missing_claim(custom, core, namespace, name),
                        STATUS_SECONDS,
                        0.2,
                        f"{name}: status naming the missing claim",
                    )
                    tally["named the missing claim"] += 1
                return
            assert time.monotonic() < deadline, f"{name}: no status within {STATUS_SECONDS}s"
            time.sleep(0.1)

    one()
    log = operator.log_path.read_bytes()[log_start:].decode(errors="replace")
    print(f"{FUZZ_EXAMPLES} generated LLMDeployments: {dict(sorted(tally.items()))}")
    assert "Traceback" not in log, log[log.find("Traceback") - 500 :][:3000]
    assert sum(tally.values()) >= FUZZ_EXAMPLES * 0.9  # hypothesis may stop a little short
