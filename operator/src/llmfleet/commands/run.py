"""`llmfleet run`: start the operator. Its flags are generated from the settings' one definition
(llmfleet/settings.py)."""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Mapping

from llmfleet.settings import OperatorSettings, from_environment, settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("run", help="run the operator (watches LLMDeployments and reconciles them)")
    for name, how, default in settings():
        text = f"{how.meaning} (env {how.env}; default: {how.show(default)})"
        kwargs: dict[str, object] = {
            "dest": name,
            # None: not given, so the variable or the default applies (settings_from_args).
            "default": None,
            "help": text.replace("%", "%%"),
        }
        if how.switch:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["type"] = how.parse
            if how.repeatable:
                kwargs["action"] = "append"
            if how.choices:
                kwargs["choices"] = how.choices
        p.add_argument(*how.flags, **kwargs)  # type: ignore[arg-type]
    p.set_defaults(func=_run)


def settings_from_args(
    args: argparse.Namespace, environ: Mapping[str, str] = os.environ
) -> OperatorSettings:
    """The settings `llmfleet run` was given: each flag, else its variable, else its default."""
    given: dict[str, object] = {}
    for name, how, _ in settings():
        value = getattr(args, name)
        if how.repeatable and value is not None:
            value = tuple(value)
        if value is None:
            value = from_environment(how, environ)
        if value is None and how.fallback is not None:
            value = how.fallback()
        if value is not None:
            given[name] = value
    return OperatorSettings(**given)  # type: ignore[arg-type]


def _run(args: argparse.Namespace) -> int:
    cfg = settings_from_args(args)
    logging.basicConfig(
        level=cfg.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if cfg.log_level != "DEBUG":
        # kopf logs every handler success at INFO: one line per pod event of every fleet.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    if cfg.kubeconfig:
        # The kubernetes client reads KUBECONFIG once, when first imported; kopf's login uses it.
        os.environ["KUBECONFIG"] = cfg.kubeconfig
    from llmfleet.operator_app import run_operator

    run_operator(cfg)
    return 0
