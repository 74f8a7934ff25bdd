"""Every relative link in the project's Markdown leads somewhere: the file (or folder) exists and,
where the link names an anchor in a Markdown file, that file has such a heading (GitHub's
slugs). Links to other sites are not followed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted(
    {
        *REPO.glob("*.md"),
        *REPO.glob("docs/*.md"),
        REPO / "bench/README.md",
        REPO / "dev/README.md",
        REPO / "charts/llmfleet/README.md",
        *REPO.glob("images/**/README.md"),
    }
)
FENCE = re.compile(r"^ {0,3}(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1", re.S)
# [text](target "title") and ![alt](target); the text may hold one level of brackets.
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def prose(text: str) -> str:
    """The text outside fenced code blocks, with code spans blanked (links there are examples)."""
    kept, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            kept.append(line)
    return CODE_SPAN.sub(lambda m: "x" * len(m[0]), "\n".join(kept))


def links(path: Path) -> list[str]:
    text = prose(path.read_text())
    return [t for t in INLINE.findall(text) + REFERENCE.findall(text) if not SCHEME.match(t)]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text without Markdown, lowercased, punctuation dropped
    (hyphens and underscores kept), spaces turned into hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"[`*]", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    fenced = False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        heading = None if fenced else HEADING.match(line)
        if heading:
            base = slug(heading[1])
            name, n = base, 0
            while name in found:  # GitHub numbers repeated headings: name, name-1, ...
                n += 1
                name = f"{base}-{n}"
            found.add(name)
        found |= set(HTML_ANCHOR.findall(line))
    return found


def broken(doc: Path) -> list[str]:
    out = []
    for target in links(doc):
        where, _, anchor = target.partition("#")
        dest = (doc.parent / where).resolve() if where else doc
        if not dest.exists():
            out.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            shown = dest.relative_to(REPO) if dest.is_relative_to(REPO) else dest.name
            out.append(f"{target}: no heading #{anchor} in {shown}")
    return out


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(REPO)) for d in DOCS])
def test_every_relative_link_leads_somewhere(doc: Path) -> None:
    assert broken(doc) == []


def test_the_docs_the_readme_names_are_checked() -> None:
    named = {"README.md", "docs/planner.md", "docs/operator.md", "docs/architecture.md"}
    named |= {"bench/README.md", "dev/README.md", "charts/llmfleet/README.md"}
    assert named <= {str(d.relative_to(REPO)) for d in DOCS}


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("[a](docs/x.md) and ![b](p.png)", ["docs/x.md", "p.png"]),
        ("[`code`](x.md#a-b) [c [d]](y.md)", ["x.md#a-b", "y.md"]),
        ("[a](https://example.com) [b](mailto:a@b.c)", []),
        ("`[not](a-link.md)` ok", []),
        ("```\n[not](in-a-fence.md)\n```\n[yes](z.md)", ["z.md"]),
        ("[ref]: other.md\n[site]: https://example.com", ["other.md"]),
        ("[across\nlines](w.md)", ["w.md"]),
    ],
)
def test_links_are_found_where_markdown_has_them(
    tmp_path: Path, text: str, found: list[str]
) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(text)
    assert sorted(links(doc)) == sorted(found)


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Shared prefixes: `cache_aware` won", "shared-prefixes-cache_aware-won"),
        ("PlanVerified: the plan", "planverified-the-plan"),
        ("`make demo`, step by step", "make-demo-step-by-step"),
        ("The signal is averaged over 30 s", "the-signal-is-averaged-over-30-s"),
        ("Offline vs. online", "offline-vs-online"),
        ("See [the chart](x.md) **now**", "see-the-chart-now"),
    ],
)
def test_anchors_are_githubs(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


def test_a_missing_file_and_a_missing_heading_are_caught(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# Title\n## Part one\n## Part one\n")
    doc = tmp_path / "doc.md"
    doc.write_text("[a](there.md#part-one-1) [b](gone.md) [c](there.md#part-two) [d](#title)")
    assert broken(doc) == [
        "gone.md: no such file",
        "there.md#part-two: no heading #part-two in there.md",
        "#title: no heading #title in doc.md",
    ]
