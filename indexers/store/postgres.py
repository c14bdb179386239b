"""PostgreSQL backend of the store (psycopg 3), for several bot replicas sharing threads.

Same SQL as SQLite; a write locks its thread's row (SELECT ... FOR UPDATE) so two replicas
appending to one thread segment its open tail one after the other, while writes to
different threads run in parallel. Lexical candidates come from a tsvector per closed block.
"""

from __future__ import annotations

import select
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from semhist.kernel.errors import BackendError, missing_extra
from semhist.kernel.settings import redact
from .forget import TABLES as VACUUMED
from .rows import INSERT
from .sql import SQLStore


def _psycopg():
    try:
        import psycopg
    except ImportError as exc:
        raise missing_extra("psycopg", "postgres") from exc
    return psycopg


def _hung_up(conn) -> bool:
    """Whether an idle connection has something to read: with nothing asked, that is the
    server closing it (a restart, an idle timeout). Checked before each use, without a round
    trip, so the first request after a restart does not fail on the old connection."""
    try:
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


class PostgresStore(SQLStore):
    placeholder = "%s"
    dialect = "postgresql"
    _thread_check = "thread_id"
    types = {"id": "BIGSERIAL PRIMARY KEY", "blob": "BYTEA", "real": "DOUBLE PRECISION"}

    def __init__(self, url: str, connect_timeout: float = 10.0):
        self.url = url
        self._timeout = connect_timeout
        self._local = threading.local()
        self._conn()
        self.migrate()

    def _conn(self):
        conn = getattr(self._local, "conn", None)
        if conn is not None and not conn.closed and _hung_up(conn):
            conn.close()  # the server went away (a restart) while this thread's connection was idle
        if conn is None or conn.closed:
            psycopg = _psycopg()
            try:
                # autocommit: a read is one round trip; writes open their own transaction
                conn = psycopg.connect(self.url, connect_timeout=int(self._timeout), autocommit=True)
            except psycopg.Error as exc:
                raise BackendError(f"cannot connect to PostgreSQL ({redact(self.url)}): {exc}") from exc
            self._local.conn = conn
        return conn

    def migrate(self) -> list[str]:
        # A session-level lock: replicas starting together apply the schema one at a time.
        with self._read() as cur:
            cur.execute("SELECT pg_advisory_lock(7355608)")
        try:
            return super().migrate()
        finally:
            with self._read() as cur:
                cur.execute("SELECT pg_advisory_unlock(7355608)")

    @contextmanager
    def _write(self, thread_id: str | None = None) -> Iterator[Any]:
        psycopg = _psycopg()
        conn = self._conn()
        try:
            with conn.transaction(), conn.cursor() as cur:
                if thread_id is not None:
                    self._ensure_thread(cur, thread_id)
                    cur.execute("SELECT 1 FROM threads WHERE thread_id = %s FOR UPDATE", (thread_id,))
                yield cur
        except psycopg.Error as exc:
            raise BackendError(f"PostgreSQL ({redact(self.url)}): {exc}") from exc

    @contextmanager
    def _snapshot(self) -> Iterator[Any]:
        psycopg = _psycopg()
        conn = self._conn()
        try:
            with conn.transaction(), conn.cursor() as cur:
                cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                yield cur
        except psycopg.Error as exc:
            raise BackendError(f"PostgreSQL ({redact(self.url)}): {exc}") from exc

    @contextmanager
    def _read(self) -> Iterator[Any]:
        psycopg = _psycopg()
        conn = self._conn()
        try:
            with conn.cursor() as cur:
                yield cur
        except psycopg.Error as exc:
            raise BackendError(f"PostgreSQL ({redact(self.url)}): {exc}") from exc

    def vacuum(self) -> None:
        """Rewrite semhist's tables without their dead rows. PostgreSQL keeps a deleted row's
        bytes in its pages; a plain VACUUM (and autovacuum) only marks the space reusable,
        measured: the text was still in the table file after it. VACUUM FULL writes new files
        and holds an exclusive lock on each table while it does."""
        psycopg = _psycopg()
        try:
            with self._conn().cursor() as cur:  # autocommit: VACUUM cannot run in a transaction
                cur.execute("VACUUM FULL " + ", ".join(VACUUMED))
        except psycopg.Error as exc:
            raise BackendError(f"PostgreSQL ({redact(self.url)}): {exc}") from exc

    def _insert(self, cur, rows: list[tuple]) -> list[int | None]:
        if not rows:
            return []
        cur.executemany(self._sql(INSERT), rows, returning=True)  # pipelined: one round trip per batch, not per row
        ids: list[int | None] = []
        while True:  # one result per row, empty when its source key was stored already
            got = cur.fetchone()
            ids.append(int(got[0]) if got else None)
            if not cur.nextset():
                break
        return ids

    def _index_block(self, cur, thread_id: str, block_no: int, document: str) -> None:
        cur.execute("UPDATE blocks SET terms = to_tsvector('simple', %s) WHERE thread_id = %s AND block_no = %s",
                    (document, thread_id, block_no))

    def _drop_block_terms(self, cur, thread_id: str) -> None:
        pass  # the terms live in the block rows and go with them

    def _search_terms(self, cur, thread_id: str, tokens: list[str], k: int) -> list[tuple[int, float]]:
        cur.execute("SELECT block_no, ts_rank(terms, q) AS r FROM blocks, to_tsquery('simple', %s) q "
                    "WHERE thread_id = %s AND terms @@ q ORDER BY r DESC LIMIT %s", (" | ".join(tokens), thread_id, k))
        return [(int(no), float(score)) for no, score in cur.fetchall()]

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
