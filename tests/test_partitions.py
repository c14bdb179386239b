"""PostgreSQL's tables partitioned by thread (issue: a store that grows past one machine).

Counted, not timed: PostgreSQL's own per-table statistics say which partitions a request
scanned or changed; a thread's requests, forget and retention cut must touch its partitions
only, and raising the partition count must keep every row where its thread finds it.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from semhist.kernel.errors import InputError
from semhist.kernel.budget import Budget
from semhist.kernel.settings import Settings
from semhist.indexers.store import open_store
from semhist.indexers.store.partitions import INITIAL, TABLES, partitions

from .conftest import chat, drop_all

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)


@pytest.fixture
def pg(postgres_url):
    drop_all(postgres_url)
    return postgres_url


def _history(url, cache_dir, tmp_path):
    from semhist import History

    return History(Settings.load(env={}, cache_dir=cache_dir, data_dir=tmp_path / "data", db=url))


def _fill(h, threads: int, n: int) -> None:
    for t in range(threads):
        h.add_many(f"19:team{t}@thread.v2", [
            {"role": m.role, "content": m.content, "name": "Aiko" if m.role == "user" else "semhist",
             "timestamp": m.timestamp.isoformat(), "id": f"{t}-{i}"} for i, m in enumerate(chat(n, T0, seed=t))])


def _counts(url) -> dict[str, tuple[int, ...]]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT relname, seq_scan, COALESCE(idx_scan, 0), n_tup_ins, n_tup_upd, n_tup_del "
                            "FROM pg_stat_user_tables WHERE relname ~ '_p[0-9]+_[0-9]+$'").fetchall()
    return {r[0]: tuple(r[1:]) for r in rows}


def _flush(store) -> None:
    """Make this process's connection report its statistics now (they are otherwise sent
    when the connection is idle for a while)."""
    with store._read() as cur:
        cur.execute("SELECT pg_stat_force_next_flush()")


def _rows(url) -> dict[str, list[tuple]]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        return {t.name: sorted(map(repr, conn.execute(f"SELECT * FROM {t.name}").fetchall())) for t in TABLES}


def test_every_table_of_thread_rows_is_hash_partitioned_and_keyed_on_the_thread(pg):
    import psycopg

    store = open_store(pg)
    with store._read() as cur:
        for t in TABLES:
            parts = partitions(cur, t.name)
            assert [(p.modulus, p.remainder) for p in parts] == [(INITIAL, r) for r in range(INITIAL)], t.name
    store.close()
    with psycopg.connect(pg, autocommit=True) as conn:
        # a distributed PostgreSQL needs every unique key to hold the distribution column
        unique = conn.execute(
            "SELECT c.relname, pg_get_indexdef(i.indexrelid) FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid "
            "WHERE i.indisunique AND c.relkind = 'p'").fetchall()
        assert {name for name, _ in unique} == {t.name for t in TABLES}
        for name, definition in unique:
            assert "(thread_id" in definition, definition
        foreign = conn.execute("SELECT conname FROM pg_constraint WHERE contype = 'f'").fetchall()
        assert foreign == []  # the store deletes by thread; no key spans partitions or shards


def test_a_threads_requests_forget_and_retention_touch_only_its_partitions(pg, cache_dir, tmp_path):
    h = _history(pg, cache_dir, tmp_path)
    _fill(h, 12, 60)
    thread = "19:team5@thread.v2"
    with h.store._read() as cur:
        cur.execute("SELECT tableoid::regclass::text FROM threads WHERE thread_id = %s", (thread,))
        own = cur.fetchone()[0].removeprefix("threads")
    h.ask(thread, "what about the deploy on Friday?", budget=Budget.parse("600"))  # a cold load
    _flush(h.store)
    before = _counts(pg)
    last = chat(60, T0, seed=5)[-1].timestamp
    for turn in range(3):  # the bot's turns: its user's message, an ask, its reply
        h.add(thread, "user", f"turn {turn}: is the flaky test fixed?", name="Aiko",
              timestamp=last + timedelta(minutes=turn + 1))
        h.ask(thread, "is the flaky test fixed?", budget=Budget.parse("600"))
        h.add(thread, "assistant", f"not yet ({turn})", timestamp=last + timedelta(minutes=turn + 1, seconds=5))
    h.forget(thread, before=T0 + timedelta(hours=1))  # a retention cut
    h.forget(thread, ids=[h.store.messages(thread, last=1)[0].id])
    h.forget(thread)
    _flush(h.store)
    after = _counts(pg)
    touched = sorted(name for name, counts in after.items() if counts != before.get(name))
    assert touched and all(name.endswith(own) for name in touched), touched
    assert {name.removesuffix(own) for name in touched} >= {"threads", "messages", "turn_log"}
    h.close()


def test_raising_the_partition_count_keeps_every_row_where_its_thread_finds_it(pg, cache_dir, tmp_path):
    h = _history(pg, cache_dir, tmp_path)
    _fill(h, 10, 40)
    h.ask("19:team3@thread.v2", "budget for Q3?")
    before = _rows(pg)
    steps = []
    assert h.store.raise_partitions(2 * INITIAL, progress=lambda i, n: steps.append((i, n))) == INITIAL
    assert steps[-1] == (INITIAL, INITIAL)
    with h.store._read() as cur:
        for t in TABLES:
            assert {(p.modulus, p.remainder) for p in partitions(cur, t.name)} == {
                (2 * INITIAL, r) for r in range(2 * INITIAL)}
    assert _rows(pg) == before
    assert h.store.raise_partitions(2 * INITIAL) == 0  # done already: nothing to do
    for bad in (INITIAL, 3 * INITIAL):
        with pytest.raises(InputError, match="multiple"):
            h.store.raise_partitions(bad)
    with pytest.raises(InputError, match="at most"):  # a typo must not make a million tables
        h.store.raise_partitions(INITIAL * 2**17)
    # the same process and a new one read and write the threads as before
    h.add("19:team3@thread.v2", "user", "and the budget for Q4?", name="Aiko", timestamp=T0 + timedelta(days=1))
    assert h.store.count("19:team3@thread.v2") == 41
    h.close()
    again = _history(pg, cache_dir, tmp_path)
    result = again.ask("19:team3@thread.v2", "budget for Q4?")
    assert "Q4" in " ".join(str(m.get("content")) for m in result.prompt.messages)
    again.close()


def test_a_sqlite_store_has_no_partitions_to_raise(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 's.sqlite3'}")
    with pytest.raises(InputError, match="PostgreSQL"):
        store.raise_partitions(16)
    store.close()


def test_the_cli_shows_and_raises_the_partitions(pg, tmp_path, capsys):
    from semhist.cli.main import main

    args = ["--db", pg, "--data-dir", str(tmp_path)]
    assert main(["partitions", *args]) == 0
    assert f"{INITIAL} of modulus {INITIAL}" in capsys.readouterr().out
    assert main(["partitions", "--raise-to", str(INITIAL + 1), *args]) == 2  # not a multiple: refused, nothing moved
    assert "multiple" in capsys.readouterr().err
    assert main(["partitions", "--raise-to", str(4 * INITIAL), "--json", *args]) == 0
    assert json.loads(capsys.readouterr().out)["messages"] == {str(4 * INITIAL): 4 * INITIAL}
    assert main(["partitions", "--db", f"sqlite:///{tmp_path / 's.sqlite3'}"]) == 0
    assert "not partitioned" in capsys.readouterr().out
