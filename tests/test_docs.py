"""The docs the code cites ship with it (issue 15.5): every ``docs/format.md §N`` (and
design/durability) a docstring or comment cites exists as a section of that page, and no
citation points at the team's reference files outside the repository."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CITE = re.compile(r"docs/(format|design|durability)\.md(?: §(\d+(?:\.\d+)*))?")


def tracked_sources() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True)
    return [REPO / f for f in out.stdout.split()
            if f.endswith((".py", ".pyx", ".pxd", ".pyi", ".h", ".c")) and not f.startswith("docs/")]


def sections(page: Path) -> set[str]:
    return set(re.findall(r"^#+ §(\d+(?:\.\d+)*) ", page.read_text(), re.M))


def test_every_cited_section_exists():
    cited: dict[tuple[str, str | None], list[str]] = {}
    for path in tracked_sources():
        for page, section in CITE.findall(path.read_text()):
            cited.setdefault((page, section or None), []).append(path.name)
    assert len(cited) > 30, "the code cites the docs"
    missing = []
    for (page, section), where in sorted(cited.items(), key=str):
        doc = REPO / "docs" / f"{page}.md"
        if not doc.exists():
            missing.append(f"docs/{page}.md (cited in {sorted(set(where))})")
        elif section is not None and section not in sections(doc):
            missing.append(f"docs/{page}.md §{section} (cited in {sorted(set(where))})")
    assert not missing, missing


def test_no_citation_of_files_outside_the_repository():
    stale = [f"{p.relative_to(REPO)}" for p in tracked_sources()
             if re.search(r"(?<!docs/)\b(FORMAT|DESIGN)\.md", p.read_text())]
    assert not stale, stale


def test_the_docs_pages_exist_and_the_readme_points_at_them():
    readme = (REPO / "README.md").read_text()
    for page in ("format", "design", "durability"):
        assert (REPO / "docs" / f"{page}.md").stat().st_size > 2000
        assert f"docs/{page}.md" in readme
