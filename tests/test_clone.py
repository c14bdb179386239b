"""A clone anywhere: the fast tier does not need the project's shared/ folder beside it, and the
Japanese long-thread benchmark runs from the copy of its data the repository ships."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from .conftest import ROOT

pytestmark = pytest.mark.slow  # copies the repository, runs pytest twice and a benchmark in it


def _clone(tmp_path):
    clone = tmp_path / "elsewhere" / "semhist"  # no elsewhere/shared/data beside it
    shutil.copytree(ROOT, clone, ignore=shutil.ignore_patterns(".git", "build", "site", "__pycache__", "*.egg-info",
                                                                 ".venv*", "venv"))
    return clone


def test_a_clone_without_the_shared_data_collects_and_skips_what_needs_it(tmp_path):
    clone = _clone(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "SEMHIST_SHARED_DATA"}

    def pytest_in_clone(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=clone, env=env,
                              capture_output=True, text=True, timeout=900)

    collected = pytest_in_clone("--collect-only", "-q")  # the fast tier, as `python -m pytest` collects it
    assert collected.returncode == 0, collected.stdout[-3000:] + collected.stderr[-2000:]
    assert re.search(r"\d{3,} tests? collected", collected.stdout), collected.stdout[-500:]
    needing = pytest_in_clone("-m", "shared_data", "-rs", "-q")  # every test that reads the data, any tier
    summary = needing.stdout.strip().splitlines()[-1]
    assert needing.returncode == 0 and re.fullmatch(r"=*\s*\d+ skipped.*", summary), needing.stdout[-3000:]
    assert "the benchmark data is not here" in needing.stdout


def test_the_japanese_benchmark_runs_in_a_clone_and_a_missing_set_is_one_sentence(tmp_path, cache_dir):
    clone = _clone(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "AZURE_OPENAI_", "SEMHIST_"))}
    env.update({"SEMHIST_DATA_DIR": str(tmp_path / "data"), "SEMHIST_CACHE_DIR": str(cache_dir)})

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, *args], cwd=clone, env=env, capture_output=True, text=True, timeout=300)

    out = tmp_path / "out"  # the smallest run: one thread, four requests, one strategy and budget
    done = run("benchmarks/horizon.py", "--sets", "jmultiwoz", "--limit", "1", "--queries", "4", "--strategies",
               "blocks", "--budgets", "1000", "--cache-dir", str(cache_dir), "--out", str(out))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "reading the repository's copy, data/benchmarks/jmultiwoz_threads.jsonl.xz" in done.stderr
    japanese = json.loads((out / "horizon.json").read_text(encoding="utf-8"))["sets"]["jmultiwoz"]
    assert japanese["messages"] > 100 and japanese["queries"] == 4 and "blocks@1000" in japanese["results"]

    # LoCoMo is not shipped (CC BY-NC): a set that needs it says so and where it comes from
    for command in (["benchmarks/horizon.py", "--sets", "mixed", "--out", str(out)],
                    ["-m", "semhist.cli", "eval", "../shared/data/locomo.jsonl"]):
        missing = run(*command)
        assert missing.returncode != 0 and "Traceback" not in missing.stderr, missing.stderr[-3000:]
        said = missing.stderr.strip().splitlines()[-1]
        assert "locomo.jsonl" in said and ("snap-research/locomo" in said or "evaluation.md" in said), said
