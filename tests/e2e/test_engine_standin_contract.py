"""The engine stand-in's contract (issue 32): the real pinned vLLM and the stand-in
(dev/localcluster/standin), started side by side as plain processes on one command line, serve
alike what the operator, the router, the chart and the lab read.

The command line is the operator's for a tiny-model LLMDeployment, through the node runner's
adaptations (adaptations 1-9, then 20, the stand-in's own), so the two run what a pod runs. What
must agree: `/health` before and after start, `/v1/models`, the JSON keys (not the text) of
completions and chat completions, streamed or not, and of the errors; every `vllm:` family the
stand-in serves (type, help, label names and values, buckets); every `vllm:` series the operator,
the chart and the lab read; `vllm:cache_config_info` label for label (PlanVerified's figure); the
queue gauges under more requests than `--max-num-seqs`; SIGTERM with requests in flight (a pod
scaled down: they drain, the port stays open meanwhile, exit 0). A vLLM that renames a metric, a
label or a key fails here, naming it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from dashboards.promql import DEPRECATED_METRICS, VLLM_LORA_INFO
from localcluster.noderunner import adaptations
from localcluster.noderunner.runner import TINY_MODEL_NAMES, tiny_model
from localcluster.supervisor import CLUSTER_INDEX, REPO
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner import plan
from llmfleet.reconcile.llmdeployment.kvcache import parse_kv_cache_tokens
from llmfleet.render import Owner, render_fleet
from llmfleet.settings import OperatorSettings

FLEET = OperatorSettings().fleet

STARTUP_TIMEOUT = 300  # real vLLM on 2 shared cores: 35-90 s
IPS = {"vllm": f"127.{100 + CLUSTER_INDEX}.0.1", "stand-in": f"127.{100 + CLUSTER_INDEX}.0.2"}
PORT = 8000
MAX_NUM_SEQS = 2  # the tiny LLMDeployment's engine.maxNumSeqs
# Where the series the product reads are named; the stand-in itself is not a reader.
READERS = ("operator/src", "charts", "dev/dashboards", "dev/localcluster")
SERIES = re.compile(r"vllm:(?!v\d)[a-z_][a-z0-9_]*")  # not an image tag (vllm:v0.32.0)
SUFFIXES = ("_total", "_bucket", "_sum", "_count", "_created")
# Labels whose values are per engine, not an enumeration.
OWN_LABELS = {"engine", "model_name", "le"}
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def operator_argv() -> tuple[list[str], list[str]]:
    """The engine container's command and args the operator renders for the tiny model."""
    from localcluster.metricsstack.load import tiny_llmd

    body = tiny_llmd("contract", max_num_seqs=MAX_NUM_SEQS, enabled=False)
    spec = LLMDeploymentSpec.model_validate(body["spec"])
    for obj in render_fleet(Owner("contract", "default", "1"), spec, plan(spec), FLEET).objects():
        if obj["kind"] == "Deployment":
            (container,) = obj["spec"]["template"]["spec"]["containers"]
            return list(container["command"]), list(container["args"])
    raise AssertionError("no engine Deployment rendered")


