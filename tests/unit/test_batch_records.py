"""Input lines (OpenAI Batch API requests) and output records (OpenAI batch output format)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llmfleet.batch.records import (
    Choice,
    Completion,
    LineError,
    Request,
    encode,
    error_record,
    line_of_record,
    parse_line,
    sampling_kwargs,
    success_record,
)

CHAT = {"messages": [{"role": "user", "content": "hi"}]}


def line(**fields: Any) -> str:
    return json.dumps({"custom_id": "a", "method": "POST", "url": "/v1/completions", **fields})


VALID = {
    "chat": (line(url="/v1/chat/completions", body=CHAT), "/v1/chat/completions"),
    "completion-text": (line(body={"prompt": "once"}), "/v1/completions"),
    "completion-one-item-list": (line(body={"prompt": ["once"]}), "/v1/completions"),
    "completion-token-ids": (line(body={"prompt": [1, 2, 3]}), "/v1/completions"),
    "method-omitted": (
        json.dumps({"custom_id": "a", "url": "/v1/completions", "body": {"prompt": "x"}}),
        "/v1/completions",
    ),
}


@pytest.mark.parametrize(("raw", "url"), VALID.values(), ids=VALID.keys())
def test_a_valid_line_becomes_a_request(raw: str, url: str) -> None:
    parsed = parse_line(4, raw)
    assert isinstance(parsed, Request)
    assert (parsed.line, parsed.custom_id, parsed.url) == (4, "a", url)


INVALID = {
    "not-json": ("{oops", "invalid_json", "line 9: not valid JSON"),
    "not-an-object": ("[1, 2]", "invalid_request", "line 9: not a JSON object"),
    "no-custom-id": (
        json.dumps({"url": "/v1/completions", "body": {"prompt": "x"}}),
        "invalid_request",
        "line 9: custom_id must be a non-empty string",
    ),
    "get-method": (line(method="GET", body={"prompt": "x"}), "invalid_request", "method must"),
    "unknown-url": (line(url="/v1/embeddings", body={}), "invalid_request", "unknown url"),
    "no-body": (line(), "invalid_request", "line 9: body is missing or not an object"),
    "chat-without-messages": (
        line(url="/v1/chat/completions", body={"messages": []}),
        "invalid_request",
        "body.messages must be a non-empty list",
    ),
    "chat-message-without-role": (
        line(url="/v1/chat/completions", body={"messages": [{"content": "x"}]}),
        "invalid_request",
        "must be an object with a role",
    ),
    "several-prompts": (
        line(body={"prompt": ["a", "b"]}),
        "invalid_request",
        "one prompt per line",
    ),
}


@pytest.mark.parametrize(("raw", "code", "message"), INVALID.values(), ids=INVALID.keys())
def test_a_bad_line_becomes_an_error_naming_its_line(raw: str, code: str, message: str) -> None:
    parsed = parse_line(9, raw)
    assert isinstance(parsed, LineError)
    assert parsed.code == code
    assert parsed.message.startswith("line 9: ")
    assert message in parsed.message


def request(url: str = "/v1/completions", **body: Any) -> Request:
    body = {**CHAT, **body} if url == "/v1/chat/completions" else {"prompt": "x", **body}
    return Request(line=1, custom_id="a", url=url, body=body)  # type: ignore[arg-type]


SAMPLING = {
    "body-wins-over-defaults": (
        request(max_tokens=5, temperature=0.0),
        {"max_tokens": 50, "temperature": 1.0, "top_p": 0.9},
        {"max_tokens": 5, "temperature": 0.0, "top_p": 0.9},
    ),
    "completions-default-to-16-tokens": (request(), {}, {"max_tokens": 16}),
    "chat-has-no-default-length": (request("/v1/chat/completions"), {}, {}),
    "max-completion-tokens-is-max-tokens": (
        request("/v1/chat/completions", max_completion_tokens=7),
        {},
        {"max_tokens": 7},
    ),
    "a-stop-string-becomes-a-list": (request(stop="\n"), {}, {"stop": ["\n"], "max_tokens": 16}),
    "unrelated-fields-are-ignored": (
        request(model="gpt-4o", stream=False, ignore_eos=True),
        {},
        {"ignore_eos": True, "max_tokens": 16},
    ),
}


@pytest.mark.parametrize(("req", "defaults", "expected"), SAMPLING.values(), ids=SAMPLING.keys())
def test_sampling_parameters_come_from_the_body_else_the_defaults(
    req: Request, defaults: dict[str, Any], expected: dict[str, Any]
) -> None:
    assert sampling_kwargs(req, defaults) == expected


def test_a_chat_answer_has_the_openai_batch_output_shape_with_usage() -> None:
    completion = Completion(
        prompt_tokens=11, choices=(Choice("hello", "stop"),), completion_tokens=2, created=7
    )
    record = success_record(request("/v1/chat/completions"), completion, "tiny")
    assert record == {
        "id": "batch_req_1",
        "custom_id": "a",
        "response": {
            "status_code": 200,
            "request_id": "req-1",
            "body": {
                "id": "chatcmpl-req-1",
                "object": "chat.completion",
                "created": 7,
                "model": "tiny",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "hello"},
                        "logprobs": None,
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 11, "completion_tokens": 2, "total_tokens": 13},
            },
        },
        "error": None,
    }


def test_a_completion_answer_is_a_text_completion_with_a_choice_per_n() -> None:
    completion = Completion(3, (Choice("a", "length"), Choice("b", "stop")), 4, created=1)
    body = success_record(request(), completion, "m")["response"]["body"]
    assert body["object"] == "text_completion"
    assert [(c["index"], c["text"], c["finish_reason"]) for c in body["choices"]] == [
        (0, "a", "length"),
        (1, "b", "stop"),
    ]


def test_an_error_record_names_the_line_and_has_no_response() -> None:
    record = error_record(LineError(5, None, "invalid_json", "line 5: not valid JSON"))
    assert record == {
        "id": "batch_req_5",
        "custom_id": None,
        "response": None,
        "error": {"code": "invalid_json", "message": "line 5: not valid JSON", "line": 5},
    }


def test_a_record_is_one_line_and_its_id_gives_back_the_input_line() -> None:
    encoded = encode(error_record(LineError(12, "x", "c", "line 12: m\nwith a newline")))
    assert encoded.endswith(b"\n")
    assert encoded.count(b"\n") == 1
    assert line_of_record(json.loads(encoded)) == 12
    assert line_of_record({"id": "batch_req_x"}) is None
    assert line_of_record({}) is None
