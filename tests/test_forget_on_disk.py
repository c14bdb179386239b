"""Forgetting is complete on disk: a raw byte scan of every file semhist wrote (store, its
write-ahead log, the embedding cache, FAISS files) finds none of a forgotten thread's texts or
vectors, whatever SQLite's build default for secure_delete is."""

from __future__ import annotations

import json
import sqlite3
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import psycopg
import pytest

from semhist.kernel.model import Message, Thread
from semhist.kernel.settings import Settings
from semhist.engine import Engine
from semhist.history import History

T0 = datetime(2025, 5, 8, 21, 0, tzinfo=timezone.utc)


def _thread(tag: str, n: int = 40) -> Thread:
    return Thread(tag, tuple(Message(i, "user" if i % 2 == 0 else "assistant",
                                     f"{tag} secret note {i}: {uuid.uuid4().hex} about the Lisbon office move",
                                     T0 + timedelta(minutes=i)) for i in range(n)))


def _raw(roots: list[Path]) -> bytes:
    return b"".join(p.read_bytes() for root in roots for p in sorted(root.rglob("*")) if p.is_file())


def _vectors(history: History, thread_id: str) -> list[bytes]:
    return [np.asarray(m.vector, dtype=np.float32).tobytes()
            for m in history.store.load(thread_id).messages if m.vector is not None]


def _off_by_default(monkeypatch):
    """SQLite's own default build keeps deleted bytes (Debian's overwrites them): make every
    connection start with secure_delete off, as it would there, before semhist sets it."""
    real = sqlite3.connect

    def connect(*args, **kwargs):
        conn = real(*args, **kwargs)
        conn.execute("PRAGMA secure_delete=OFF")
        return conn
    monkeypatch.setattr(sqlite3, "connect", connect)


def test_forgetting_a_thread_leaves_no_text_or_vector_in_any_file(tmp_path, monkeypatch):
    _off_by_default(monkeypatch)
    data, cache = tmp_path / "data", tmp_path / "cache"
    settings = Settings.load(data_dir=data, cache_dir=cache, view_limit=10, ann_threshold=20)
    secret, kept = _thread("gone"), _thread("kept")
    Engine(settings).ask(secret, "the Lisbon office")  # `semhist ask FILE` caches its vectors on disk
    history = History(settings)
    try:
        for t in (secret, kept):
            history.ingest(t.id, t)
            history.ask(t.id, t.messages[-1].content)  # the turn log quotes the request
            history.ask(t.id, "the Lisbon office")  # past view_limit: the thread's FAISS file is written
        vectors = _vectors(history, secret.id)
        assert len(vectors) == 40
        before = _raw([data, cache])
        assert secret.messages[3].content.encode() in before and vectors[3] in before
        history.forget(secret.id)
        after = _raw([data, cache])
    finally:
        history.close()
    texts = [m.content.encode() for m in secret.messages]
    assert [t for t in texts if t in after] == []
    assert sum(v in after for v in vectors) == 0
    assert kept.messages[3].content.encode() in after  # the other thread is all there


def test_forgetting_one_message_leaves_nothing_of_it(tmp_path, monkeypatch):
    _off_by_default(monkeypatch)
    history = History(Settings.load(data_dir=tmp_path, cache_dir=tmp_path))
    try:
        thread = _thread("t", 10)
        history.ingest("t", thread)
        target = history.store.messages("t")[4]
        history.ask("t", target.content)  # a bot asks with the message it just stored
        history.forget("t", ids=[target.id])
        raw = _raw([tmp_path])
        assert target.content.encode() not in raw
        assert thread.messages[5].content.encode() in raw
        assert all(e["request"] != target.content for e in history.store.turns("t"))
    finally:
        history.close()


def test_postgres_forget_vacuum_rewrites_the_table_files(postgres_url, tmp_path, capsys):
    from semhist.cli.main import main

    from .conftest import drop_all

    url = postgres_url
    drop_all(url)
    thread = _thread("pg", 6)
    path = tmp_path / "pg.json"
    path.write_text(json.dumps([{"role": m.role, "content": m.content, "timestamp": m.timestamp.isoformat()}
                                for m in thread.messages]), encoding="utf-8")
    args = ["--db", url, "--data-dir", str(tmp_path)]
    assert main(["ingest", str(path), "--thread", "pg", "--quiet", *args]) == 0
    assert main(["forget", "--thread", "pg", *args]) == 0
    assert "--vacuum runs VACUUM FULL" in capsys.readouterr().out
    assert main(["forget", "--thread", "pg", "--vacuum", *args]) == 2  # already gone: not found
    kept = tmp_path / "kept.json"
    kept.write_text(json.dumps([{"role": "user", "content": f"kept message {i}"} for i in range(30)]), encoding="utf-8")
    assert main(["ingest", str(kept), "--thread", "kept", "--quiet", *args]) == 0
    assert main(["ingest", str(path), "--thread", "pg2", "--quiet", *args]) == 0
    assert main(["ingest", str(kept), "--thread", "kept2", "--quiet", *args]) == 0  # rows after it on the pages
    assert main(["forget", "--thread", "pg2", "--vacuum", *args]) == 0
    assert "store vacuumed" in capsys.readouterr().out
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")  # table pages reach their files at a checkpoint
        home = Path(conn.execute("SHOW data_directory").fetchone()[0])
        # the tables are partitioned by thread: their rows are in the partitions' files
        files = [home / f for (f,) in conn.execute(
            "SELECT pg_relation_filepath(c.oid) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent IN ('messages'::regclass, 'turn_log'::regclass)").fetchall()]
    if not all(f.exists() for f in files):
        pytest.skip("the server's data directory is not on this machine")
    raw = b"".join(f.read_bytes() for f in files)
    assert not any(m.content.encode() in raw for m in thread.messages)
    assert b"kept message 7" in raw


def test_a_reader_holding_the_log_delays_the_scrub_not_the_forget(tmp_path, caplog):
    import time

    history = History(Settings.load(data_dir=tmp_path, cache_dir=tmp_path))
    reader = None
    try:
        history.ingest("t", _thread("t", 6))
        reader = sqlite3.connect(str(tmp_path / "semhist.sqlite3"))
        reader.execute("BEGIN")
        reader.execute("SELECT COUNT(*) FROM messages").fetchone()  # a snapshot other processes keep open
        start = time.monotonic()
        history.forget("t")
        assert time.monotonic() - start < 10
        assert any("next checkpoint" in r.getMessage() for r in caplog.records)
        reader.rollback()
        history.store.scrub()  # the next forget, or this, empties the log
        assert b"t secret note 3" not in _raw([tmp_path])
    finally:
        if reader is not None:
            reader.close()
        history.close()
