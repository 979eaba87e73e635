"""The README is the way in and docs/ the manual: the README stays a short read, every docs file is
reachable from its index, and no relative link in either leads nowhere (a file, or a heading in it)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]

INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s+<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
FENCE = re.compile(r"^\s{0,3}(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def prose_lines(path: Path) -> list[str]:
    """The file's lines outside fenced code blocks (a link or a heading inside a fence is code)."""
    lines, fenced = [], None
    for line in path.read_text(encoding="utf-8").splitlines():
        fence = FENCE.match(line)
        if fence and (fenced is None or fence.group(1) == fenced):
            fenced = None if fenced else fence.group(1)
            continue
        if fenced is None:
            lines.append(line)
    return lines


def links(path: Path) -> list[str]:
    found = []
    for line in prose_lines(path):
        line = CODE_SPAN.sub("", line)
        found += INLINE.findall(line)
        reference = REFERENCE.match(line)
        if reference:
            found.append(reference.group(1))
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, code and link markup dropped, punctuation removed,
    spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    result = set()
    for line in prose_lines(path):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        result.add(base if n == 0 else f"{base}-{n}")
    return result


def relative_links() -> list[tuple[Path, str]]:
    return [(page, target) for page in PAGES for target in links(page) if not SCHEME.match(target)]


def test_the_readme_is_a_short_read() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 250


def test_the_pages_have_relative_links_to_check() -> None:
    # The link finder must see the README's index, or every check below passes on nothing.
    assert sum(1 for page, _ in relative_links() if page == README) >= len(DOCS)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_at_an_existing_file_and_heading(page: Path) -> None:
    broken = []
    for target in links(page):
        if SCHEME.match(target):
            continue
        if target.startswith("/"):
            broken.append(f"{target}: absolute path, not relative")
            continue
        file_part, _, fragment = target.partition("#")
        dest = (page.parent / unquote(file_part)).resolve() if file_part else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif fragment and dest.suffix == ".md" and unquote(fragment).lower() not in anchors(dest):
            broken.append(f"{target}: no heading #{fragment} in {dest.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_readme_indexes_every_docs_file() -> None:
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in links(README) if t.startswith("docs/")}
    missing = [d.name for d in DOCS if d.resolve() not in linked]
    assert not missing, f"README's docs index lacks: {missing}"


def test_the_quick_start_is_the_two_commands_ci_runs() -> None:
    text = README.read_text(encoding="utf-8")
    quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = quick.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]
    assert commands == ["./run demo", "./run test"]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"^stage test \./run test\b", ci, re.M), "CI no longer runs the README's test command"


def test_the_link_checker_catches_a_broken_link_and_anchor(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Title\n\n## A `code` heading: yes\n", encoding="utf-8")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md#a-code-heading-yes) [gone](c.md) `[not a link](x.md)`\n"
                    "```\n[in a fence](y.md)\n```\n[anchor](a.md#nope)\n", encoding="utf-8")
    assert links(page) == ["a.md#a-code-heading-yes", "c.md", "a.md#nope"]
    assert anchors(tmp_path / "a.md") == {"title", "a-code-heading-yes"}
