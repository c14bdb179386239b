"""PostgreSQL backend of the store (psycopg 3), for several bot replicas sharing threads.

Same SQL as SQLite; a write locks its thread's row (SELECT ... FOR UPDATE) so two replicas
appending to one thread segment its open tail one after the other, while writes to
different threads run in parallel.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .errors import BackendError, missing_extra
from .store_sql import SQLStore


def _psycopg():
    try:
        import psycopg
    except ImportError as exc:
        raise missing_extra("psycopg", "postgres") from exc
    return psycopg


class PostgresStore(SQLStore):
    placeholder = "%s"
    types = {"id": "BIGSERIAL PRIMARY KEY", "blob": "BYTEA", "real": "DOUBLE PRECISION"}

    def __init__(self, url: str, connect_timeout: float = 10.0):
        self.url = url
        self._timeout = connect_timeout
        self._local = threading.local()
        self._conn()
        self.migrate()

    def _conn(self):
        conn = getattr(self._local, "conn", None)
        if conn is None or conn.closed:
            psycopg = _psycopg()
            try:
                # autocommit: a read is one round trip; writes open their own transaction
                conn = psycopg.connect(self.url, connect_timeout=int(self._timeout), autocommit=True)
            except psycopg.Error as exc:
                raise BackendError(f"cannot connect to PostgreSQL ({_redact(self.url)}): {exc}") from exc
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
            raise BackendError(f"PostgreSQL ({_redact(self.url)}): {exc}") from exc

    @contextmanager
    def _read(self) -> Iterator[Any]:
        psycopg = _psycopg()
        conn = self._conn()
        try:
            with conn.cursor() as cur:
                yield cur
        except psycopg.Error as exc:
            raise BackendError(f"PostgreSQL ({_redact(self.url)}): {exc}") from exc

    def _insert(self, cur, rows: list[tuple]) -> list[int]:
        if not rows:
            return []
        sql = ("INSERT INTO messages (thread_id, ts, tz, sort_ts, role, name, content, tool_calls, tool_call_id, "
               "source_key, terms, embedder, vector) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
               "ON CONFLICT DO NOTHING RETURNING id")
        cur.executemany(sql, rows, returning=True)  # pipelined: one round trip per batch, not per row
        ids = []
        while True:
            got = cur.fetchone()
            if got:
                ids.append(int(got[0]))
            if not cur.nextset():
                break
        return ids

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


def _redact(url: str) -> str:
    """The URL without its password, for error messages and logs."""
    from urllib.parse import urlparse

    parsed = urlparse(url)
    if parsed.password:
        return url.replace(f":{parsed.password}@", ":***@")
    return url
