"""Reliability against real processes: concurrent writers, kill -9 during a bulk ingest."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

import pytest

from semhist.kernel.settings import Settings
from semhist.history import History

from .conftest import ROOT, drop_all

pytestmark = pytest.mark.slow


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'db.sqlite3'}"
    url = request.getfixturevalue("postgres_url")
    drop_all(url)
    return url


def _history(url, tmp_path, cache_dir) -> History:
    return History(Settings.load(env={}, db=url, data_dir=tmp_path / "data", cache_dir=cache_dir))


def test_concurrent_writers_lose_nothing_and_keep_order(db_url, tmp_path, cache_dir):
    _history(db_url, tmp_path, cache_dir).store.migrate()  # schema first, so writers race on data only
    plans = [("0", ["shared"]), ("1", ["shared"]), ("2", ["shared", "own-2"]), ("3", ["own-3"])]
    count = 40
    procs = [subprocess.Popen([sys.executable, "-m", "tests.writer", db_url, str(tmp_path / "data"), str(cache_dir),
                               writer, str(count), *threads], cwd=ROOT, stderr=subprocess.PIPE, text=True)
             for writer, threads in plans]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    store = _history(db_url, tmp_path, cache_dir).store
    shared = store.messages("shared")
    assert len(shared) == count * 2 + count // 2
    assert store.count("own-2") == count // 2 and store.count("own-3") == count
    # ordered by timestamp, then arrival (ids grow with arrival)
    assert [(m.sort_ts, m.id) for m in shared] == sorted((m.sort_ts, m.id) for m in shared)
    for writer in ("0", "1", "2"):  # each writer's own messages keep their relative order
        mine = [int(re.search(r"message (\d+)", m.content).group(1)) for m in shared if f"writer {writer} " in m.content]
        assert mine == sorted(mine)
    blocks = store.blocks("shared")
    members = [i for b in blocks for i in b.message_ids] + [m.id for m in store.tail("shared")]
    assert sorted(members) == sorted(m.id for m in shared)  # every message in exactly one block


def test_kill_9_during_ingest_then_rerun_completes(db_url, tmp_path, cache_dir):
    start = datetime(2026, 3, 1, tzinfo=timezone.utc)
    rng = random.Random(5)
    words = ["ramen", "deploy", "budget", "offsite", "invoice", "review", "holiday", "test"]
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"line {i}: " + " ".join(rng.choices(words, k=8)),
                 "timestamp": (start + timedelta(seconds=45 * i)).isoformat()} for i in range(3000)]
    path = tmp_path / "long.json"
    path.write_text(json.dumps(messages), encoding="utf-8")
    env = {**os.environ, "SEMHIST_BATCH_SIZE": "32", "SEMHIST_CACHE_DIR": str(cache_dir)}
    cmd = [sys.executable, "-m", "semhist.cli", "ingest", str(path), "--thread", "long", "--db", db_url,
           "--data-dir", str(tmp_path / "data"), "--quiet"]
    history = _history(db_url, tmp_path, cache_dir)
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    target = rng.randint(200, 2000)  # a random moment, once writing is under way
    while time.time() < deadline and proc.poll() is None:
        if history.store.has_thread("long") and history.store.count("long") >= target:
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the ingest finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    stored = history.store.messages("long")
    assert 0 < len(stored) < len(messages)
    assert [m.content for m in stored] == [m["content"] for m in messages[:len(stored)]]  # a clean prefix
    assert len(stored) % 32 == 0  # whole batches only: each batch is one transaction
    assert len(history.index("long").rows) == len(stored)  # the index agrees with the store
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"{len(messages) - len(stored)} added, {len(stored)} already stored" in done.stdout
    assert history.store.count("long") == len(messages)
    assert len(history.index("long").rows) == len(messages)
