"""LoRA adapters on the real CPU vLLM, through the router: adapters written by the test (no
download) are added to and removed from a running engine by editing spec.adapters, and no engine
pod restarts. A new engine joins only with its adapters loaded (the readiness gate); an adapter
that cannot load is named in status, with vLLM's reason, while the others serve. The engine runs
behind an API key (spec.engine.apiKeySecretRef), which guards vLLM's LoRA API too: the operator
reads it from the Secret (the session's operator has rbac.readSecrets) and sends it on each call,
and a request without it is refused. One adapter comes from a real S3 server (versitygw, with keys
from spec.engine.lora.objectStore's Secret) through the engine pod's adapter fetcher, a container
of the operator's image; a prefix that holds nothing is named in status. See docs/lora.md.

Requests go through the router Service (a Ready router pod, as kube-proxy would pick one), whose
router hop sends a request for an adapter only to an engine marked as serving it: with two
engines and an adapter lost on one of them, every request for it succeeds (N of N, none 404),
where vllm-router alone answers some with that engine's 404 (docs/router.md, "Adapters").

Nobody but the operator may fetch, prune or load: an unprivileged pod of another namespace, with
no token or a wrong one, is refused by every door of the fetcher and by the engine's LoRA API,
and the fetcher's volume on the node's disk does not change; with engine.networkPolicy on, the
policy rendered for this LLMDeployment admits that pod to none of those ports
(docs/security.md, "Every port").
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from clusters import fresh_namespace
from dashboards.promql import VLLM_LORA_INFO
from kubernetes import client
from localcluster.metricsstack.load import delete_llmd, tiny_llmd, wait_free_gpus
from localcluster.noderunner.volumes import pod_dir
from localcluster.objectstore import ObjectStore, object_store
from localcluster.routerapi import ROUTER_PORT, routed_engines
from localcluster.supervisor import REPO, Cluster
from prometheus_client.parser import text_string_to_metric_families

from llmfleet import API_GROUP as GROUP
from llmfleet import API_VERSION as VERSION
from llmfleet.fetcher.files import ADAPTER_CONFIG
from llmfleet.fetcher.paths import FETCHER_PORT, fetched_path
from llmfleet.models import LLMDeploymentSpec
from llmfleet.models.network_policy import parse_engine_network_policy
from llmfleet.planner import plan
from llmfleet.reconcile.llmdeployment.adapter_marks import mark_condition
from llmfleet.render import Owner, render_fleet
from llmfleet.render.fetcher import FETCH_VOLUME, FETCHER_CONTAINER
from llmfleet.render.names import ADAPTERS_GATE, HTTP_PORT
from llmfleet.render.router import METRICS_PORT
from llmfleet.render.routerhop import ADAPTERS_ENV, HOP_CONTAINER, ROUTER_LOOPBACK_PORT
from llmfleet.settings import OperatorSettings

from . import localnode
from .callers import RESTRICTED, Call, admits, covers, run_caller, selector_text
from .harness import Operator, condition, helm_template, wait_until

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
NETWORK_POLICY_FLAG = "--engine-network-policy="


@pytest.fixture(scope="module")
def node_runner(cluster: Cluster, vllm_python: Path) -> Iterator[str]:
    # Two slots: the last test runs a second engine.
    with localnode.local_node(cluster, gpus=2) as node:
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


def complete(router_ip: str, model: str, port: int = ROUTER_PORT) -> tuple[int, str]:
    """Greedy, seeded: the same weights give the same text."""
    body = {"model": model, "prompt": "Hello, world", "max_tokens": 8, "temperature": 0, "seed": 1}
    status, answer = post(router_ip, port, "/v1/completions", body)
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
    """Edit spec.adapters, and wait until the router pods know the new list (the router hop's
    env: the router rolls, no engine does) and the old ones are leaving the Service."""
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "llmdeployments", NAME, {"spec": {"adapters": adapters}}
    )
    names = ",".join(sorted(a["name"] for a in adapters))
    core = client.CoreV1Api(api)

    def rolled() -> bool:
        pods = [
            p
            for p in core.list_namespaced_pod(namespace, label_selector=ROUTERS).items
            if not p.metadata.deletion_timestamp
        ]
        return bool(pods) and all(ready(p) and hop_adapters(p) == names for p in pods)

    wait_until(rolled, SERVES_WITHIN, 0.5, f"the router pods rolled to adapters {names}")


def hop_adapters(pod: client.V1Pod) -> str | None:
    for c in pod.spec.containers:
        if c.name == HOP_CONTAINER:
            return next((e.value for e in c.env or [] if e.name == ADAPTERS_ENV), None)
    return None


def router_ip(api: client.ApiClient, namespace: str) -> str:
    """Where the router Service sends a client now: a Ready router pod not being deleted (the
    lab's Services get no endpoints for loopback pod IPs, so the test picks one as kube-proxy
    would), once it has discovered an engine."""
    core = client.CoreV1Api(api)

    def pick() -> str | None:
        for p in core.list_namespaced_pod(namespace, label_selector=ROUTERS).items:
            if ready(p) and not p.metadata.deletion_timestamp and routed_engines(p.status.pod_ip):
                return str(p.status.pod_ip)
        return None

    ip: str = wait_until(pick, SERVES_WITHIN, 0.5, "a Ready router pod that routes")
    return ip


def ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


@dataclass(frozen=True)
class Lora:
    """The module's LLMDeployment: one LoRA engine (vLLM and its adapter fetcher) behind the
    router, Ready with `sql` loaded."""

    namespace: str
    engine: client.V1Pod
    api: client.ApiClient
    sql: dict[str, str]
    chat: dict[str, str]  # from the object store: fetched into the engine pod by its fetcher
    chat_dir: Path

    def router_ip(self) -> str:
        return router_ip(self.api, self.namespace)


@pytest.fixture(scope="module")
def lora(
    operator: Operator,
    api: client.ApiClient,
    cluster: Cluster,
    test_namespaces: list[str],
    finish_namespace: Callable[[str], None],
    node_runner: str,
    vllm_python: Path,
    store: ObjectStore,
) -> Iterator[Lora]:
    core = client.CoreV1Api(api)
    sql = {"name": "sql", "source": adapter(vllm_python, "sql", "--seed", "1")}
    chat_dir = Path(adapter(vllm_python, "chat", "--seed", "2"))
    chat = {"name": "chat", "source": store.put_folder(chat_dir, BUCKET, "tiny/chat/v1")}
    with fresh_namespace(api, NAME, test_namespaces, finish_namespace) as namespace:
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
            # A new engine joins with the current set: Ready only once `sql` is loaded in it.
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
            router_ip(api, namespace)  # a router serves
            yield Lora(namespace, engine, api, sql, chat, chat_dir)
        finally:
            t0 = time.monotonic()
            delete_llmd(api, namespace, NAME)
            print(f"deleted in {time.monotonic() - t0:.0f}s")


def test_adapters_change_in_running_engines_without_a_restart(
    lora: Lora, api: client.ApiClient, vllm_python: Path
) -> None:
    core = client.CoreV1Api(api)
    namespace, engine, sql, chat = lora.namespace, lora.engine, lora.sql, lora.chat
    ghost = {"name": "ghost", "source": f"s3://{BUCKET}/tiny/ghost"}
    wide = {"name": "wide", "source": adapter(vllm_python, "wide", "--rank", "32", "--seed", "3")}
    hollow = {
        "name": "hollow",
        "source": adapter(vllm_python, "hollow", "--broken", "missing-weights"),
    }
    # --- The engine joined with the current set: `sql` loaded, the readiness gate True.
    assert {BASE, "sql"} <= listed(engine.status.pod_ip, HTTP_PORT)
    # The key guards the engine: only the operator's key-bearing calls loaded `sql`.
    with pytest.raises(urllib.error.HTTPError) as refused:
        listed(engine.status.pod_ip, HTTP_PORT, headers={})
    assert refused.value.code == 401
    gate = [c for c in engine.status.conditions if c.type == ADAPTERS_GATE]
    assert [c.status for c in gate] == ["True"]
    wait_until(lambda: served(api, namespace) == {"sql": (1, None)}, CHANGED_WITHIN, 1)

    status, base_text = complete(lora.router_ip(), BASE)
    assert status == 200
    assert complete(lora.router_ip(), "sql")[0] == 200
    sql_text = complete(lora.router_ip(), "sql")[1]
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
    assert listed(lora.router_ip(), ROUTER_PORT) >= {BASE, "sql", "chat"}, "the router lists them"
    status, chat_text = complete(lora.router_ip(), "chat")
    assert status == 200
    assert chat_text not in (base_text, sql_text)

    # --- One removed: its name answers 404; the other serves as before.
    set_adapters(api, namespace, [chat])
    # The router hop answers it: a model neither the base nor an adapter.
    status, answer = complete(lora.router_ip(), "sql")
    assert status == 404
    assert "`sql` does not exist" in answer
    assert complete(lora.router_ip(), "chat") == (200, chat_text)
    wait_until(lambda: served(api, namespace) == {"chat": (1, None)}, CHANGED_WITHIN, 0.5)

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
    assert complete(lora.router_ip(), "chat") == (200, chat_text)

    # --- No engine restarted through all of it: the same pod, never restarted.
    (after,) = core.list_namespaced_pod(namespace, label_selector=ENGINES).items
    assert after.metadata.uid == engine.metadata.uid
    assert sorted(s.name for s in after.status.container_statuses) == [
        "adapter-fetcher",
        "vllm",
    ]
    assert [s.restart_count for s in after.status.container_statuses] == [0, 0]


# What the caller sends: nothing, or a token that is not the operator's (nor the engine's key).
CREDENTIALS = ({}, {"Authorization": "Bearer not-the-operators"})
# What a refusal may answer; the calls that act (fetch, prune, load, unload) must answer 401.
REFUSED = {401, 403, 404, 405, 501}
# The engine's paths beside its LoRA API that would act on it were they served: vLLM's dev-mode
# paths, which only standby engines serve, behind their own fence (docs/security.md).
ENGINE_DEV_PATHS = (
    ("POST", "/sleep"),
    ("POST", "/wake_up"),
    ("GET", "/is_sleeping"),
    ("POST", "/collective_rpc"),
    ("POST", "/reset_prefix_cache"),
    ("GET", "/server_info"),
)


def on_disk(root: Path) -> list[tuple[str, int, int, str]]:
    """Every entry under `root` and `root` itself: its path, size, modification time and, for a
    file, a digest of its bytes (an adapter of the tiny model is a few KiB)."""
    return [
        (
            str(p.relative_to(root)),
            (st := p.lstat()).st_size,
            st.st_mtime_ns,
            hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "",
        )
        for p in sorted([root, *root.rglob("*")])
    ]


def doors(engine_ip: str, unasked: str, copy: str) -> list[tuple[Call, bool]]:
    """Each call an outsider could make on the engine pod's fetcher and LoRA API, and whether
    it must answer 401 (the calls that would act) rather than any refusal."""
    fetcher, engine = f"http://{engine_ip}:{FETCHER_PORT}", f"http://{engine_ip}:{HTTP_PORT}"
    acting = [
        (f"{fetcher}/v1/fetch", {"source": unasked}),
        (f"{fetcher}/v1/prune", {"keep": []}),
        (f"{engine}/v1/load_lora_adapter", {"lora_name": "unasked", "lora_path": copy}),
        (f"{engine}/v1/unload_lora_adapter", {"lora_name": "chat"}),
    ]
    # The fetcher serves only these two and GET /healthz: every other method and path.
    others = [
        ("GET", f"{fetcher}/v1/fetch", None),
        ("GET", f"{fetcher}/v1/prune", None),
        ("PUT", f"{fetcher}/v1/fetch", {"source": unasked}),
        ("DELETE", f"{fetcher}/v1/prune", None),
        ("POST", f"{fetcher}/v1/fetch/", {"source": unasked}),
        ("POST", f"{fetcher}/v1/fetch?source={unasked}", {"source": unasked}),
        ("POST", f"{fetcher}/healthz", {"source": unasked}),
        ("GET", f"{fetcher}/", None),
        ("GET", f"{fetcher}/metrics", None),
        *((m, f"{engine}{path}", None if m == "GET" else {}) for m, path in ENGINE_DEV_PATHS),
    ]
    return [
        *((Call("POST", url, body, h), True) for url, body in acting for h in CREDENTIALS),
        *((Call(m, url, body, h), False) for m, url, body in others for h in CREDENTIALS),
    ]


def engine_policy(api: client.ApiClient, namespace: str) -> dict[str, Any]:
    """The NetworkPolicy the operator renders for this LLMDeployment with the chart's
    engine.networkPolicy on (its peers as the chart passes them), as the API server admits it
    (created with dryRun). Rendered here rather than by turning the value on in the running
    operator, which rolls the operator's pod twice (on, then off) for an object the same
    function makes."""
    (deployment,) = [
        d
        for d in helm_template("--set", "engine.networkPolicy.enabled=true")
        if d["kind"] == "Deployment"
    ]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    (flag,) = [a for a in container["args"] if a.startswith(NETWORK_POLICY_FLAG)]
    peers = parse_engine_network_policy(flag.removeprefix(NETWORK_POLICY_FLAG))
    obj = llmd(api, namespace)
    spec = LLMDeploymentSpec.model_validate(obj["spec"])
    owner = Owner(NAME, namespace, obj["metadata"]["uid"])
    fleet = render_fleet(
        owner, spec, plan(spec), OperatorSettings(engine_network_policy=peers).fleet
    )
    (policy,) = [o for o in fleet.objects() if o["kind"] == "NetworkPolicy"]
    admitted = client.NetworkingV1Api(api).create_namespaced_network_policy(
        namespace, policy, dry_run="All"
    )
    return dict(api.sanitize_for_serialization(admitted))


def test_an_unprivileged_pod_elsewhere_can_neither_fetch_prune_nor_load(
    lora: Lora,
    operator: Operator,
    api: client.ApiClient,
    cluster: Cluster,
    test_namespaces: list[str],
    finish_namespace: Callable[[str], None],
    node_runner: str,
    store: ObjectStore,
) -> None:
    """From a pod of another namespace that passes the `restricted` Pod Security Standard and
    holds no credential, as any workload of the cluster could run: every door of the fetcher
    and the engine's LoRA API refuses, without the operator's token or with another, and the
    fetcher's volume is unchanged, byte for byte, after an unasked fetch (of a prefix that
    exists) and a prune that would remove everything. The lab has no network plugin, so this is
    the NetworkPolicy off; with it on, the policy rendered for this LLMDeployment admits that
    pod to neither the fetcher's port nor the engine's (whose paths include the LoRA API),
    checked with the API server's own selector queries, since nothing here enforces it."""
    core = client.CoreV1Api(api)
    namespace, engine = lora.namespace, lora.engine
    # A settled set whose one fetched adapter the operator keeps: it neither fetches nor prunes
    # anything while the caller runs (a failing adapter's fetch would be retried each resync).
    set_adapters(api, namespace, [lora.chat])
    wait_until(
        lambda: served(api, namespace) == {"chat": (1, None)}, CHANGED_WITHIN, 0.5, "chat alone"
    )
    # The fetcher's emptyDir, where the node runner keeps it (the pod's volume on a kubelet).
    volume = pod_dir(cluster.state_dir, engine.metadata.uid) / "emptydir" / FETCH_VOLUME
    copy = fetched_path(lora.chat["source"], None)
    assert (Path(fetched_path(lora.chat["source"], None, str(volume))) / ADAPTER_CONFIG).is_file()
    unasked = store.put_folder(lora.chat_dir, BUCKET, "tiny/unasked")
    before = on_disk(volume)
    image = next(c.image for c in engine.spec.containers if c.name == FETCHER_CONTAINER)
    calls = doors(engine.status.pod_ip, unasked, copy)
    # Two that must answer: the caller reaches both ports, so a refusal is the door's own.
    probes = [
        Call("GET", f"http://{engine.status.pod_ip}:{FETCHER_PORT}/healthz"),
        Call("GET", f"http://{engine.status.pod_ip}:{HTTP_PORT}/health"),
    ]

    with fresh_namespace(api, "caller", test_namespaces, finish_namespace) as elsewhere:
        core.patch_namespace(elsewhere, {"metadata": {"labels": RESTRICTED}})
        caller, codes = run_caller(
            core, elsewhere, node_runner, image, [*probes, *(c for c, _ in calls)]
        )
        assert codes[: len(probes)] == [200, 200], codes
        answered = {
            (c.method, c.url, bool(c.headers)): code
            for (c, _), code in zip(calls, codes[len(probes) :], strict=True)
        }
        let_in = {k: v for k, v in answered.items() if v not in REFUSED}
        assert not let_in, f"answered the caller with other than a refusal: {let_in}"
        not_401 = {
            (c.method, c.url, bool(c.headers)): code
            for (c, acts), code in zip(calls, codes[len(probes) :], strict=True)
            if acts and code != 401
        }
        assert not not_401, f"calls that act answered other than 401: {not_401}"

        # Nothing changed: no folder fetched, none removed, no file touched.
        assert on_disk(volume) == before
        assert not Path(fetched_path(unasked, None, str(volume))).exists()
        assert "unasked" not in listed(engine.status.pod_ip, HTTP_PORT)
        assert served(api, namespace) == {"chat": (1, None)}
        assert complete(lora.router_ip(), "chat")[0] == 200

        # --- engine.networkPolicy on: no rule for these ports without `from`, and no peer of
        # theirs selects the caller; the operator's pods, and only they, reach the fetcher.
        policy = engine_policy(api, namespace)
        spec = policy["spec"]
        selected = core.list_namespaced_pod(
            namespace, label_selector=selector_text(spec["podSelector"])
        ).items
        assert engine.metadata.name in {p.metadata.name for p in selected}
        fetcher_port, engine_port = ("fetcher", FETCHER_PORT), ("http", HTTP_PORT)
        for port in (fetcher_port, engine_port):
            rules = [r for r in spec["ingress"] if covers(r, port)]
            assert rules, port
            for rule in rules:
                assert rule.get("from"), f"a rule without `from` admits everyone to {port}"
                assert not [p for p in rule["from"] if admits(core, namespace, p, caller)], port
        leader = operator.leader_pod()
        assert leader is not None
        operator_pod = core.read_namespaced_pod(
            leader["metadata"]["name"], leader["metadata"]["namespace"]
        )
        router = next(
            p
            for p in core.list_namespaced_pod(namespace, label_selector=ROUTERS).items
            if ready(p) and not p.metadata.deletion_timestamp
        )
        for port, peer_pod in ((fetcher_port, operator_pod), (engine_port, router)):
            # The selector queries say yes where they should: this check can fail.
            assert any(
                admits(core, namespace, p, peer_pod)
                for r in spec["ingress"]
                if covers(r, port)
                for p in r["from"]
            ), (port, peer_pod.metadata.name)
        fetcher_peers = [p for r in spec["ingress"] if covers(r, fetcher_port) for p in r["from"]]
        assert not [p for p in fetcher_peers if not admits(core, namespace, p, operator_pod)], (
            "a peer of the fetcher's port that is not the operator's pods"
        )


