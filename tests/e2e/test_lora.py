"""LoRA adapters on the real CPU vLLM, through the router: adapters written by the test (no
download) are added to and removed from a running engine by editing spec.adapters, and no engine
pod restarts. A new engine joins only with its adapters loaded (the readiness gate); an adapter
that cannot load is named in status, with vLLM's reason, while the others serve. The engine runs
behind an API key (spec.engine.apiKeySecretRef), which guards vLLM's LoRA API too: the operator
reads it from the Secret (the session's operator has rbac.readSecrets) and sends it on each call,
and a request without it is refused. One adapter comes from a real S3 server (versitygw, with keys
from spec.engine.lora.objectStore's Secret) through the engine pod's adapter fetcher, a container
of the operator's image; a prefix that holds nothing is named in status. See docs/lora.md.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from dashboards.promql import VLLM_LORA_INFO
from kubernetes import client
from localcluster.metricsstack.load import delete_llmd, tiny_llmd, wait_free_gpus
from localcluster.objectstore import ObjectStore, object_store
from localcluster.routerapi import ROUTER_PORT, routed_engines
from localcluster.supervisor import REPO, Cluster
from prometheus_client.parser import text_string_to_metric_families

from llmfleet import API_GROUP as GROUP
from llmfleet import API_VERSION as VERSION
from llmfleet.fetcher.paths import FETCHER_PORT
from llmfleet.render.names import ADAPTERS_GATE, HTTP_PORT

from . import localnode
from .harness import Operator, condition, wait_until

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.lab("the node runner (real vLLM engines as local processes)"),
]

NAME = "lora"
BASE = "tiny"
SERVES_WITHIN = 300.0  # a vLLM pod on 2 shared cores starts in ~35-90 s
CHANGED_WITHIN = 30.0  # an edit of spec.adapters reaches the engine in a reconcile or two
TINY_LORA = REPO / "dev" / "dataplane" / "tiny_lora.py"
ENGINES = f"llmfleet.dev/deployment={NAME},app.kubernetes.io/component=engine"
ROUTERS = f"llmfleet.dev/deployment={NAME},app.kubernetes.io/component=router"
API_KEY = "sk-lora-e2e-4b1d"
API_KEY_SECRET = {"name": "lora-api-key", "key": "key"}
STORE_SECRET = "adapter-store"
BUCKET = "adapters"
# What clients send: the router passes it on to the engine (vllm-router 0.1.17).
AUTHORIZED = {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture(scope="module")
def node_runner(cluster: Cluster, vllm_python: Path) -> Iterator[str]:
    with localnode.local_node(cluster, gpus=1) as node:
        yield node


@pytest.fixture(scope="module")
def store() -> Iterator[ObjectStore]:
    with object_store() as s:
        yield s


def adapter(vllm_python: Path, name: str, *flags: str) -> str:
    """A tiny adapter's directory (tiny_lora.py, made once per machine)."""
    out = subprocess.run(
        [str(vllm_python), str(TINY_LORA), name, *flags], check=True, capture_output=True, text=True
    )
    return out.stdout.strip().splitlines()[-1]


def post(ip: str, port: int, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(
        f"http://{ip}:{port}{path}",
        json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **AUTHORIZED},
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def fetcher_call(url: str, body: dict[str, Any] | None, headers: dict[str, str]) -> int:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data, headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return e.code


def complete(router_ip: str, model: str) -> tuple[int, str]:
    """Greedy, seeded: the same weights give the same text."""
    body = {"model": model, "prompt": "Hello, world", "max_tokens": 8, "temperature": 0, "seed": 1}
    status, answer = post(router_ip, ROUTER_PORT, "/v1/completions", body)
    return status, str(answer["choices"][0]["text"]) if status == 200 else json.dumps(answer)


def listed(ip: str, port: int, headers: dict[str, str] = AUTHORIZED) -> set[str]:
    req = urllib.request.Request(f"http://{ip}:{port}/v1/models", headers=headers)
    with urllib.request.urlopen(req, timeout=10) as r:
        return {str(m["id"]) for m in json.load(r)["data"]}


def lora_info(ip: str) -> list[dict[str, str]]:
    """The label sets of the engine's vllm:lora_requests_info."""
    with urllib.request.urlopen(f"http://{ip}:{HTTP_PORT}/metrics", timeout=10) as r:
        text = r.read().decode()
    return [
        dict(sample.labels)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == VLLM_LORA_INFO
    ]


def llmd(api: client.ApiClient, namespace: str) -> dict[str, Any]:
    return dict(
        client.CustomObjectsApi(api).get_namespaced_custom_object(
            GROUP, VERSION, namespace, "llmdeployments", NAME
        )
    )


def served(api: client.ApiClient, namespace: str) -> dict[str, tuple[int, str | None]]:
    """status.adapters as name -> (engines serving it, error)."""
    return {
        a["name"]: (a["engines"], a.get("error"))
        for a in (llmd(api, namespace).get("status") or {}).get("adapters") or []
    }


def set_adapters(api: client.ApiClient, namespace: str, adapters: list[dict[str, str]]) -> None:
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "llmdeployments", NAME, {"spec": {"adapters": adapters}}
    )


def ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def test_adapters_change_in_running_engines_without_a_restart(
    operator: Operator,
    api: client.ApiClient,
    cluster: Cluster,
    namespace: str,
    node_runner: str,
    vllm_python: Path,
    store: ObjectStore,
) -> None:
    core = client.CoreV1Api(api)
    sql = {"name": "sql", "source": adapter(vllm_python, "sql", "--seed", "1")}
    # From the object store: copied into the engine pod by its fetcher, then loaded.
    chat_dir = Path(adapter(vllm_python, "chat", "--seed", "2"))
    chat = {"name": "chat", "source": store.put_folder(chat_dir, BUCKET, "tiny/chat/v1")}
    ghost = {"name": "ghost", "source": f"s3://{BUCKET}/tiny/ghost"}
    wide = {"name": "wide", "source": adapter(vllm_python, "wide", "--rank", "32", "--seed", "3")}
    hollow = {
        "name": "hollow",
        "source": adapter(vllm_python, "hollow", "--broken", "missing-weights"),
    }
    wait_free_gpus(core, node_runner, 1)
    core.create_namespaced_secret(
        namespace,
        {"metadata": {"name": API_KEY_SECRET["name"]}, "stringData": {"key": API_KEY}},
    )
    keys = {"AWS_ACCESS_KEY_ID": store.access_key, "AWS_SECRET_ACCESS_KEY": store.secret_key}
    core.create_namespaced_secret(
        namespace, {"metadata": {"name": STORE_SECRET}, "stringData": keys}
    )
    body = tiny_llmd(NAME)
    body["spec"]["model"]["servedModelName"] = BASE
    body["spec"]["engine"]["lora"] = {
        "maxAdapters": 2,
        "maxRank": 16,
        "objectStore": {"endpoint": store.endpoint, "secretRef": STORE_SECRET},
    }
    body["spec"]["engine"]["apiKeySecretRef"] = API_KEY_SECRET
    body["spec"]["adapters"] = [sql]
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(body))
    try:
        # --- A new engine joins with the current set: Ready only once `sql` is loaded in it.
        (engine,) = wait_until(
            lambda: (
                [
                    p
                    for p in core.list_namespaced_pod(namespace, label_selector=ENGINES).items
                    if ready(p)
                ]
                or None
            ),
            SERVES_WITHIN,
            0.5,
            "the engine pod Ready",
        )
        assert {BASE, "sql"} <= listed(engine.status.pod_ip, HTTP_PORT)
        # The key guards the engine: only the operator's key-bearing calls loaded `sql`.
        with pytest.raises(urllib.error.HTTPError) as refused:
            listed(engine.status.pod_ip, HTTP_PORT, headers={})
        assert refused.value.code == 401
        gate = [c for c in engine.status.conditions if c.type == ADAPTERS_GATE]
        assert [c.status for c in gate] == ["True"]
        (router,) = wait_until(
            lambda: (
                [
                    p
                    for p in core.list_namespaced_pod(namespace, label_selector=ROUTERS).items
                    if ready(p)
                ]
                or None
            ),
            SERVES_WITHIN,
            1,
            "the router pod Ready",
        )
        rip = router.status.pod_ip
        wait_until(lambda: routed_engines(rip), 60, 1, "the router discovering the engine")
        wait_until(lambda: served(api, namespace) == {"sql": (1, None)}, CHANGED_WITHIN, 1)

        status, base_text = complete(rip, BASE)
        assert status == 200
        assert complete(rip, "sql")[0] == 200
        sql_text = complete(rip, "sql")[1]
        assert sql_text != base_text, "the adapter's weights served"
        # What the dashboard's LoRA panel reads: the engine names the adapter it just ran.
        info = lora_info(engine.status.pod_ip)
        assert {"max_lora", "running_lora_adapters", "waiting_lora_adapters"} <= info[0].keys()
        assert any("sql" in i["running_lora_adapters"].split(",") for i in info)

        # --- A second adapter, added to the running engine.
        set_adapters(api, namespace, [sql, chat])
        wait_until(
            lambda: served(api, namespace) == {"sql": (1, None), "chat": (1, None)},
            CHANGED_WITHIN,
            0.5,
            "chat loaded",
        )
        assert condition(llmd(api, namespace), "AdaptersReady")["status"] == "True"
        assert listed(rip, ROUTER_PORT) >= {BASE, "sql", "chat"}, "the router lists them"
        status, chat_text = complete(rip, "chat")
        assert status == 200
        assert chat_text not in (base_text, sql_text)

        # --- Only the operator makes the fetcher fetch or prune: without its token, or with
        # another, both are refused before anything is read; the probe's /healthz stays open.
        fetcher = f"http://{engine.status.pod_ip}:{FETCHER_PORT}"
        unasked = store.put_folder(chat_dir, BUCKET, "tiny/unasked")
        for path, request in (("/v1/fetch", {"source": unasked}), ("/v1/prune", {"keep": []})):
            for headers in ({}, {"Authorization": "Bearer not-the-operators"}):
                assert fetcher_call(fetcher + path, request, headers) == 401, (path, headers)
        assert fetcher_call(f"{fetcher}/healthz", None, {}) == 200
        assert complete(rip, "chat") == (200, chat_text)  # its copy was not pruned

        # --- One removed: its name answers 404; the other serves as before.
        set_adapters(api, namespace, [chat])
        wait_until(lambda: complete(rip, "sql")[0] == 404, CHANGED_WITHIN, 0.5, "sql gone")
        assert complete(rip, "chat") == (200, chat_text)
        assert served(api, namespace) == {"chat": (1, None)}

        # --- Three that cannot load are named in status with the reason; chat still serves.
        set_adapters(api, namespace, [chat, wide, hollow, ghost])
        cond = wait_until(
            lambda: (
                (c := condition(llmd(api, namespace), "AdaptersReady"))
                and c["reason"] == "AdapterLoadFailed"
                and c
            ),
            CHANGED_WITHIN,
            0.5,
            "AdaptersReady False naming the broken adapters",
        )
        assert cond["status"] == "False"
        assert "wide" in cond["message"]
        assert "hollow" in cond["message"]
        assert "ghost" in cond["message"]
        now = served(api, namespace)
        assert now["chat"] == (1, None)
        assert now["wide"][0] == 0
        assert "rank 32" in str(now["wide"][1])
        assert "spec.engine.lora.maxRank" in str(now["wide"][1])
        assert now["hollow"][0] == 0
        assert "tensors" in str(now["hollow"][1])
        assert now["ghost"][0] == 0
        assert ghost["source"] in str(now["ghost"][1])
        assert complete(rip, "chat") == (200, chat_text)

        # --- No engine restarted through all of it: the same pod, never restarted.
        (after,) = core.list_namespaced_pod(namespace, label_selector=ENGINES).items
        assert after.metadata.uid == engine.metadata.uid
        assert sorted(s.name for s in after.status.container_statuses) == [
            "adapter-fetcher",
            "vllm",
        ]
        assert [s.restart_count for s in after.status.container_statuses] == [0, 0]
    finally:
        t0 = time.monotonic()
        delete_llmd(api, namespace, NAME)
        print(f"deleted in {time.monotonic() - t0:.0f}s")
