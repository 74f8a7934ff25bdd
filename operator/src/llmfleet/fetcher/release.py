"""The adapter fetcher's own version, the tag of its image, which every single-node LoRA engine
pod template names. It moves only when the fetcher does, never with the operator's release: a
tag that followed the operator would restart every LoRA engine at every upgrade.

The image is the operator's (images/operator/Dockerfile), published a second time under
FETCHER_REPOSITORY:FETCHER_VERSION, once per fetcher version (images/README.md).
FETCHER_SOURCES_SHA256 is the hash of the fetcher's source as
tests/unit/test_fetcher_release.py reads it; that test fails when the source changes and the
hash here does not, so a change to the fetcher comes with a new version (and the chart's
`llmfleet.dev/adapter-fetcher-version` annotation with it)."""

from __future__ import annotations

FETCHER_REPOSITORY = "docker.io/llmfleet/adapter-fetcher"
FETCHER_VERSION = "1"
# Bump FETCHER_VERSION whenever this changes: under an old tag, a new fetcher is a lie.
FETCHER_SOURCES_SHA256 = "21c0f0263a253804364feaa193e11ba27f709549c515910deaebfc0f3540a536"
