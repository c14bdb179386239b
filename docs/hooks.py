"""MkDocs hooks: the README is the home page, and each `benchmarks/*.md` (written by its script)
is a page as it stands, so the site never carries a hand-copied figure."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"


def _api_tree() -> None:
    """The API reference reads the source statically, and `semhist` is installed from two folders
    (retrieval/ as semhist, indexers/ as semhist.indexers: pyproject.toml): build/docs-api/ holds
    that tree as links, for mkdocs.yml's `paths`. Made on import: mkdocstrings reads its paths
    before any hook event."""
    tree = ROOT / "build" / "docs-api" / "semhist"
    shutil.rmtree(tree.parent, ignore_errors=True)
    tree.mkdir(parents=True)
    for child in (ROOT / "retrieval").iterdir():
        if child.name != "__pycache__":
            (tree / child.name).symlink_to(child)
    (tree / "indexers").symlink_to(ROOT / "indexers")


_api_tree()


def on_files(files, config):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    # links from the repository's root become links inside the site; a link to a file the site
    # does not carry (a notebook) becomes its path in the repository, in words
    readme = re.sub(r"\]\(docs/", "](", readme)
    readme = re.sub(r"\[([^\]]+)\]\((?!https?:|#|[\w/-]+\.md\b|images/|samples/)([^)\s]+)\)",
                    r"\1 (`\2` in the repository)", readme)
    files.append(File.generated(config, "index.md", content=readme))
    rows = []
    for md in sorted(BENCHMARKS.glob("*.md")):
        text = md.read_text(encoding="utf-8")
        title = next((line.lstrip("# ").strip() for line in text.splitlines() if line.startswith("# ")), md.stem)
        files.append(File.generated(config, f"benchmarks/{md.name}", content=text))
        rows.append(f"| [{md.stem}]({md.name}) | {title} |")
    for image in sorted(BENCHMARKS.glob("*.png")):
        files.append(File.generated(config, f"benchmarks/{image.name}", abs_src_path=str(image)))
    index = ("# Benchmarks\n\nEach page is the file its script wrote (`python benchmarks/NAME.py`), "
             "with the command and the machine at its top.\n\n| page | what it measures |\n|---|---|\n"
             + "\n".join(rows) + "\n")
    files.append(File.generated(config, "benchmarks/index.md", content=index))
    return files
