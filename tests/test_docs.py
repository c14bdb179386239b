"""The documentation is built, and what it says still holds: its code runs, its transcripts are
what the command prints, its figures are in the benchmarks' output, its defaults are the code's."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
from dataclasses import fields
from pathlib import Path

import pytest

from .docfigures import source_numbers, unbacked

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
RUNNABLE = re.compile(r"^<!-- runnable -->\n```(bash|python)\n(.*?)^```", re.M | re.S)
# every fenced block with its marker line (or none), its indent and its language; a block in a
# list item is indented, and went unchecked when only blocks at the margin were read
FENCED = re.compile(r"(?:^[ \t]*(<!--.*?-->)\n)?^([ \t]*)```(\w*)\n(.*?)^\2```", re.M | re.S)


def runnable_blocks() -> list[tuple[str, str, str]]:
    return [(f"{page.relative_to(ROOT)}:{page.read_text(encoding='utf-8')[:m.start()].count(chr(10)) + 1}",
             m.group(1), m.group(2))
            for page in PAGES for m in RUNNABLE.finditer(page.read_text(encoding="utf-8"))]


def fenced_blocks() -> list[tuple[str, str | None, str, str]]:
    """(where, marker, language, body) of every fenced block of the README and docs/."""
    out = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in FENCED.finditer(text):
            where = f"{page.relative_to(ROOT)}:{text[:m.start()].count(chr(10)) + 1}"
            out.append((where, m.group(1), m.group(3), textwrap.dedent(m.group(4))))
    return out


def transcripts() -> list[tuple[str, str, list[str]]]:
    """Blocks that show a command and what it prints: `$ semhist ...` on the first line."""
    return [(where, body.splitlines()[0][2:], body.splitlines()[1:])
            for where, _, _, body in fenced_blocks() if body.startswith("$ semhist ")]


def test_the_readme_starts_short_and_every_guide_is_in_the_site():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 200
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for guide in (ROOT / "docs" / "guides").glob("*.md"):
        assert f"guides/{guide.name}" in nav, guide.name
    assert len(runnable_blocks()) >= 2


def test_every_block_of_code_says_whether_it_runs():
    """A block of Python or shell either runs in a test (`<!-- runnable -->`, the README's
    `<!-- ci:... -->` commands, a `$ semhist` transcript) or says why not (`<!-- not run: ... -->`:
    it starts a server, needs credentials, is a fragment of a larger program)."""
    unmarked = [where for where, marker, language, body in fenced_blocks()
                if (language in ("python", "bash") or body.startswith("$ "))
                and not body.startswith("$ semhist ")
                and not (marker and re.match(r"<!-- (runnable|ci:[\w-]+|not run: .+) -->", marker))]
    assert not unmarked, f"say whether these run: {unmarked}"


def test_the_readme_names_what_the_test_command_needs_before_it():
    """Every Debian package a test fails asking for (`apt-get install NAME`) is on the one
    `apt-get install` line the README gives before its test command, with how long it takes."""
    asked = {name for test in (ROOT / "tests").glob("*.py")
             for name in re.findall(r"apt-get install ([a-z][\w.-]*)", test.read_text(encoding="utf-8"))}
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    before = readme[:readme.index("<!-- ci:test-command -->")]
    lines = re.findall(r"`apt-get install ([^`]+)`", before.split("<!-- ci:main-command -->")[1])
    assert len(lines) == 1 and asked == set(lines[0].split()) == {"postgresql", "chromium", "haproxy"}, lines
    assert re.search(r"takes .{0,40} on 2 cores: .{0,120}? took \d[\d,]* s", before, re.S)  # and how it is known


def test_no_two_runnable_examples_store_different_texts_under_one_key():
    """A reader runs the examples one after another on one data directory: an example that adds
    another text under a thread and key an earlier one used would store nothing, silently."""
    python_add = re.compile(r"\.add\(\s*\"([^\"]+)\",\s*\"\w+\",\s*\"([^\"]*)\",\s*key=\"([^\"]+)\"")
    cli_add = re.compile(r"semhist add --thread (\S+) .*?\"([^\"]*)\" --key (\S+)")
    bodies = [body for _, _, body in runnable_blocks()]
    bodies.append((ROOT / "retrieval" / "__init__.py").read_text(encoding="utf-8"))  # the package docstring
    texts: dict[tuple[str, str], set[str]] = {}
    for body in bodies:
        for thread, text, key in [*python_add.findall(body), *cli_add.findall(body)]:
            texts.setdefault((thread, key), set()).add(text)
    assert len(texts) >= 3
    assert not {k: v for k, v in texts.items() if len(v) > 1}


def test_the_service_guide_shows_what_an_append_answers():
    pytest.importorskip("fastapi")  # the service extra; the test extra brings it
    from semhist.service.schemas import Added

    guide = (ROOT / "docs" / "guides" / "service.md").read_text(encoding="utf-8")
    shown = [json.loads(m) for m in re.findall(r"-> 201 (\{.*?\})\s*$", guide, re.M)]
    assert shown and all(set(answer) == set(Added.model_fields) for answer in shown), shown


def test_every_figure_quoted_from_a_benchmark_is_in_its_output():
    problems = [p for page in PAGES for p in unbacked(page, ROOT / "benchmarks")]
    assert not problems, "\n".join(problems)


def test_the_figure_check_catches_a_figure_no_output_holds(tmp_path):
    held = source_numbers(ROOT / "benchmarks", "results")
    said = next(f"{n:.3f}" for n in held if 0.5 < n < 1 and round(n, 3) == n)  # a figure results.md holds
    wrong = next(f for f in (f"{0.5 + k / 1000:.3f}" for k in range(500))
                 if not any(abs(float(f) - n) <= 0.0005 for n in held))  # one none of its outputs holds
    page = tmp_path / "page.md"
    page.write_text(f"`blocks` keeps {said} at 25% (`benchmarks/results.md`).\n\n"
                    f"| LoCoMo | {wrong} | [results](benchmarks/results.md) |\n", encoding="utf-8")
    assert [p.split(": ")[1] for p in unbacked(page, ROOT / "benchmarks")] == [f"{wrong} is in none of results's outputs"]


def test_every_documented_default_is_the_codes():
    """`SEMHIST_NAME` (`value`) or (number, on, off) in the docs is that setting's default."""
    from semhist import Settings
    from semhist.cli.options import _default

    settings = {f.name: f for f in fields(Settings)}
    said = re.compile(r"`SEMHIST_([A-Z_]+)`\s*\((`[^`]+`|\d[\d,.]*|on|off)[\s;:,)]")
    checked, wrong = 0, []
    for page in PAGES:
        for m in said.finditer(page.read_text(encoding="utf-8")):
            name, value = m.group(1).lower(), m.group(2).strip("`").replace(",", "")
            if name not in settings:
                continue
            code = str(_default(settings[name]))
            checked += 1
            if not (code == value or code.startswith(value + " ") or _same_number(code, value)):
                wrong.append(f"{page.name}: SEMHIST_{name.upper()} documented {value!r}, the code's default is {code!r}")
    assert not wrong, "\n".join(wrong)
    assert checked >= 40  # the configuration guide lists them all


