"""extraArgs that make the endpoint less safe are named, with what each opens up
(llmfleet.planner.engine_args.weakening_args)."""

from __future__ import annotations

import pytest

from llmfleet.planner.engine_args import weakening_args

CASES = {
    "remote-code": (["--trust-remote-code"], ["--trust-remote-code"]),
    "local-media-with-value": (
        ["--allowed-local-media-path", "/data"],
        ["--allowed-local-media-path"],
    ),
    "api-key-as-equals": (["--api-key=s3cret"], ["--api-key"]),
    "underscore-spelling": (["--trust_remote_code"], ["--trust-remote-code"]),
    "cors-any-origin-with-credentials": (
        ["--allowed-origins", '["*"]', "--allow-credentials"],
        ["--allowed-origins", "--allow-credentials"],
    ),
    "repeated-once": (["--trust-remote-code", "--trust-remote-code"], ["--trust-remote-code"]),
    "harmless": (["--enable-prefix-caching", "--max-num-seqs", "8"], []),
}


@pytest.mark.parametrize(("args", "flags"), CASES.values(), ids=CASES.keys())
def test_flags_that_weaken_the_endpoint_are_named_with_what_they_open(
    args: list[str], flags: list[str]
) -> None:
    found = weakening_args(args)
    assert [line.split(" ", 1)[0] for line in found] == flags
    assert all(len(line.split(" ", 1)[1]) > 20 for line in found)  # says what it opens up
    assert "s3cret" not in " ".join(found)  # never repeats a secret