REQUESTS = 20
HELD_FOR = 3.0  # seconds a client waits on a request the hop holds, to see it held, not refused


def hop_metric(router: str, name: str) -> float:
    with urllib.request.urlopen(f"http://{router}:{METRICS_PORT}/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    )


def test_a_request_for_an_adapter_reaches_only_engines_that_serve_it(
    lora: Lora, api: client.ApiClient
) -> None:
    """Two engines; `chat` is lost on one (unloaded there, as a failed load or a restart leaves
    it, and its mark withdrawn, as the operator withdraws it). Through the router Service every
    request for chat succeeds; vllm-router alone, behind the hop, sends some to the engine that
    lacks it and passes on its 404. A request for an adapter no engine serves is held, not
    refused."""
    core = client.CoreV1Api(api)
    namespace = lora.namespace
    set_adapters(api, namespace, [lora.chat])  # as the test before leaves it, or run alone
    custom = client.CustomObjectsApi(api)
    custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        "llmdeployments",
        NAME,
        {"spec": {"autoscaling": {"minReplicas": 2, "maxReplicas": 2}}},
    )
    engines = wait_until(
        lambda: (
            (
                pods := [
                    p
                    for p in core.list_namespaced_pod(namespace, label_selector=ENGINES).items
                    if ready(p)
                ]
            )
            and len(pods) == 2
            and pods
        ),
        SERVES_WITHIN,
        1,
        "two engines Ready",
    )
    wait_until(lambda: served(api, namespace) == {"chat": (2, None)}, CHANGED_WITHIN, 0.5)
    # The module's first engine keeps chat; the one that joined now loses it.
    lose = next(p for p in engines if p.metadata.uid != lora.engine.metadata.uid)
    # chat gone from `lose`: vLLM unloads it, and its mark no longer names it.
    unload = urllib.request.Request(
        f"http://{lose.status.pod_ip}:{HTTP_PORT}/v1/unload_lora_adapter",
        json.dumps({"lora_name": "chat"}).encode(),
        headers={"Content-Type": "application/json", **AUTHORIZED},
    )
    with urllib.request.urlopen(unload, timeout=60) as r:  # vLLM answers it in plain text
        assert r.status == 200
    core.patch_namespaced_pod_status(
        lose.metadata.name, namespace, {"status": {"conditions": [mark_condition([])]}}
    )
    assert "chat" not in listed(lose.status.pod_ip, HTTP_PORT)
    router = lora.router_ip()
    wait_until(lambda: len(routed_engines(router)) == 2, 60, 1, "vllm-router routing to both")

    # vllm-router on its own (its port in the pod, here the pod IP): some of chat's requests
    # reach the engine that lacks it. This is what the hop is for; without it the test below
    # could not fail.
    alone = [complete(router, "chat", ROUTER_LOOPBACK_PORT)[0] for _ in range(REQUESTS)]
    assert 404 in alone, alone
    print(f"vllm-router alone: {alone.count(404)} of {REQUESTS} requests for chat answered 404")

    routed_before = hop_metric(router, "llmfleet_router_hop_routed_requests_total")
    through = [complete(router, "chat")[0] for _ in range(REQUESTS)]
    assert through == [200] * REQUESTS, f"{through.count(404)} of {REQUESTS} answered 404"
    assert (
        hop_metric(router, "llmfleet_router_hop_routed_requests_total") - routed_before >= REQUESTS
    )
    assert complete(router, BASE)[0] == 200  # the base, through vllm-router, to either

    # An adapter that loads nowhere (a prefix that holds nothing): held, not refused.
    ghost = {"name": "ghost", "source": f"s3://{BUCKET}/tiny/ghost-2"}
    set_adapters(api, namespace, [lora.chat, ghost])
    router = lora.router_ip()
    body = json.dumps({"model": "ghost", "prompt": "hi", "max_tokens": 1}).encode()
    req = urllib.request.Request(
        f"http://{router}:{ROUTER_PORT}/v1/completions",
        body,
        headers={"Content-Type": "application/json", **AUTHORIZED},
    )
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        urllib.request.urlopen(req, timeout=HELD_FOR)
    assert time.monotonic() - started >= HELD_FOR
    assert complete(router, "chat")[0] == 200
