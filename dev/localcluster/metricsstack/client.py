"""What a test asks of a running metrics stack: the operator's scrape targets, rule files,
Prometheus queries and the custom metrics the HPA controller reads."""

from __future__ import annotations

import json
import ssl
import subprocess
import urllib.parse
import urllib.request
from typing import Any

from llmfleet.render.autoscaling import QUEUE_METRIC

from .files import StackFiles
from .scrape_config import OPERATOR_JOB


class StackClient(StackFiles):
    """The part of MetricsStack (stack.py) that talks to the running stack."""

    # --- scrape targets ---------------------------------------------------------------------

    def scrape(self, job: str, *addresses: str) -> None:
        """Set the targets of a file-discovered job (only `llmfleet-operator` is configured);
        Prometheus picks the change up within seconds."""
        if job != OPERATOR_JOB:
            raise ValueError(f"only {OPERATOR_JOB} takes targets from a file")
        tmp = self.targets_dir / f".{job}.json.tmp"
        tmp.write_text(json.dumps([{"targets": list(addresses), "labels": {}}]) + "\n")
        tmp.rename(self.targets_dir / f"{job}.json")

    def load_rules(self, name: str, text: str) -> None:
        """Install a Prometheus rule file as `<name>.yaml` and reload; raises when Prometheus
        refuses it (the reload fails and the old rules stay)."""
        path = self.rules_dir / f"{name}.yaml"
        self.rules_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        try:
            self._http(f"{self.prometheus_url}/-/reload", method="POST")
        except OSError:
            path.unlink()
            raise
        groups = self._api("rules", {})["groups"]
        if not any(g["file"] == str(path) for g in groups):
            raise RuntimeError(f"Prometheus did not load {path}")

    def remove_rules(self, name: str) -> None:
        (self.rules_dir / f"{name}.yaml").unlink(missing_ok=True)
        self._http(f"{self.prometheus_url}/-/reload", method="POST")

    def active_targets(self, job: str | None = None) -> list[dict[str, Any]]:
        data = self._api("targets", {"state": "active"})
        targets: list[dict[str, Any]] = data["activeTargets"]
        return [t for t in targets if job is None or t["labels"].get("job") == job]

    # --- queries ----------------------------------------------------------------------------

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query; the `result` list of its vector (or matrix)."""
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        result: list[dict[str, Any]] = self._api("query", params)["result"]
        return result

    def value(self, expr: str, default: float | None = None) -> float | None:
        """The single value of an instant query (None, or `default`, when it has no sample)."""
        result = self.query(expr)
        if not result:
            return default
        return float(result[0]["value"][1])

    def query_range(
        self, expr: str, start: float, end: float, step: float = 1.0
    ) -> list[dict[str, Any]]:
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step}"}
        result: list[dict[str, Any]] = self._api("query_range", params)["result"]
        return result

    def custom_metric(
        self, namespace: str, metric: str = QUEUE_METRIC, pods: str = "*"
    ) -> dict[str, float]:
        """Pod name -> value, as the custom metrics API serves it to the HPA controller."""
        path = f"/apis/custom.metrics.k8s.io/v1beta1/namespaces/{namespace}/pods/{pods}/{metric}"
        try:
            got = json.loads(self.cluster.kubectl("get", "--raw", path))
        except subprocess.CalledProcessError as e:
            if "NotFound" in (e.stderr or ""):  # no such series (yet): the adapter relists
                return {}
            raise
        return {
            item["describedObject"]["name"]: _quantity(item["value"])
            for item in got.get("items", [])
        }

    # --- plumbing ---------------------------------------------------------------------------

    def _api(self, endpoint: str, params: dict[str, str]) -> dict[str, Any]:
        url = f"{self.prometheus_url}/api/v1/{endpoint}?{urllib.parse.urlencode(params)}"
        body = json.loads(self._http(url))
        if body.get("status") != "success":
            raise RuntimeError(f"Prometheus {endpoint} {params}: {body}")
        data: dict[str, Any] = body["data"]
        return data

    def _ca_ctx(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.cluster.pki_dir / "ca.crt"))

    @staticmethod
    def _http(url: str, method: str = "GET", context: ssl.SSLContext | None = None) -> bytes:
        req = urllib.request.Request(url, method=method)
        with urllib.request.urlopen(req, timeout=10, context=context) as resp:
            body: bytes = resp.read()
            return body


def _quantity(q: str) -> float:
    """A Kubernetes quantity as the custom metrics API writes values ("0", "1500m", "2")."""
    suffixes = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9}
    if q and q[-1] in suffixes:
        return float(q[:-1]) * suffixes[q[-1]]
    return float(q)