def http(url: str, body: dict[str, Any] | None = None, method: str = "") -> tuple[int, str, str]:
    """(status, content type, body text); status 0 when nothing listens."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method or ("POST" if data else "GET"))
    req.add_header("Content-Type", "application/json")
    try:
        with _DIRECT.open(req, timeout=120) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read().decode()
    except OSError:
        return 0, "", ""


@dataclass
class Server:
    name: str
    proc: subprocess.Popen[bytes]
    url: str
    started: float
    before_ready: set[int] = field(default_factory=set)  # /health codes until the first 200
    ready_after: float = 0.0

    def wait_ready(self) -> None:
        while time.monotonic() - self.started < STARTUP_TIMEOUT:
            code = http(f"{self.url}/health")[0]
            if code == 200:
                self.ready_after = time.monotonic() - self.started
                return
            self.before_ready.add(code)
            assert self.proc.poll() is None, f"{self.name} exited {self.proc.returncode}"
            time.sleep(0.25)
        raise AssertionError(f"{self.name} not up after {STARTUP_TIMEOUT}s")

    def metrics(self) -> dict[str, Metric]:
        text = http(f"{self.url}/metrics")[2]
        return {f.name: f for f in text_string_to_metric_families(text) if "vllm:" in f.name}


@pytest.fixture(scope="module")
def servers(
    vllm_python: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Server]]:
    logs = tmp_path_factory.mktemp("engines")
    models = dict.fromkeys(TINY_MODEL_NAMES, tiny_model(vllm_python))
    command, args = operator_argv()
    base = {"PATH": os.environ["PATH"], "HOME": str(logs), "LLMFLEET_STANDIN_TOKEN_S": "0.005"}
    out: dict[str, Server] = {}
    for name, ip in IPS.items():
        ctx = adaptations.Context(python=vllm_python, pod_ip=ip, models=models)
        argv = adaptations.adapt_command(command, args, ctx)
        env = adaptations.adapt_env(base)
        if name == "stand-in":
            asks = {adaptations.STAND_IN_ANNOTATION: adaptations.STAND_IN}
            argv, env = adaptations.stand_in(argv, env, asks) or (argv, env)
            assert argv[2] == adaptations.STAND_IN_MODULE
        with open(logs / f"{name}.log", "wb") as log:
            proc = subprocess.Popen(
                argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        out[name] = Server(name, proc, f"http://{ip}:{PORT}", time.monotonic())
    try:
        threads = [threading.Thread(target=s.wait_ready) for s in out.values()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for s in out.values():
            assert s.ready_after, (logs / f"{s.name}.log").read_text()[-3000:]
            print(f"\n{s.name}: /health 200 {s.ready_after:.1f}s after its start")
        yield out
    finally:
        for s in out.values():
            s.proc.send_signal(signal.SIGTERM)
        for s in out.values():
            try:
                s.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(s.proc.pid, signal.SIGKILL)
                s.proc.wait()


def shape(value: Any) -> Any:
    """A JSON value's keys and types, without its values."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return type(value).__name__


def events(text: str) -> list[Any]:
    return [
        line[6:] if line == "data: [DONE]" else json.loads(line[6:])
        for line in text.splitlines()
        if line.startswith("data: ")
    ]


def both(
    servers: dict[str, Server], path: str, body: dict[str, Any] | None = None, method: str = ""
) -> tuple[tuple[int, str, str], tuple[int, str, str]]:
    return (
        http(servers["vllm"].url + path, body, method),
        http(servers["stand-in"].url + path, body, method),
    )


def test_health_is_refused_until_the_engine_is_up_then_answers(servers: dict[str, Server]) -> None:
    real, stand_in = servers["vllm"], servers["stand-in"]
    assert real.before_ready == stand_in.before_ready == {0}
    assert both(servers, "/health") == ((200, "", ""), (200, "", ""))
    assert stand_in.ready_after < real.ready_after


def test_models_are_listed_alike(servers: dict[str, Server]) -> None:
    (code, ctype, real), (code2, ctype2, stand_in) = both(servers, "/v1/models")
    assert code == 200
    assert (code2, ctype2) == (code, ctype)
    real_models, stand_in_models = json.loads(real), json.loads(stand_in)
    assert shape(stand_in_models) == shape(real_models)
    pick = ("id", "root", "max_model_len", "owned_by")
    assert [{k: m[k] for k in pick} for m in stand_in_models["data"]] == [
        {k: m[k] for k in pick} for m in real_models["data"]
    ]


REQUESTS = {
    "completion": ("/v1/completions", {"prompt": "Hello, world"}),
    "chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}]}),
}


@pytest.mark.parametrize("stream", ["no", "stream", "stream+usage"])
@pytest.mark.parametrize("kind", list(REQUESTS))
def test_completions_have_vllms_keys(servers: dict[str, Server], kind: str, stream: str) -> None:
    path, body = REQUESTS[kind]
    body = {**body, "max_tokens": 4, "ignore_eos": True}
    if stream != "no":
        body["stream"] = True
    if stream == "stream+usage":
        body["stream_options"] = {"include_usage": True}
    (code, ctype, real), (code2, ctype2, stand_in) = both(servers, path, body)
    assert code == 200
    assert (code2, ctype2) == (code, ctype)
    if stream == "no":
        assert shape(json.loads(stand_in)) == shape(json.loads(real))
        assert json.loads(stand_in)["usage"]["completion_tokens"] == 4
        return
    got, want = events(stand_in), events(real)
    assert got[-1] == want[-1] == "[DONE]"
    # vLLM may put several tokens in one chunk; which chunk shapes there are, and in what order
    # they start and end, is the contract.
    assert {json.dumps(shape(e)) for e in got[:-1]} == {json.dumps(shape(e)) for e in want[:-1]}
    assert shape(got[0]) == shape(want[0])
    assert shape(got[-2]) == shape(want[-2])
    if stream == "stream+usage":
        assert got[-2]["usage"]["completion_tokens"] == want[-2]["usage"]["completion_tokens"] == 4


