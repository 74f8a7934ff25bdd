"""Server-side apply bodies carry any text the API server would store
(llmfleet.reconcile.machinery.apply): JSON that a YAML parser reads back to the same object,
whatever the characters."""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from llmfleet.reconcile.machinery.apply import apply_body

TEXTS = {
    "emoji-beyond-the-bmp": "chat-😀",
    "cyrillic-and-cjk": "модель-模型",
    "c1-control": "a\x98b\x81c",
    "delete-char": "a\x7fb",
    "c0-controls-and-newline": "a\x1eb\nc\td",
    "line-separators-yaml-would-fold": "a\u2028b\u2029c\x85d",
    "byte-order-mark": "\ufeffa",
    "quotes-and-backslashes": 'say "hi" \\ bye',
}


@pytest.mark.parametrize("text", TEXTS.values(), ids=TEXTS.keys())
def test_a_yaml_parser_reads_back_exactly_what_was_rendered(text: str) -> None:
    obj = {"metadata": {"name": "x"}, "spec": {"args": ["--served-model-name", text]}}
    body = apply_body(obj)
    body.decode("utf-8")  # valid UTF-8: no lone surrogates
    assert yaml.safe_load(body) == obj
    assert json.loads(body) == obj


@given(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",))))
def test_any_text_survives_the_yaml_parser(text: str) -> None:
    obj = {"value": text}
    assert yaml.safe_load(apply_body(obj)) == obj
