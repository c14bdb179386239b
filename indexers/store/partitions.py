"""PostgreSQL tables partitioned by thread: declarative hash partitions on `thread_id`.

Every table that holds a thread's rows is split into the same number of hash partitions of
`thread_id`, and every key and index of it starts with `thread_id` (the one exception, the
look-up of a reply by its `response_id`, is an index of its own). A request names its thread,
so PostgreSQL reads one partition of each table; a forget or a retention cut deletes from one
partition; and a distributed PostgreSQL (Citus) can hold the same tables sharded on
`thread_id`, colocated, unchanged (docs/guides/operations.md gives the statements).

There are no foreign keys between these tables: the store writes a thread's rows only after
its `threads` row (`_ensure_thread`) and a forget deletes from each table by thread, one
partition each. Keys that would span partitions (or shards) are what keeps a store from
growing past one machine; without them a partition is split without checking other tables.

A new store starts with `INITIAL` partitions; `raise_partitions` splits each partition into
several (modulus P to a multiple N of P, which PostgreSQL allows side by side), one partition
of every table per transaction, so it can be stopped and run again.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from semhist.kernel.errors import InputError

INITIAL = 8
# PostgreSQL plans a request over every partition before it prunes them: past a thousand or so
# partitions per table planning time grows; a typo in a count must not make millions of tables.
MOST = 1_024


@dataclass(frozen=True)
class Table:
    name: str
    key: str  # the primary key's columns
    indexes: tuple[str, ...] = ()  # CREATE INDEX statements
    serial: bool = False  # an `id` drawn from the table's own sequence


TABLES: tuple[Table, ...] = (
    Table("threads", "thread_id", ("CREATE INDEX threads_scope ON threads (tenant, channel)",)),
    Table("messages", "thread_id, id", (
        "CREATE UNIQUE INDEX messages_source ON messages (thread_id, source_key)",
        "CREATE INDEX messages_order ON messages (thread_id, sort_ts, id)",
        "CREATE INDEX messages_tail ON messages (thread_id, sort_ts, id) WHERE block_no IS NULL",
        "CREATE INDEX messages_block ON messages (thread_id, block_no)",
        "CREATE INDEX messages_system ON messages (thread_id, id) WHERE role = 'system'"), serial=True),
    Table("blocks", "thread_id, block_no", ("CREATE INDEX blocks_terms ON blocks USING gin (terms)",)),
    Table("block_term_df", "thread_id, token"),
    Table("manifests", "thread_id"),
    Table("turn_log", "thread_id, id", serial=True),
    Table("turn_prompts", "thread_id, turn_id"),
    Table("summaries", "thread_id, id", ("CREATE INDEX summaries_thread ON summaries (thread_id, upto_ts, upto_id)",),
          serial=True),
    Table("notes", "thread_id, id", ("CREATE INDEX notes_source ON notes (thread_id, source_id)",), serial=True),
    Table("forgotten", "thread_id, id", serial=True),
    Table("response_threads", "thread_id, response_id", (
        "CREATE INDEX response_threads_id ON response_threads (response_id)",
        "CREATE INDEX response_threads_thread ON response_threads (thread_id, at)")),
)

_BOUND = re.compile(r"modulus (\d+), remainder (\d+)")


def partition_name(table: str, modulus: int, remainder: int) -> str:
    return f"{table}_p{modulus}_{remainder}"


def _create_partitions(cur: Any, table: str, modulus: int, remainders: range | list[int]) -> None:
    for r in remainders:
        cur.execute(f"CREATE TABLE {partition_name(table, modulus, r)} PARTITION OF {table} "
                    f"FOR VALUES WITH (MODULUS {modulus}, REMAINDER {r})")


def partition_tables(store: Any, cur: Any) -> None:
    """The migration that partitions an existing store (PostgreSQL only): each table is
    rebuilt as a partitioned one with its rows, keys and indexes (one transaction; a large
    store takes as long as copying it once)."""
    if store.dialect != "postgresql":
        return
    for t in TABLES:
        cur.execute(f"ALTER TABLE {t.name} RENAME TO {t.name}_unpartitioned")
        cur.execute(f"CREATE TABLE {t.name} (LIKE {t.name}_unpartitioned INCLUDING DEFAULTS) "
                    "PARTITION BY HASH (thread_id)")
        _create_partitions(cur, t.name, INITIAL, range(INITIAL))
        cur.execute(f"INSERT INTO {t.name} SELECT * FROM {t.name}_unpartitioned")
        if t.serial:  # the sequence goes with the new table, not with the one dropped below
            cur.execute(f"ALTER SEQUENCE {t.name}_id_seq OWNED BY {t.name}.id")
    cur.execute("DROP TABLE " + ", ".join(f"{t.name}_unpartitioned" for t in TABLES) + " CASCADE")
    for t in TABLES:
        cur.execute(f"ALTER TABLE {t.name} ADD PRIMARY KEY ({t.key})")
        for index in t.indexes:
            cur.execute(index)


@dataclass(frozen=True)
class Partition:
    modulus: int
    remainder: int


def partitions(cur: Any, table: str = "threads") -> list[Partition]:
    """The partitions of one of semhist's tables, by remainder (none: not partitioned)."""
    cur.execute("SELECT pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
                "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass(%s)", (table,))
    found = [_BOUND.search(bound or "") for (bound,) in cur.fetchall()]
    return sorted((Partition(int(f.group(1)), int(f.group(2))) for f in found if f),
                  key=lambda p: (p.remainder, p.modulus))


