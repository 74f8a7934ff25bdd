"""The config.json the planner sizes a model by when neither spec.model.architecture nor the
built-in catalog does: read from the Hugging Face Hub (or the mirror of --hf-endpoint) with
spec.model.tokenSecretRef's token, cached per endpoint, model and revision for every resource of
the process, and its failures turned into what status and the Events say:

* the Hub out of reach, a server error, a timeout: UnavailableError (Planned=False,
  ModelConfigUnavailable), retried with the resource's backoff;
* 401/403: PlanError on spec.model.tokenSecretRef (ModelConfigDenied);
* 404: PlanError on spec.model.name or spec.model.revision (ModelConfigNotFound);
* not a JSON object: PlanError on spec.model.architecture (ModelConfigUnsupported, as the
  planner says for a config.json of a model it does not model).
"""

from __future__ import annotations

from kubernetes import client as k8s

from llmfleet.catalog.hub import (
    DEFAULT_ENDPOINT,
    Config,
    ConfigCache,
    ConfigSource,
    HubDeniedError,
    HubNotFoundError,
    HubUnavailableError,
    NotAConfigError,
    Reader,
    described,
    read_config,
)
from llmfleet.models.model_spec import ModelSpec
from llmfleet.planner import PlanError

from .errors import UnavailableError
from .secrets import SecretUnreadableError, read_token

UNAVAILABLE = "ModelConfigUnavailable"
DENIED = "ModelConfigDenied"
NOT_FOUND = "ModelConfigNotFound"
UNSUPPORTED = "ModelConfigUnsupported"
TOKEN_FIELD = "spec.model.tokenSecretRef"


class ModelConfigs:
    """config.json of the models the reconciles plan, from one endpoint, through one cache."""

    def __init__(
        self,
        api: k8s.ApiClient,
        endpoint: str = DEFAULT_ENDPOINT,
        cache: ConfigCache | None = None,
        read: Reader = read_config,
    ) -> None:
        self._core = k8s.CoreV1Api(api)
        self.source = ConfigSource(endpoint, cache, read)

    def for_model(self, model: ModelSpec, namespace: str) -> Config | None:
        """`model`'s config.json when the planner needs it, else None; raises PlanError or
        UnavailableError with what status should say when it cannot be read."""
        # Why the request went without a token, for a refusal's message; set by `token`.
        untokened: list[str] = []

        def token() -> str | None:
            value, why_not = self._token(model, namespace)
            if why_not:
                untokened.append(why_not)
            return value

        try:
            return self.source.for_model(model, token)
        except HubUnavailableError as e:
            raise UnavailableError(
                UNAVAILABLE,
                f"cannot read config.json of {described(model)} to size the model: {e}; "
                "trying again with backoff (or set spec.model.architecture)",
            ) from None
        except HubDeniedError as e:
            raise PlanError(TOKEN_FIELD, _denied(model, e, untokened), reason=DENIED) from None
        except HubNotFoundError as e:
            field = "spec.model.revision" if e.hub_code == "RevisionNotFound" else "spec.model.name"
            raise PlanError(
                field,
                f"no config.json of {described(model)} on the Hub: {e}; check "
                "spec.model.name and spec.model.revision, or set spec.model.architecture",
                reason=NOT_FOUND,
            ) from None
        except NotAConfigError as e:
            raise PlanError(
                "spec.model.architecture",
                f"config.json of {described(model)}: {e}; set spec.model.architecture",
                reason=UNSUPPORTED,
            ) from None

    def _token(self, model: ModelSpec, namespace: str) -> tuple[str | None, str]:
        """tokenSecretRef's token, or None and why not. A Secret the operator cannot read is no
        error: a public model needs no token, and the pods report a missing Secret themselves."""
        ref = model.token_secret_ref
        if ref is None:
            return None, ""
        try:
            return read_token(self._core, namespace, ref).value, ""
        except SecretUnreadableError as e:
            return None, str(e)


def _denied(model: ModelSpec, e: HubDeniedError, untokened: list[str]) -> str:
    ref = model.token_secret_ref
    head = f"the Hub refused config.json of {described(model)}: {e}"
    if ref is None:
        missing = " or does not exist" if e.hub_code == "RepoNotFound" else ""
        return (
            f"{head}; the model is gated or private{missing}: set spec.model.tokenSecretRef to "
            "a Secret holding a Hugging Face token with access to it, or set "
            "spec.model.architecture"
        )
    if untokened:
        return f"{head}; asked without a token because {untokened[-1]}"
    return (
        f"{head}; the token in Secret {ref.name} (key {ref.key}) was refused: give it access to "
        f"{model.name} on the Hub, or set spec.model.architecture"
    )
