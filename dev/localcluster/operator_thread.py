"""The operator inside this process, on a thread of its own: what the tests' API tier (tests/api)
runs. The same start-up as `llmfleet run` (`operator_app.run_operator`, the command line parsed
by the CLI's own parser) with the chart's flags and the chart ServiceAccount's token, both from
`operator_process.Operator.install_identity`, so the RBAC it runs under is the chart's. Only the
process boundary is gone: it starts in about a second, and its log is this process's logging
(copied to `log_path`)."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

import kopf

from llmfleet.cli import build_parser
from llmfleet.commands.run import settings_from_args
from llmfleet.operator_app import api_client, run_operator
from llmfleet.settings import OperatorSettings

from .operator_process import Operator
from .waiting import wait_until

log = logging.getLogger(__name__)

# The loggers the operator writes to, at the levels `llmfleet run --log-level INFO` sets.
LOGGERS = {"llmfleet": logging.INFO, "kopf": logging.INFO, "kopf.objects": logging.WARNING}


@dataclass
class ThreadOperator(Operator):
    """An `Operator` whose start and stop run it on a thread instead of as a process (install
    the chart and its identity first, as for the process). A thread cannot be killed: `kill`
    stops it as `stop` does."""

    name: str = "operator-thread"
    _thread: threading.Thread | None = field(default=None, repr=False)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    # The current run's stop flag: set by `stop`, or by the run itself when it loses the Lease.
    _this_run: threading.Event = field(default_factory=threading.Event, repr=False)
    _log_handler: logging.Handler | None = field(default=None, repr=False)
    _log_levels: dict[str, int] = field(default_factory=dict, repr=False)

    def start(self, wait_leading: bool = True) -> None:
        """Start the thread; with `wait_leading`, return once it leads (holds the Lease). Until
        `stop`, a run that ends by itself (a lost Lease) is started again, as the process's
        container would be."""
        self.stop()
        args = build_parser().parse_args(self._command())
        self._restarts_at_start = self.restarts
        self._stop = threading.Event()
        self._capture_log()
        self._thread = threading.Thread(
            target=self._run,
            args=(settings_from_args(args), self._stop),
            name=self.name,
            daemon=True,
        )
        self._thread.start()
        wait_until(self._serving_metrics, timeout=30, what="operator metrics endpoint")
        if wait_leading:
            wait_until(self.leading, timeout=60, what=f"{self.name} holding the leader Lease")

    def stop(self) -> None:
        """Stop as SIGTERM stops the process: every writer stops, then the Lease is handed over
        and the endpoints close."""
        self._stop.set()
        self._this_run.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
            if self._thread.is_alive():
                raise TimeoutError(f"{self.name} did not stop within 60 s; see {self.log_path}")
            self._thread = None
        self._release_log()

    def kill(self, sig: int = 0) -> None:
        self.stop()

    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def steady(self) -> bool:
        """Running, and not restarted since `start`."""
        return self.running() and self.restarts == self._restarts_at_start

    def _run(self, cfg: OperatorSettings, stop: threading.Event) -> None:
        while True:
            self._this_run = this_run = threading.Event()
            if stop.is_set():  # (also after the assignment: `stop` sets the flag it finds)
                return
            registry = kopf.OperatorRegistry()
            kopf.on.login(registry=registry)(self._login)
            try:
                run_operator(cfg, stop=this_run, registry=registry)
            except Exception:
                log.exception("%s ended with an error", self.name)
            if stop.wait(1.0):
                return
            self.restarts += 1
            log.warning("%s ended by itself (restart %d)", self.name, self.restarts)

    def _login(self, **_: Any) -> kopf.ConnectionInfo:
        """kopf's identity: the token of the kubeconfig the Kubernetes client uses (kopf's own
        login handlers would read the KUBECONFIG this process started with)."""
        conf = api_client(str(self.kubeconfig)).configuration
        return kopf.ConnectionInfo(
            server=conf.host,
            ca_path=conf.ssl_ca_cert,
            insecure=not conf.verify_ssl,
            scheme="Bearer",
            token=conf.api_key["authorization"].removeprefix("Bearer").strip(),
        )

    def _capture_log(self) -> None:
        handler = logging.FileHandler(self.log_path)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        self._log_handler = handler
        for name, level in LOGGERS.items():
            logger = logging.getLogger(name)
            self._log_levels[name] = logger.level
            logger.setLevel(level)
        for name in ("llmfleet", "kopf"):
            logging.getLogger(name).addHandler(handler)

    def _release_log(self) -> None:
        if self._log_handler is None:
            return
        for name in ("llmfleet", "kopf"):
            logging.getLogger(name).removeHandler(self._log_handler)
        for name, level in self._log_levels.items():
            logging.getLogger(name).setLevel(level)
        self._log_handler.close()
        self._log_handler = None
