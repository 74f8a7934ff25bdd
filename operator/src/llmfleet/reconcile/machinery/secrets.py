"""Tokens the operator sends itself as `Authorization: Bearer`, read from the Secrets a spec names:
spec.model.tokenSecretRef's to the Hub, spec.engine.apiKeySecretRef's to the engines' LoRA API.

Read by name when a reconcile needs one (the chart grants `get` only, with rbac.readSecrets, and
no list or watch), so a changed Secret is used from the next reconcile. A token's value never
reaches a log, an Event, status or an exception: the Secret is read without the kubernetes
client's preloading (which logs every response body at DEBUG), a failure names the Secret and
its key only, and BearerToken's repr hides the value.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Literal

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from llmfleet.models.refs import SecretKeyRef

# The chart value that grants the operator `get` on Secrets.
READ_SECRETS_VALUE = "rbac.readSecrets"
TIMEOUT_SECONDS = 10
# What an HTTP header carries: printable ASCII. A line break would make the standard library
# refuse the header with the whole value in its message.
_HEADER_SAFE = frozenset(map(chr, range(0x20, 0x7F)))

Why = Literal["Forbidden", "NotFound", "KeyNotFound", "NotText"]


class SecretUnreadableError(Exception):
    """Why a token could not be read, naming the Secret and its key, never the value."""

    def __init__(self, why: Why, message: str) -> None:
        super().__init__(message)
        self.why: Why = why


@dataclass(frozen=True)
class BearerToken:
    value: str = field(repr=False)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.value}"}


def read_token(core: k8s.CoreV1Api, namespace: str, ref: SecretKeyRef) -> BearerToken:
    """`ref`'s value, without surrounding whitespace; raises SecretUnreadableError, or the
    ApiException of any other failure (the reconcile is then retried)."""
    try:
        response = core.read_namespaced_secret(
            ref.name, namespace, _preload_content=False, _request_timeout=TIMEOUT_SECONDS
        )
    except ApiException as e:
        if e.status == 403:
            raise SecretUnreadableError(
                "Forbidden",
                f"the operator may not read Secret {ref.name} (enable the chart value "
                f"{READ_SECRETS_VALUE})",
            ) from None
        if e.status == 404:
            raise SecretUnreadableError("NotFound", f'secret "{ref.name}" not found') from None
        raise
    try:
        data = json.loads(response.data).get("data") or {}
    finally:
        response.release_conn()
    encoded = data.get(ref.key)
    if encoded is None:
        raise SecretUnreadableError("KeyNotFound", f"Secret {ref.name} has no key {ref.key}")
    try:
        value = base64.b64decode(encoded).decode().strip()
    except (binascii.Error, UnicodeDecodeError):
        value = ""
    if not value or not set(value) <= _HEADER_SAFE:
        raise SecretUnreadableError(
            "NotText",
            f"Secret {ref.name} key {ref.key} is empty or not one line of printable ASCII text, "
            "which an HTTP header can carry",
        )
    return BearerToken(value)
