"""Shared fixtures. Everything is real: the USE-m3 embedder, FAISS, SQLite, the local LLM."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
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
    # One thread, as `semhist llm-server` has by default: llama.cpp's threads meet at every layer,
    # so on 2 cores that other work keeps busy (load 5-6) two threads wrote 0.85 tokens/s and one
    # wrote 4.5; on a quiet machine one is at most about twice as slow.
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "semhist.cli", "llm-server", "--port", str(port), "--threads", "1",
             "--cache-dir", str(model_cache)],
            stdout=log, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_until_ready(base_url, timeout=180 * busier(0.0))
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


@pytest.fixture(scope="session")
def llm_speed(llm_server) -> ModelSpeed:
    """How fast the packaged model reads and writes here, measured once its server is up."""
    try:
        return ModelSpeed.measure(llm_server)
    except TimeoutError:
        pytest.skip(f"the packaged model is too slow here to judge: 48 tokens took over {MOST_LLM_TIMEOUT:.0f} s")


@pytest.fixture
def llm_env(llm_server, llm_speed) -> dict[str, str]:
    """The environment that points semhist at the packaged model, with an LLM time limit sized
    to the model's measured speed and to how busy the machine is now (see ModelSpeed)."""
    from semhist.llm.server import MODEL_NAME

    timeout = llm_speed.timeout()
    if timeout > MOST_LLM_TIMEOUT:
        pytest.skip(f"the packaged model is too slow here to judge: {llm_speed}, so one call could take "
                    f"{timeout:.0f} s (more than {MOST_LLM_TIMEOUT:.0f} s)")
    return {"OPENAI_BASE_URL": llm_server, "OPENAI_API_KEY": "local", "SEMHIST_LLM_MODEL": MODEL_NAME,
            "SEMHIST_LLM_TIMEOUT": f"{timeout:.0f}"}


def busier(than: float) -> float:
    """How many times busier the machine is now than at load `than` (at least 1): the 1-minute
    load average per core, counted only above one task a core."""
    cores = os.cpu_count() or 1
    return max(1.0, max(1.0, os.getloadavg()[0] / cores) / max(1.0, than / cores))


# A time limit on LLM calls sized to the model here. A fixed 120 s held on a quiet machine; at
# load 4-7 on 2 cores five tests of test_llm.py and one of test_memory.py ran out of it and failed.
# The limit only stops a call that hangs, so a generous one costs a quiet machine nothing.
LEAST_LLM_TIMEOUT = 120.0
# Past this a call is too slow to wait for in a test run: the tests skip and say so.
MOST_LLM_TIMEOUT = 1800.0
# The largest LLM work one request of the tests does, in tokens read and written: an answer of up
# to answer_tokens (512) after a prompt of ~1,400 tokens, or a summary of up to ~630, plus the
# request analysis, since one SEMHIST_LLM_TIMEOUT covers them all; then twice over.
WORST_READ, WORST_WRITTEN = 2 * 2_000, 2 * 700
# The probe: a prompt of some 500 tokens, then 48 tokens written (numbers, so always 48).
PROBE_PROMPT = ("Here is a list: " + ", ".join(f"item {i}" for i in range(150))
                + ".\nIgnore it. Count from 1 to 200, one number after another, separated by spaces.")
PROBE_WRITTEN = 48


@dataclass(frozen=True)
class ModelSpeed:
    read_s: float  # seconds per prompt token
    write_s: float  # seconds per written token
    load: float  # the 1-minute load average when measured

    @classmethod
    def measure(cls, base_url: str) -> ModelSpeed:
        from semhist.llm.server import MODEL_NAME

        body = {"model": MODEL_NAME, "temperature": 0, "max_tokens": PROBE_WRITTEN,
                "messages": [{"role": "user", "content": PROBE_PROMPT}]}
        request = urllib.request.Request(f"{base_url}/chat/completions", data=json.dumps(body).encode(),
                                         headers={"content-type": "application/json"})
        load, start = os.getloadavg()[0], time.monotonic()
        with urllib.request.urlopen(request, timeout=MOST_LLM_TIMEOUT) as reply:
            answer = json.load(reply)
        took = time.monotonic() - start
        timings, usage = answer.get("timings") or {}, answer.get("usage") or {}
        if timings.get("prompt_n") and timings.get("predicted_n"):  # llama.cpp's own split
            return cls(timings["prompt_ms"] / 1000 / timings["prompt_n"],
                       timings["predicted_ms"] / 1000 / timings["predicted_n"], load)
        per_token = took / max(1, usage.get("total_tokens") or PROBE_WRITTEN)  # all at the writing speed
        return cls(per_token, per_token, load)

    def timeout(self) -> float:
        """Seconds an LLM call may take now: the tests' largest at the measured speed, scaled
        by how much busier the machine has become since."""
        worst = WORST_READ * self.read_s + WORST_WRITTEN * self.write_s
        return max(LEAST_LLM_TIMEOUT, worst * busier(self.load))

    def __str__(self) -> str:
        return (f"{1 / self.read_s:.1f} tokens/s read, {1 / self.write_s:.1f} written, measured at load "
                f"{self.load:.1f} on {os.cpu_count() or 1} cores")


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