def layout(store: Any) -> dict[str, dict[int, int]]:
    """For each partitioned table, how many partitions it has of each modulus ({}: SQLite)."""
    if store.dialect != "postgresql":
        return {}
    with store._read() as cur:
        counted = {t.name: Counter(p.modulus for p in partitions(cur, t.name)) for t in TABLES}
    return {name: dict(moduli) for name, moduli in counted.items() if moduli}


def raise_partitions(store: Any, count: int, progress: Callable[[int, int], None] | None = None) -> int:
    """Split every partition of modulus below `count` into `count / modulus` partitions; each
    step moves one partition's rows of every table in one transaction, while semhist's tables
    wait for it. Returns the steps taken (0: every partition had `count` already)."""
    if store.dialect != "postgresql":
        raise InputError("partitions are PostgreSQL's: a SQLite store is one file")
    if count > MOST:
        raise InputError(f"at most {MOST:,} partitions a table: {count:,} would slow every request's planning")
    with store._read() as cur:
        current = partitions(cur)
    if not current:
        raise InputError("this store's tables are not partitioned (they are from the store's migration 0013)")
    low = [p for p in current if p.modulus < count]
    bad = sorted({p.modulus for p in current if count % p.modulus})
    if bad or count < max(p.modulus for p in current):
        raise InputError(f"the partition count can only grow to a multiple of the current one "
                         f"({', '.join(map(str, sorted({p.modulus for p in current})))}): {count} is not")
    for step, part in enumerate(low, 1):
        with store._write() as cur:
            # every table at once, in one order: detaching a partition locks its table whole anyway
            cur.execute("LOCK TABLE " + ", ".join(t.name for t in TABLES) + " IN ACCESS EXCLUSIVE MODE")
            for t in TABLES:
                _split(cur, t.name, part.modulus, part.remainder, count)
        if progress is not None:
            progress(step, len(low))
    return len(low)


def _split(cur: Any, table: str, modulus: int, remainder: int, count: int) -> None:
    old = partition_name(table, modulus, remainder)
    cur.execute(f"ALTER TABLE {table} DETACH PARTITION {old}")
    _create_partitions(cur, table, count, list(range(remainder, count, modulus)))
    cur.execute(f"INSERT INTO {table} SELECT * FROM {old}")
    cur.execute(f"DROP TABLE {old}")
