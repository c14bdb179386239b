"""A clone anywhere: the fast tier does not need the project's shared/ folder beside it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from .conftest import ROOT

pytestmark = pytest.mark.slow  # copies the repository and runs pytest twice in it


def test_a_clone_without_the_shared_data_collects_and_skips_what_needs_it(tmp_path):
    clone = tmp_path / "elsewhere" / "semhist"  # no elsewhere/shared/data beside it
    shutil.copytree(ROOT, clone, ignore=shutil.ignore_patterns(".git", "build", "site", "__pycache__", "*.egg-info",
                                                                 ".venv*", "venv"))
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
