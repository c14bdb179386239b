"""The documentation is built, and what it says to run still runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
RUNNABLE = re.compile(r"^<!-- runnable -->\n```(bash|python)\n(.*?)^```", re.M | re.S)


def runnable_blocks() -> list[tuple[str, str, str]]:
    return [(f"{page.relative_to(ROOT)}:{page.read_text(encoding='utf-8')[:m.start()].count(chr(10)) + 1}",
             m.group(1), m.group(2))
            for page in PAGES for m in RUNNABLE.finditer(page.read_text(encoding="utf-8"))]


def test_the_readme_starts_short_and_every_guide_is_in_the_site():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 200
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for guide in (ROOT / "docs" / "guides").glob("*.md"):
        assert f"guides/{guide.name}" in nav, guide.name
    assert len(runnable_blocks()) >= 2


@pytest.mark.slow
def test_the_site_builds_with_warnings_as_errors(tmp_path):
    pytest.importorskip("mkdocs")  # the docs extra; the test extra brings it
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    reference = (tmp_path / "site" / "reference" / "index.html").read_text(encoding="utf-8")
    import semhist

    missing = [name for name in semhist.__all__ if f'id="semhist.{name}"' not in reference]
    assert not missing  # every public name has its entry, from its docstring


@pytest.mark.slow
@pytest.mark.parametrize("where,language,code", runnable_blocks(), ids=lambda v: v if ":" in str(v) else "")
def test_a_runnable_block_runs(where, language, code, tmp_path, cache_dir):
    env = {**os.environ, "SEMHIST_DATA_DIR": str(tmp_path / "data"), "SEMHIST_CACHE_DIR": str(cache_dir)}
    command = ["bash", "-euo", "pipefail", "-c", code] if language == "bash" else [sys.executable, "-c", code]
    out = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"{where}\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"
