"""Shared fixtures. Everything is real: the USE-m3 embedder, FAISS, SQLite, the local LLM."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from semhist.indexers.loader import load
from semhist.kernel.model import Message
from semhist.kernel.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "data" / "samples"
# The benchmark data beside the clone (../shared/data; SEMHIST_SHARED_DATA names another place).
# Tests that read it carry @pytest.mark.shared_data and skip, saying why, where it is missing.
SHARED_DATA = Path(os.environ.get("SEMHIST_SHARED_DATA") or ROOT.parent / "shared" / "data")
RAMEN_REQUEST = "この履歴からラーメンの話題について要約してください。"
RAMEN_TURNS = set(range(2, 22)) | set(range(64, 68))

# The tiers a plain `pytest` leaves out, so that a person's run takes minutes; CI passes
# --all-tiers (the README's test command), and an explicit -m chooses for itself.
SLOW_TIERS = ("slow", "llm", "notebook", "st")


def pytest_addoption(parser):
    parser.addoption("--all-tiers", action="store_true",
                     help=f"run every tier: also the {', '.join(SLOW_TIERS)} tests (CI does)")


def pytest_collection_modifyitems(config, items):
    if not SHARED_DATA.is_dir():
        missing = pytest.mark.skip(reason=f"the benchmark data is not here: {SHARED_DATA} (a clone beside the "
                                          "project's shared/ folder has it, or set SEMHIST_SHARED_DATA)")
        for item in items:
            if item.get_closest_marker("shared_data"):
                item.add_marker(missing)
    if config.getoption("--all-tiers") or config.getoption("markexpr"):
        return
    kept, left_out = [], []
    for item in items:
        (left_out if any(item.get_closest_marker(m) for m in SLOW_TIERS) else kept).append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept


# No test may reach an LLM configured in the developer's shell by accident.
for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "AZURE_OPENAI_ENDPOINT", "AZURE_OPENAI_API_KEY"):
    os.environ.pop(var, None)


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("semhist-cache")


@pytest.fixture(scope="session")
def settings(cache_dir) -> Settings:
    return Settings.load(env={}, cache_dir=cache_dir)


@pytest.fixture(scope="session")
def engine(settings):
    from semhist import Engine

    return Engine(settings, llm=None)


@pytest.fixture(scope="session")
def ramen():
    return load(SAMPLES / "ramen.json").only()


@pytest.fixture(scope="session")
def english():
    return load(SAMPLES / "english.json").only()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def llm_server(tmp_path_factory):
    """The real local model behind llama.cpp's OpenAI-compatible server on 127.0.0.1.

    Fails (never skips) when the model parts are missing: they come from the package
    registry, and their disappearance must be noticed.
    """
    from semhist.kernel.errors import SemhistError
    from semhist.llm.server import model_path, wait_until_ready

    model_cache = Settings.load().cache_dir  # the user's cache: the 1.1 GB model is built once
    try:
        model_path(model_cache)
    except SemhistError as exc:
        pytest.fail(f"local LLM unavailable: {exc}", pytrace=False)
    port = _free_port()
    log_path = tmp_path_factory.mktemp("llm") / "server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "semhist.cli", "llm-server", "--port", str(port),
             "--threads", str(min(2, os.cpu_count() or 1)), "--cache-dir", str(model_cache)],
            stdout=log, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_until_ready(base_url, timeout=180)
    except SemhistError as exc:
        proc.kill()
        pytest.fail(f"{exc}\n{log_path.read_text(errors='replace')[-3000:]}", pytrace=False)
    yield base_url
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture
def llm_env(llm_server) -> dict[str, str]:
    from semhist.llm.server import MODEL_NAME

    return {"OPENAI_BASE_URL": llm_server, "OPENAI_API_KEY": "local", "SEMHIST_LLM_MODEL": MODEL_NAME,
            "SEMHIST_LLM_TIMEOUT": "120"}


def wait_for(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """A real PostgreSQL: the one `.ci/run` started (SEMHIST_TEST_POSTGRES_URL), or a private
    cluster started here on 127.0.0.1 and stopped at the end of the session."""
    url = os.environ.get("SEMHIST_TEST_POSTGRES_URL")
    if url:
        yield url
        return
    cluster = private_cluster()
    try:
        yield cluster.url
    finally:
        cluster.remove()


def private_cluster():
    from .servers import Cluster, pg_bindir

    bindir = pg_bindir()
    if bindir is None:
        pytest.fail("PostgreSQL is not installed: apt-get install postgresql (or set SEMHIST_TEST_POSTGRES_URL)")
    return Cluster(bindir)


def drop_all(url: str) -> None:
    """An empty database for the next test."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP SCHEMA public CASCADE")
        conn.execute("CREATE SCHEMA public")


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, tmp_path):
    """Each store backend, empty: the conformance suite runs against both."""
    from semhist.indexers.store import open_store

    if request.param == "sqlite":
        s = open_store(f"sqlite:///{tmp_path / 'store.sqlite3'}")
    else:
        url = request.getfixturevalue("postgres_url")
        drop_all(url)
        s = open_store(url)
    yield s
    s.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def make_history(request, tmp_path, cache_dir):
    """History factory on one backend; every History made shares the database and files."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'db.sqlite3'}"
    else:
        url = request.getfixturevalue("postgres_url")
        drop_all(url)
    made = []

    def make(**overrides):
        from semhist import History

        settings = Settings.load(env={}, cache_dir=cache_dir, data_dir=tmp_path / "data", db=url, **overrides)
        h = History(settings)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()


def chat(n: int, start: datetime, seed: int = 0) -> list[Message]:
    rng = random.Random(seed)
    topics = ["ramen in Sapporo", "the deploy on Friday", "budget for Q3", "the team offsite", "a flaky test"]
    out, t = [], start
    for i in range(n):
        t += timedelta(seconds=rng.choice([20, 40, 90, 900]))  # some pauses start new blocks
        out.append(Message(i, "user" if i % 2 == 0 else "assistant",
                           f"{rng.choice(topics)}: note {i} " + " ".join(rng.choices(["and", "so", "then", "ok"], k=6)), t))
    return out