@pytest.mark.parametrize(
    ("path", "body", "method"),
    [
        ("/v1/completions", {"model": "not-served", "prompt": "x"}, ""),
        ("/v1/completions", {"prompt": "x", "max_tokens": 100_000}, ""),
        ("/v1/chat/completions", {"model": "not-served", "messages": []}, ""),
        ("/no-such-route", None, ""),
        ("/v1/completions", None, "GET"),
    ],
)
def test_errors_have_vllms_status_and_keys(
    servers: dict[str, Server], path: str, body: dict[str, Any] | None, method: str
) -> None:
    (code, _, real), (code2, _, stand_in) = both(servers, path, body, method)
    assert code2 == code
    assert shape(json.loads(stand_in)) == shape(json.loads(real)), (real, stand_in)


def labels(family: Metric) -> tuple[set[str], dict[str, set[str]]]:
    """A family's label names, and the values of those that enumerate something."""
    names = {k for s in family.samples for k in s.labels} - {"le"}
    values: dict[str, set[str]] = {}
    if family.name != "vllm:cache_config_info":
        for s in family.samples:
            for k, v in s.labels.items():
                if k not in OWN_LABELS:
                    values.setdefault(k, set()).add(v)
    return names, values


def buckets(family: Metric) -> set[str]:
    return {s.labels["le"] for s in family.samples if "le" in s.labels}


def test_every_family_the_stand_in_serves_is_vllms(servers: dict[str, Server]) -> None:
    (_, real_type, _), (_, stand_in_type, _) = both(servers, "/metrics")
    assert stand_in_type == real_type, "/metrics content type"
    real, stand_in = servers["vllm"].metrics(), servers["stand-in"].metrics()
    assert stand_in.keys() <= real.keys(), f"not vLLM's: {sorted(stand_in.keys() - real.keys())}"
    missing = sorted(real.keys() - stand_in.keys())
    print(f"\nvLLM families the stand-in does not serve: {missing or 'none'}")
    for name, family in stand_in.items():
        want = real[name]
        assert (family.type, family.documentation) == (want.type, want.documentation), name
        assert labels(family) == labels(want), name
        assert buckets(family) == buckets(want), name


def read_series() -> dict[str, list[str]]:
    """Every `vllm:` series named where the product or the lab reads metrics: name -> files."""
    found: dict[str, list[str]] = {}
    for root in READERS:
        for path in sorted((REPO / root).rglob("*")):
            if not path.is_file() or path.suffix not in (".py", ".yaml", ".json", ".tpl"):
                continue
            if "standin" in path.parts:
                continue
            for name in set(SERIES.findall(path.read_text(errors="replace"))):
                found.setdefault(name, []).append(str(path.relative_to(REPO)))
    for name in DEPRECATED_METRICS:  # listed to be refused, not read
        found.pop(name, None)
    # Served only with --enable-lora, which neither engine here runs: test_lora.py reads it from
    # the real vLLM.
    found.pop(VLLM_LORA_INFO, None)
    return found


def family_of(series: str, families: dict[str, Metric]) -> str | None:
    for name in (series, *(series.removesuffix(s) for s in SUFFIXES if series.endswith(s))):
        if name in families:
            return name
    return None


def test_every_vllm_series_the_product_reads_is_served_by_both(servers: dict[str, Server]) -> None:
    real, stand_in = servers["vllm"].metrics(), servers["stand-in"].metrics()
    read = read_series()
    assert "vllm:num_requests_waiting" in read  # the autoscaler's metric: the scan works
    not_vllms = {s: files for s, files in read.items() if family_of(s, real) is None}
    assert not not_vllms, f"read, but vLLM serves no such series: {not_vllms}"
    not_served = {s: files for s, files in read.items() if family_of(s, stand_in) is None}
    assert not not_served, f"read, but the stand-in serves no such series: {not_served}"
    print(f"\n{len(read)} vllm: series read, all served by both: {sorted(read)}")


def test_cache_config_info_is_vllms_label_for_label(servers: dict[str, Server]) -> None:
    real, stand_in = servers["vllm"].metrics(), servers["stand-in"].metrics()
    (want,) = real["vllm:cache_config_info"].samples
    (got,) = stand_in["vllm:cache_config_info"].samples
    assert got.labels == want.labels
    pages = both(servers, "/metrics")
    tokens = [parse_kv_cache_tokens(text) for _, _, text in pages]
    assert tokens[0] == tokens[1] == int(want.labels["kv_cache_size_tokens"])
    print(f"\nnum_gpu_blocks {want.labels['num_gpu_blocks']}, {tokens[0]:,} KV tokens on both")


