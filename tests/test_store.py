"""Store conformance: every test runs against SQLite and a real PostgreSQL server."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from semhist.kernel.errors import ConfigError, InputError
from semhist.indexers.store import MIGRATIONS, ClosedBlock, NewMessage, open_store
from semhist.kernel.ids import check_thread_id

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=timezone.utc)


def msg(text: str, minutes: float = 0.0, role: str = "user", key: str | None = None, dim: int = 4) -> NewMessage:
    vec = np.random.default_rng(abs(hash(text)) % 2**32).standard_normal(dim).astype(np.float32)
    return NewMessage(role, text, T0 + timedelta(minutes=minutes), source_key=key, terms=tuple(text.split()),
                      vector=vec / np.linalg.norm(vec))


def test_migrations_are_named_ordered_and_applied_once(store):
    names = [m[0] for m in MIGRATIONS]
    assert names == sorted(names)
    assert store.applied_migrations() == names
    assert store.migrate() == []  # a second run applies nothing


def test_order_is_timestamp_then_arrival(store):
    store.append("t1", [msg("b", 2), msg("a", 1), msg("c", 2), msg("d", 0.5)], "e")
    assert [m.content for m in store.messages("t1")] == ["d", "a", "b", "c"]
    assert [m.content for m in store.messages("t1", last=2)] == ["b", "c"]


def test_timestamps_round_trip_with_their_offset(store):
    jst = timezone(timedelta(hours=9))
    when = datetime(2026, 3, 1, 18, 30, tzinfo=jst)
    store.append("t1", [NewMessage("user", "x", when), NewMessage("user", "untimed")], None)
    first, second = store.messages("t1")
    assert first.timestamp == when and first.timestamp.utcoffset() == timedelta(hours=9)
    assert second.timestamp is None and second.sort_ts == first.sort_ts  # sorts where it arrived


def test_source_keys_make_appends_idempotent(store):
    rows = [msg("a", 0, key="k1"), msg("b", 1, key="k2")]
    assert len(store.append("t1", rows, "e").ids) == 2
    assert store.append("t1", rows, "e").ids == ()
    assert set(store.existing_keys("t1", ["k1", "k3"])) == {"k1"}
    assert store.existing_keys("t2", ["k1"]) == {}  # keys are per thread
    assert store.count("t1") == 2


def test_vectors_and_terms_round_trip_exactly(store):
    rows = [msg(f"m{i} word", i, dim=8) for i in range(30)]
    store.append("t1", rows, "emb")
    got = [m for m in store.messages("t1", with_vectors=True)]
    assert [m.terms for m in got] == [r.terms for r in rows]
    assert all(np.array_equal(g.vector, r.vector) for g, r in zip(got, rows))
    batches = list(store.vectors("t1", after_id=got[9].id, batch=7))
    ids = np.concatenate([b[0] for b in batches])
    assert list(ids) == [m.id for m in got[10:]] and len(batches) == 3


def test_blocks_close_only_through_the_segmenter(store):
    def close_all_but_last(tail, history):
        ids = [m.id for m in tail]
        return ([ClosedBlock(tuple(ids[:-1]), 10, (0,))], history + (0.25,)) if len(ids) > 3 else ([], history)

    for i in range(3):
        store.append("t1", [msg(f"m{i}", i)], "e", close_all_but_last)
    assert store.blocks("t1") == [] and len(store.tail("t1")) == 3
    store.append("t1", [msg("m3", 3)], "e", close_all_but_last)
    blocks = store.blocks("t1")
    assert len(blocks) == 1 and len(blocks[0].message_ids) == 3
    assert [m.content for m in store.tail("t1")] == ["m3"]
    assert store.blocks("t1", [0]) == blocks and store.blocks("t1", [7]) == []
    assert store.load("t1").segment_history == (0.25,)  # the segmenter's history goes with the thread


def test_every_read_is_scoped_to_its_thread(store):
    rng = random.Random(7)
    threads = [f"thread-{i}" for i in range(12)]
    for step in range(240):
        t = rng.choice(threads)
        store.append(t, [msg(f"{t} says {step}", step)], "e")
    for t in threads:
        contents = [m.content for m in store.messages(t)]
        assert contents and all(c.startswith(f"{t} says") for c in contents)
        other_ids = [m.id for o in threads if o != t for m in store.messages(o)]
        assert store.messages(t, ids=other_ids) == []  # asking for another thread's ids returns nothing
        ids = np.concatenate([b[0] for b in store.vectors(t)])
        assert set(ids) == {m.id for m in store.messages(t)}


def test_forget_thread_removes_everything(store):
    store.append("t1", [msg("secret", 0)], "e")
    store.append("t2", [msg("kept", 0)], "e")
    store.log_turn("t1", {"request": "q"})
    store.put_manifest("t1", {"embedder": "e"})
    gone = store.forget_thread("t1")
    assert [m.content for m in gone] == ["secret"]
    assert not store.has_thread("t1") and store.count("t1") == 0 and store.turns("t1") == []
    assert store.manifest("t1") is None and list(store.vectors("t1")) == []
    assert [m.content for m in store.messages("t2")] == ["kept"]


def test_forget_messages_and_before_a_date_bump_the_generation(store):
    store.append("t1", [msg(f"m{i}", i * 60) for i in range(5)], "e")
    g0 = store.marker("t1").generation
    first = store.messages("t1")[0]
    assert [m.content for m in store.forget_messages("t1", ids=[first.id])] == ["m0"]
    assert store.marker("t1").generation == g0 + 1
    gone = store.forget_messages("t1", before=T0 + timedelta(minutes=150))
    assert [m.content for m in gone] == ["m1", "m2"]
    assert [m.content for m in store.messages("t1")] == ["m3", "m4"]
    assert store.forget_messages("t1", ids=[first.id]) == [] and store.marker("t1").generation == g0 + 2


def test_turn_log_manifest_and_retention(store):
    store.append("t1", [msg("a")], "e")
    store.log_turn("t1", {"request": "first", "keyword": ["ラーメン"]})
    store.log_turn("t1", {"request": "second"})
    assert [t["request"] for t in store.turns("t1")] == ["first", "second"]
    assert store.turns("t1", limit=1)[0]["request"] == "second"
    assert store.turns("t1")[0]["keyword"] == ["ラーメン"]
    store.put_manifest("t1", {"embedder": "a"})
    store.put_manifest("t1", {"embedder": "b"})
    assert store.manifest("t1") == {"embedder": "b"}
    assert store.retention("t1") is None
    store.set_retention("t1", 30)
    assert store.retention("t1") == 30 and store.threads()[0].retention_days == 30


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_store_from_before_the_new_columns_is_migrated_with_its_data(request, tmp_path, backend):
    """A store made by the previous release (migrations 0001-0004 only, rows written then) gets
    thread identities, prompt costs and lexical block terms when it is opened."""
    from semhist.indexers.store.migrations import script
    from tests.conftest import drop_all

    if backend == "sqlite":
        import sqlite3
        url = f"sqlite:///{tmp_path / 'old.sqlite3'}"
        conn = sqlite3.connect(tmp_path / "old.sqlite3", isolation_level=None)
        dialect, types, mark = "sqlite", {"id": "INTEGER PRIMARY KEY AUTOINCREMENT", "blob": "BLOB", "real": "REAL"}, "?"
    else:
        import psycopg
        url = request.getfixturevalue("postgres_url")
        drop_all(url)
        conn = psycopg.connect(url, autocommit=True)
        dialect, types, mark = "postgresql", {"id": "BIGSERIAL PRIMARY KEY", "blob": "BYTEA", "real": "DOUBLE PRECISION"}, "%s"
    conn.execute("CREATE TABLE schema_migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
    for migration in MIGRATIONS[:4]:
        for statement in script(migration, dialect, types):
            conn.execute(statement)
        conn.execute(f"INSERT INTO schema_migrations VALUES ({mark}, 'then')", (migration[0],))
    conn.execute("INSERT INTO store_meta VALUES ('uid', 'old-store')")
    conn.execute("INSERT INTO threads (thread_id, created_at, n_messages, n_vectors) VALUES ('old', 'then', 2, 0)")
    for i, text in enumerate(["the Zanzibar trip", "sounds great"]):
        conn.execute(f"INSERT INTO messages (thread_id, ts, sort_ts, role, content, terms, block_no) VALUES "
                     f"('old', {mark}, {mark}, {mark}, {mark}, {mark}, 0)",
                     (1000.0 + i, 1000.0 + i, "user" if i == 0 else "assistant", text, "\x1f".join(text.split())))
    conn.execute("INSERT INTO blocks VALUES ('old', 0, 12, '[0]')")
    conn.execute("INSERT INTO turn_log (thread_id, at, payload) VALUES ('old', 1001.5, '{\"request\": \"the Zanzibar trip\"}')")
    conn.close()
    store = open_store(url)
    assert store.applied_migrations() == [m[0] for m in MIGRATIONS]
    marker = store.marker("old")
    assert marker.uid and marker.tokens == sum(m.tokens for m in store.messages("old")) > 0
    assert [no for no, _ in store.search_blocks("old", ["Zanzibar"], 5)] == [0]
    asked = store.messages("old")[0]
    store.forget_messages("old", ids=[asked.id])  # the old log's ask with that text goes with it
    assert store.turns("old") == []
    store.close()


@pytest.mark.parametrize("bad", ["../x", "a/b", "a\\b", "", " x", "x y", ".hidden", "a" * 300, "x..y", "a\x00b", "x\n"])
def test_thread_ids_are_validated(bad):
    with pytest.raises(InputError):
        check_thread_id(bad)


@pytest.mark.parametrize("good", ["19:abc@thread.v2", "a:1Xyz;messageid=12", "team-1", "x_y.z"])
def test_teams_style_ids_are_accepted(good):
    assert check_thread_id(good) == good


def test_unknown_scheme_lists_the_valid_ones():
    with pytest.raises(ConfigError, match="postgresql://.*sqlite://"):
        open_store("mysql://x/y")


def test_a_clean_close_leaves_everything_in_the_database_file(tmp_path, cache_dir):
    """A backup that copies semhist.sqlite3 alone after a clean stop used to get an empty
    store: everything was still in the -wal file."""
    from concurrent.futures import ThreadPoolExecutor

    from semhist import History
    from semhist.kernel.settings import Settings

    db = tmp_path / "semhist.sqlite3"
    history = History(Settings.load(env={}, cache_dir=cache_dir, data_dir=tmp_path, db=f"sqlite:///{db}"))

    # as in the service: written from a worker thread whose connection is still open at close
    with ThreadPoolExecutor(1) as pool:
        pool.submit(history.add_many, "t", [{"role": "user", "content": f"message {i}"} for i in range(20)]).result()
        history.close()
        _check_file_alone(tmp_path, db)


def _check_file_alone(tmp_path, db):
    import shutil
    import sqlite3

    assert not (tmp_path / "semhist.sqlite3-wal").exists() or (tmp_path / "semhist.sqlite3-wal").stat().st_size == 0
    copy = tmp_path / "backup" / "copy.sqlite3"
    copy.parent.mkdir()
    shutil.copy(db, copy)  # the file alone, as a naive backup takes it
    with sqlite3.connect(copy) as conn:
        assert conn.execute("SELECT count(*) FROM messages").fetchone()[0] == 20
