"""status.adapters and the AdaptersReady condition, from what each engine holds after a sync."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from llmfleet.models.status import AdapterStatus, Condition
from llmfleet.reconcile.machinery.causes import Blocker
from llmfleet.reconcile.machinery.conditions import FALSE, TRUE, UNKNOWN, condition, find
from llmfleet.reconcile.machinery.references import API_KEY_FIELD, API_KEY_STEM
from llmfleet.reconcile.machinery.secrets import SecretUnreadableError
from llmfleet.render.names import ADAPTERS_GATE

from . import reasons as r
from .adapters import EngineOutcome, Wanted

# How a refusal reads in status when vLLM's own words do not name the field to change.
_HINTS = (
    ("max_lora_rank", "raise spec.engine.lora.maxRank"),
    ("No adapter found", "spec.adapters[].source names nothing the engine can read"),
    ("doesn't contain tensors", "no adapter_model.safetensors or .bin at the source"),
)


def _hinted(why: str) -> str:
    for needle, hint in _HINTS:
        if needle in why:
            return f"{why} ({hint})"
    return why


@dataclass(frozen=True)
class AdapterReport:
    """What status says of the adapters: one entry per wanted adapter, and the condition."""

    statuses: tuple[AdapterStatus, ...]
    condition: Condition


def adapter_report(
    wanted: Sequence[Wanted], outcomes: Sequence[EngineOutcome], generation: int
) -> AdapterReport:
    answering = [o for o in outcomes if o.complete or o.loaded or o.failed]
    total = len(answering)
    statuses = []
    failed: list[str] = []
    loading: list[str] = []
    for w in wanted:
        serving = sum(1 for o in answering if w.name in o.loaded)
        errors = sorted({o.failed[w.name] for o in answering if w.name in o.failed})
        error = _hinted(errors[0]) if errors else None
        statuses.append(AdapterStatus(name=w.name, engines=serving, of=total, error=error))
        if error is not None:
            failed.append(f"{w.name} on {total - serving} of {total} engines: {error}")
        elif serving < total:
            loading.append(f"{w.name} ({serving} of {total} engines)")
    g = generation
    if failed:
        others = len(wanted) - len(failed)
        cond = condition(
            r.ADAPTERS_READY,
            FALSE,
            r.ADAPTER_LOAD_FAILED,
            "; ".join(failed) + f"; the other {others} adapter(s) serve",
            g,
        )
    elif total == 0:
        cond = condition(
            r.ADAPTERS_READY,
            UNKNOWN,
            r.NO_ENGINE,
            f"no engine answers yet; its {len(wanted)} adapter(s) load when one does",
            g,
        )
    elif loading:
        cond = condition(r.ADAPTERS_READY, FALSE, r.ADAPTERS_LOADING, "; ".join(loading), g)
    else:
        cond = condition(
            r.ADAPTERS_READY,
            TRUE,
            r.ADAPTERS_LOADED,
            f"{len(wanted)} adapter(s) loaded on each of {total} engine(s)",
            g,
        )
    return AdapterReport(statuses=tuple(statuses), condition=cond)


def key_unreadable(
    wanted: Sequence[Wanted], problem: SecretUnreadableError, generation: int
) -> AdapterReport:
    """What status says when the engines want spec.engine.apiKeySecretRef's key and the operator
    cannot read it: no engine was called. The reasons of a missing Secret or key are those the
    kubelet's refusal of the same Secret is reported with."""
    message = (
        f"{API_KEY_FIELD}: {problem}; the operator sends this key to the engines' LoRA API, so "
        f"it loads and unloads no adapter, and new engines stay out of service (readiness gate "
        f"{ADAPTERS_GATE}), until it can read it"
    )
    error = f"not loaded: the operator cannot read {API_KEY_FIELD} (condition {r.ADAPTERS_READY})"
    return AdapterReport(
        statuses=tuple(AdapterStatus(name=w.name, engines=0, of=0, error=error) for w in wanted),
        condition=condition(
            r.ADAPTERS_READY, FALSE, API_KEY_STEM + problem.why, message, generation
        ),
    )


def newly_keyless(
    old: Sequence[Condition], new: Sequence[Condition], blockers: Sequence[Blocker]
) -> Condition | None:
    """AdaptersReady when it turns to saying that the key cannot be read (the moment for one
    Warning Event), else None: a resync while it stays so says nothing again, and a missing
    Secret that also keeps the pods from starting has its Event from `blockers` already."""
    before, after = find(old, r.ADAPTERS_READY), find(new, r.ADAPTERS_READY)
    if after is None or not after.reason.startswith(API_KEY_STEM):
        return None
    if any(b.field == API_KEY_FIELD for b in blockers):
        return None
    return None if before is not None and before.message == after.message else after