def queue(url: str) -> tuple[float, float]:
    """(running, waiting) from one /metrics page, read without parsing all of it."""
    text = http(f"{url}/metrics")[2]
    found = dict(re.findall(r"^vllm:num_requests_(running|waiting)\{[^}]*\} (\S+)$", text, re.M))
    return float(found["running"]), float(found["waiting"])


def test_more_requests_than_max_num_seqs_wait_alike(servers: dict[str, Server]) -> None:
    clients, tokens = 8, 400

    def done(s: Server) -> tuple[float, float]:
        m = s.metrics()
        (length,) = (
            x for x in m["vllm:request_success"].samples if x.labels["finished_reason"] == "length"
        )
        return m["vllm:generation_tokens"].samples[0].value, length.value

    def peaks(s: Server) -> tuple[float, float]:
        body = {"prompt": "Queue", "max_tokens": tokens, "ignore_eos": True}
        seen = [(0.0, 0.0)]
        with ThreadPoolExecutor(clients) as pool:
            futures = [pool.submit(http, f"{s.url}/v1/completions", body) for _ in range(clients)]
            while not all(f.done() for f in futures):
                seen.append(queue(s.url))
                time.sleep(0.02)
            assert [f.result()[0] for f in futures] == [200] * clients
        assert all(r + w <= clients for r, w in seen), seen
        return max(r for r, _ in seen), max(w for _, w in seen)

    for s in servers.values():
        before = done(s)
        running, waiting = peaks(s)
        after = done(s)
        print(f"\n{s.name}: at most {running:.0f} running, {waiting:.0f} waiting")
        # The batch fills to --max-num-seqs and no further; the rest queue (how many at once
        # depends on when the clients' requests arrive).
        assert running == MAX_NUM_SEQS, s.name
        assert waiting >= (clients - MAX_NUM_SEQS) / 2, s.name
        counted = (after[0] - before[0], after[1] - before[1])
        assert counted == (clients * tokens, clients), (s.name, "tokens and requests done")


# Last: it stops both servers.
def test_sigterm_drains_in_flight_requests_alike(servers: dict[str, Server]) -> None:
    """SIGTERM with more requests than `--max-num-seqs` in flight, on the operator's
    `--shutdown-timeout`: what /health answers while they drain (vLLM 0.32 keeps listening), what
    a completion sent meanwhile gets, that each in flight finishes in full, and the exit code.
    What a pod scaled down does between the router dropping it and its end (test_router.py,
    test_autoscaling.py)."""
    clients, tokens = MAX_NUM_SEQS + 2, 500  # two running and two waiting when SIGTERM comes
    body = {"prompt": "Drain", "max_tokens": tokens, "ignore_eos": True}

    def stop(s: Server) -> dict[str, Any]:
        with ThreadPoolExecutor(clients) as pool:
            futures = [pool.submit(http, f"{s.url}/v1/completions", body) for _ in range(clients)]
            deadline = time.monotonic() + 60
            while queue(s.url) != (MAX_NUM_SEQS, clients - MAX_NUM_SEQS):
                assert time.monotonic() < deadline, f"{s.name}: {queue(s.url)}"
                time.sleep(0.02)
            s.proc.send_signal(signal.SIGTERM)
            stopped = time.monotonic()
            time.sleep(0.3)
            late = http(f"{s.url}/v1/completions", {"prompt": "Late", "max_tokens": 5})
            health: set[int] = set()
            while not all(f.done() for f in futures):
                code = http(f"{s.url}/health")[0]
                if not all(f.done() for f in futures):  # (not the port closing at the end)
                    health.add(code)
                time.sleep(0.1)
            drained = time.monotonic() - stopped
            answers = [f.result() for f in futures]
        seen = {
            "/health while draining": health,
            "a completion sent while draining": (late[0], late[2]),
            "answers": [answered(code, text) for code, _, text in answers],
            "exit code": s.proc.wait(120),
        }
        print(f"\n{s.name}: requests done {drained:.1f}s after SIGTERM; {seen}")
        return seen

    real, stand_in = stop(servers["vllm"]), stop(servers["stand-in"])
    assert real["answers"] == [(200, tokens, "length")] * clients
    assert real["exit code"] == 0
    assert stand_in == real


def answered(code: int, text: str) -> tuple[Any, ...]:
    """(status, completion tokens, finish reason) of a completion; (status, the body's start)
    otherwise."""
    if code != 200:
        return code, text[:200]
    answer = json.loads(text)
    return code, answer["usage"]["completion_tokens"], answer["choices"][0]["finish_reason"]
