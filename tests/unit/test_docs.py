"""The documentation: the MkDocs site builds strictly, every page is in its nav, and the README stays short
and links only to pages that exist."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
README = REPO / "README.md"
README_MAX_LINES = 150


def nav_pages() -> set[str]:
    """The pages mkdocs.yml's nav lists (read as text: its `- Title: page.md` lines)."""
    text = (REPO / "mkdocs.yml").read_text()
    return set(re.findall(r"^\s*- (?:\"[^\"]*\"|[^:\n]+): (\S+\.md)\s*$", text, flags=re.M))


def test_the_site_builds_strictly(tmp_path: Path):
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = result.stdout + result.stderr
    print(output)
    assert result.returncode == 0, output
    assert (tmp_path / "site" / "index.html").is_file()


def test_the_readme_is_short():
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines: move detail into docs/"


def test_every_page_is_in_the_nav():
    pages = {path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md")}
    listed = nav_pages()
    assert pages - listed == set(), "pages missing from mkdocs.yml's nav"
    assert listed - pages == set(), "nav entries with no page in docs/"


def test_every_readme_link_into_docs_exists():
    links = re.findall(r"\]\((docs/[^)#\s]*)", README.read_text())
    assert links, "the README links into docs/"
    missing = [link for link in links if not (REPO / link).exists()]
    assert missing == []
