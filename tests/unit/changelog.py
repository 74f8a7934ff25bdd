"""CHANGELOG.md as the release tests read it: its releases and the line each must carry about
engine pods."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RELEASE_HEADING = re.compile(r"^## \[(?P<version>[^\]]+)\] - \d{4}-\d{2}-\d{2}$", re.MULTILINE)
# `Engine pods: not restarted`, or `Engine pods: restarted (<why>) in <example>.yaml, ...`
# naming every example under examples/ whose engine pod templates the release changes
# (tests/unit/test_upgrade_pod_templates.py; docs/operator.md, "Upgrades").
ENGINE_LINE = re.compile(
    r"^Engine pods: (?:not restarted"
    r"|restarted \((?P<why>.+)\) in (?P<examples>[\w.-]+\.yaml(?:, [\w.-]+\.yaml)*))$",
    re.MULTILINE,
)


def changelog_releases() -> list[tuple[str, str]]:
    """(version, section text) of each release in CHANGELOG.md, newest first."""
    text = (REPO / "CHANGELOG.md").read_text()
    headings = list(RELEASE_HEADING.finditer(text))
    ends = [h.start() for h in headings[1:]] + [len(text)]
    return [(h["version"], text[h.end() : end]) for h, end in zip(headings, ends, strict=True)]