def _same_number(a: str, b: str) -> bool:
    try:
        return float(a) == float(b)
    except ValueError:
        return False


def test_the_package_docstring_runs(tmp_path, cache_dir):
    """The first example a reader of the API reference sees."""
    code = "import doctest, sys, semhist; r = doctest.testmod(semhist); sys.exit(1 if r.failed or not r.attempted else 0)"
    env = {**os.environ, "SEMHIST_DATA_DIR": str(tmp_path / "data"), "SEMHIST_CACHE_DIR": str(cache_dir)}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]


def build_site(root: Path, site: Path) -> tuple[bool, str]:
    """`mkdocs build --strict`, and no warning in its log. Not `-q`: with it, a build that
    warned (and so failed) exited 0."""
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
                         cwd=root, capture_output=True, text=True, timeout=600)
    log = out.stdout + out.stderr
    return out.returncode == 0 and "WARNING" not in log, log


def test_a_site_that_warns_fails_the_build_check(tmp_path):
    pytest.importorskip("mkdocs")  # the docs extra; the test extra brings it
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# x\n\n[a page that is not there](missing.md)\n", encoding="utf-8")
    (tmp_path / "mkdocs.yml").write_text("site_name: x\nstrict: true\n", encoding="utf-8")
    ok, log = build_site(tmp_path, tmp_path / "site")
    assert not ok and "missing.md" in log


@pytest.mark.slow
def test_the_site_builds_with_warnings_as_errors(tmp_path):
    pytest.importorskip("mkdocs")
    ok, log = build_site(ROOT, tmp_path / "site")
    assert ok, log[-5000:]
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


@pytest.mark.slow
@pytest.mark.parametrize("where,command,shown", transcripts(), ids=lambda v: v if ":" in str(v) else "")
def test_a_transcript_is_what_the_command_prints(where, command, shown, tmp_path, cache_dir):
    """The lines shown are the command's, in order; a line `...` stands for lines left out."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "AZURE_OPENAI", "SEMHIST_"))}
    env.update({"SEMHIST_DATA_DIR": str(tmp_path / "data"), "SEMHIST_CACHE_DIR": str(cache_dir)})
    args = shlex.split(command)
    out = subprocess.run([sys.executable, "-m", "semhist.cli", *args[1:]], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    printed = [line.rstrip() for line in out.stdout.splitlines()]
    chunks: list[list[str]] = [[]]
    for line in shown:
        if line.strip() == "...":
            chunks.append([])
        else:
            chunks[-1].append(line.rstrip())
    at = 0
    for lines in filter(None, chunks):
        found = next((i for i in range(at, len(printed) - len(lines) + 1) if printed[i:i + len(lines)] == lines), None)
        assert found is not None, f"{where}: not printed, in this order:\n" + "\n".join(lines) + \
            f"\n--- printed:\n{out.stdout[-3000:]}"
        at = found + len(lines)
