"""What a setting's flag or variable takes (llmfleet/settings.py): each parser turns the text
into the setting's value, or raises argparse.ArgumentTypeError saying what it takes, which
`llmfleet run` shows naming the flag or the variable."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llmfleet.models.network_policy import EngineNetworkPolicy, parse_engine_network_policy
from llmfleet.models.refs import OBJECT_NAME_PATTERN

# Where Kubernetes mounts the pod's own namespace beside its ServiceAccount token.
NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
# What the variable of an on/off setting may say.
TRUE, FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def priority_class(text: str) -> str:
    """A PriorityClass name (a DNS subdomain) or nothing."""
    if text and (len(text) > 253 or not re.fullmatch(OBJECT_NAME_PATTERN, text)):
        raise argparse.ArgumentTypeError(
            f"not a PriorityClass name: {text!r} (lower-case letters, digits, '-' and '.')"
        )
    return text


def http_url(example: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        """An http(s) URL or nothing."""
        if text and not re.fullmatch(r"https?://[^\s/]+(/\S*)?", text):
            raise argparse.ArgumentTypeError(
                f"not an http:// or https:// URL: {text!r} (e.g. {example})"
            )
        return text.rstrip("/")

    return parse


def or_default(parse: Callable[[str], str]) -> Callable[[str], str | None]:
    """Empty means the default, as if not given."""
    return lambda text: parse(text) or None


def network_policy(text: str) -> EngineNetworkPolicy | None:
    try:
        return parse_engine_network_policy(text)
    except (ValueError, TypeError) as e:  # pydantic's ValidationError is a ValueError
        raise argparse.ArgumentTypeError(
            'not a valid engine NetworkPolicy (JSON {"scrapers": [...], "operator": [...], '
            f'"clients": [...]}}, each a list of NetworkPolicyPeers): {e}'
        ) from None


def number(kind: type[int] | type[float]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            return kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None

    return parse


def log_level(text: str) -> str:
    if text.upper() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(LOG_LEVELS)}")
    return text.upper()


def in_cluster_namespace() -> str:
    try:
        return NAMESPACE_FILE.read_text().strip()
    except OSError:
        return ""


def switch(text: str) -> bool:
    """On or off, as the variable of a --x/--no-x setting says."""
    if text.lower() not in TRUE + FALSE:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(TRUE + FALSE)}")
    return text.lower() in TRUE
