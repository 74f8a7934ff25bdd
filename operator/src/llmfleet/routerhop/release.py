"""The router hop's own version, the tag of its image, which the router pod template of every
LLMDeployment with adapters names. It moves only when the hop does, never with the operator's
release: a tag that followed the operator would restart those routers at every upgrade.

The image is the operator's (images/operator/Dockerfile), published a second time under
HOP_REPOSITORY:HOP_VERSION (images/README.md). HOP_SOURCES_SHA256 is the hash of the hop's source
as tests/unit/test_routerhop_release.py reads it; that test fails when the source changes and the
hash here does not, so a change to the hop comes with a new version (and the chart's
`llmfleet.dev/router-hop-version` annotation with it)."""

from __future__ import annotations

HOP_REPOSITORY = "docker.io/llmfleet/router-hop"
HOP_VERSION = "2"
# Bump HOP_VERSION whenever this changes: under an old tag, a new hop is a lie.
HOP_SOURCES_SHA256 = "1dff5560f0f27bf1f22598b725197e34149b1518c4508fa45e0011a69f3cedda"
