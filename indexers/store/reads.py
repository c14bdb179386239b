"""The store's reads: messages in order, by id, by time or by key range; the open tail;
whole threads and what changed since, each in one snapshot; vectors; blocks; full-text
candidates. Every read names one thread."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from .lexical_keys import query_tokens, token
from .records import Changes, Key, Marker, StoredBlock, StoredMessage
from .rows import COLUMNS, assemble_blocks, chunks, history_blob, marks, message_row


RARE_BLOCKS, RARE_SHARE, RARE_TERMS = 64, 0.02, 4  # a term in more blocks than this is too common


class ReadMixin:
    def _select(self: Any, with_vectors: bool) -> str:
        return COLUMNS + (", vector" if with_vectors else "")

    def messages(self: Any, thread_id: str, *, ids: Sequence[int] | None = None, last: int | None = None,
                 with_vectors: bool = False) -> list[StoredMessage]:
        """Messages in order (timestamp, then arrival): all, the given ids, or the `last` n."""
        cols = self._select(with_vectors)
        with self._read() as cur:
            if ids is not None:
                out = []
                for chunk in chunks([int(i) for i in ids]):  # by primary key, in the thread's partition
                    cur.execute(self._sql(f"SELECT {cols} FROM messages WHERE id IN ({marks(chunk)}) "
                                          f"AND {self._thread_check} = ?"), (*chunk, thread_id))
                    out.extend(message_row(r, with_vectors) for r in cur.fetchall())
                return sorted(out, key=lambda m: m.key)
            if last is not None:
                cur.execute(self._sql(f"SELECT {cols} FROM messages WHERE thread_id = ? "
                                      "ORDER BY sort_ts DESC, id DESC LIMIT ?"), (thread_id, int(last)))
                return [message_row(r, with_vectors) for r in reversed(cur.fetchall())]
            cur.execute(self._sql(f"SELECT {cols} FROM messages WHERE thread_id = ? ORDER BY sort_ts, id"), (thread_id,))
            return [message_row(r, with_vectors) for r in cur.fetchall()]

    def earlier(self: Any, thread_id: str, before: Key, limit: int) -> list[StoredMessage]:
        """The newest `limit` messages before `before` (exclusive), oldest first: a page back
        through the thread, one index range whatever its length."""
        with self._read() as cur:
            cur.execute(self._sql(f"SELECT {COLUMNS} FROM messages WHERE thread_id = ? AND (sort_ts, id) < (?, ?) "
                                  "ORDER BY sort_ts DESC, id DESC LIMIT ?"), (thread_id, before[0], before[1], int(limit)))
            return [message_row(r) for r in reversed(cur.fetchall())]

    def last_ids(self: Any, thread_id: str, n: int) -> list[int]:
        """The ids of the newest `n` messages, oldest first."""
        with self._read() as cur:
            cur.execute(self._sql("SELECT id FROM messages WHERE thread_id = ? ORDER BY sort_ts DESC, id DESC LIMIT ?"),
                        (thread_id, int(n)))
            return [int(r[0]) for r in reversed(cur.fetchall())]

    def between(self: Any, thread_id: str, after: Key | None, through: Key, *, role: str | None = None,
                limit: int = 1000) -> list[StoredMessage]:
        """Messages after `after` (exclusive) up to `through` (inclusive), in order."""
        lo = after or (float("-inf"), -1)
        where = "thread_id = ? AND (sort_ts, id) > (?, ?) AND (sort_ts, id) <= (?, ?)"
        params: list[Any] = [thread_id, lo[0], lo[1], through[0], through[1]]
        if role is not None:
            where, params = where + " AND role = ?", params + [role]
        with self._read() as cur:
            cur.execute(self._sql(f"SELECT {COLUMNS} FROM messages WHERE {where} ORDER BY sort_ts, id LIMIT ?"),
                        (*params, int(limit)))
            return [message_row(r) for r in cur.fetchall()]

    def key_before(self: Any, thread_id: str, key: Key, n: int) -> Key | None:
        """The key of the message `n` places before `key` (None: the thread is not that long)."""
        with self._read() as cur:
            cur.execute(self._sql("SELECT sort_ts, id FROM messages WHERE thread_id = ? AND (sort_ts, id) <= (?, ?) "
                                  "ORDER BY sort_ts DESC, id DESC LIMIT 1 OFFSET ?"),
                        (thread_id, key[0], key[1], int(n)))
            row = cur.fetchone()
        return (float(row[0]), int(row[1])) if row else None

    def tokens_through(self: Any, thread_id: str, key: Key) -> int:
        """The prompt cost of the non-system messages up to `key` (one scan: use sparingly)."""
        with self._read() as cur:
            cur.execute(self._sql("SELECT COALESCE(SUM(tokens), 0) FROM messages WHERE thread_id = ? "
                                  "AND role <> 'system' AND (sort_ts, id) <= (?, ?)"),
                        (thread_id, key[0], key[1]))
            return int(cur.fetchone()[0])

    def in_time(self: Any, thread_id: str, start: float, end: float, limit: int) -> list[StoredMessage]:
        """Non-system messages stamped within [start, end), the earliest `limit`."""
        with self._read() as cur:
            cur.execute(self._sql(f"SELECT {COLUMNS} FROM messages WHERE thread_id = ? AND sort_ts >= ? AND sort_ts < ? "
                                  "AND role <> 'system' ORDER BY sort_ts, id LIMIT ?"),
                        (thread_id, start, end, int(limit)))
            return [message_row(r) for r in cur.fetchall()]

    def system_messages(self: Any, thread_id: str) -> list[StoredMessage]:
        with self._read() as cur:
            # sorted here: ORDER BY sort_ts would walk the whole thread instead of the system rows
            cur.execute(self._sql(f"SELECT {COLUMNS} FROM messages WHERE thread_id = ? AND role = 'system'"),
                        (thread_id,))
            return sorted((message_row(r) for r in cur.fetchall()), key=lambda m: m.key)

    def tail(self: Any, thread_id: str, with_vectors: bool = True) -> list[StoredMessage]:
        """The open tail: messages not yet in a closed block."""
        with self._read() as cur:
            return self._tail(cur, thread_id, with_vectors)

    def _tail(self: Any, cur, thread_id: str, with_vectors: bool = True) -> list[StoredMessage]:
        cur.execute(self._sql(f"SELECT {self._select(with_vectors)} FROM messages WHERE thread_id = ? "
                              "AND block_no IS NULL ORDER BY sort_ts, id"), (thread_id,))
        return [message_row(r, with_vectors) for r in cur.fetchall()]

    def load(self: Any, thread_id: str) -> Changes:
        """The whole thread as one consistent read: messages with vectors, blocks, marker."""
        return self.changes(thread_id, after_id=0, after_block=-1)

    def changes(self: Any, thread_id: str, after_id: int, after_block: int) -> Changes:
        """Messages stored with an id above `after_id` and blocks closed after `after_block`,
        read in one snapshot together with the thread's marker."""
        with self._snapshot() as cur:
            marker = self._marker(cur, thread_id)
            if marker is None:
                return Changes(Marker("", 0, 0), (), ())
            cur.execute(self._sql(f"SELECT {self._select(True)} FROM messages WHERE thread_id = ? AND id > ? "
                                  "ORDER BY sort_ts, id"), (thread_id, after_id))
            messages = tuple(message_row(r, True) for r in cur.fetchall())
            blocks = self._blocks_after(cur, thread_id, after_block)
            cur.execute(self._sql("SELECT segment_history FROM threads WHERE thread_id = ?"), (thread_id,))
            history = history_blob(cur.fetchone()[0])
        return Changes(marker, messages, tuple(blocks), history)

    def _blocks_after(self: Any, cur, thread_id: str, after_block: int) -> list[StoredBlock]:
        cur.execute(self._sql("SELECT block_no, tokens, parts, cause, cut FROM blocks WHERE thread_id = ? AND block_no > ? "
                              "ORDER BY block_no"), (thread_id, after_block))
        heads = cur.fetchall()
        if not heads:
            return []
        cur.execute(self._sql("SELECT block_no, id, sort_ts FROM messages WHERE thread_id = ? AND block_no > ?"),
                    (thread_id, after_block))
        return assemble_blocks(heads, cur.fetchall())

    def vectors(self: Any, thread_id: str, after_id: int = 0, batch: int = 20000) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(ids, vectors) of stored message vectors with id > after_id, in batches by id."""
        last = after_id
        while True:
            with self._read() as cur:
                cur.execute(self._sql("SELECT id, vector FROM messages WHERE thread_id = ? AND id > ? "
                                      "AND vector IS NOT NULL ORDER BY id LIMIT ?"), (thread_id, last, batch))
                rows = cur.fetchall()
            if not rows:
                return
            ids = np.array([r[0] for r in rows], dtype=np.int64)
            yield ids, np.vstack([np.frombuffer(bytes(r[1]), dtype=np.float32) for r in rows])
            last = int(ids[-1])

    def vector_count(self: Any, thread_id: str) -> int:
        with self._read() as cur:
            cur.execute(self._sql("SELECT n_vectors FROM threads WHERE thread_id = ?"), (thread_id,))
            row = cur.fetchone()
            return int(row[0]) if row else 0

    def blocks(self: Any, thread_id: str, block_nos: Sequence[int] | None = None) -> list[StoredBlock]:
        """Closed blocks (all, or the given numbers) with their member message ids in order."""
        with self._read() as cur:
            if block_nos is None:
                return self._blocks_after(cur, thread_id, -1)
            out = []
            for chunk in chunks([int(b) for b in block_nos]):
                where = f"thread_id = ? AND block_no IN ({marks(chunk)})"
                cur.execute(self._sql(f"SELECT block_no, tokens, parts, cause, cut FROM blocks WHERE {where} "
                                      "ORDER BY block_no"),
                            (thread_id, *chunk))
                heads = cur.fetchall()
                # sorted here, not in SQL: ORDER BY would make the planner walk the whole thread
                cur.execute(self._sql(f"SELECT block_no, id, sort_ts FROM messages WHERE {where}"), (thread_id, *chunk))
                out += assemble_blocks(heads, cur.fetchall())
            return sorted(out, key=lambda b: b.block_no)

    def block_of(self: Any, thread_id: str, ids: Sequence[int]) -> dict[int, int | None]:
        """For each message id, its closed block number (None: in the open tail)."""
        out: dict[int, int | None] = {}
        with self._read() as cur:
            for chunk in chunks([int(i) for i in ids]):
                cur.execute(self._sql(f"SELECT id, block_no FROM messages WHERE id IN ({marks(chunk)}) "
                                      f"AND {self._thread_check} = ?"), (*chunk, thread_id))
                out.update((int(i), b) for i, b in cur.fetchall())
        return out

    def search_blocks(self: Any, thread_id: str, terms: Sequence[str], k: int) -> list[tuple[int, float]]:
        """The k closed blocks whose terms best match, (block number, score) best first.
        Only the rarest terms are looked up: one in most blocks chooses nothing, and ranking
        every block that holds it would cost more than the rest of the request."""
        tokens = query_tokens(thread_id, terms)
        if not tokens or k <= 0:
            return []
        with self._read() as cur:
            df, blocks = self._frequencies(cur, thread_id, tokens)
            common = max(RARE_BLOCKS, RARE_SHARE * blocks)
            rare = sorted((t for t in tokens if 0 < df.get(t, 0) <= common), key=lambda t: df[t])[:RARE_TERMS]
            return self._search_terms(cur, thread_id, rare, k) if rare else []

    def block_frequencies(self: Any, thread_id: str, terms: Sequence[str]) -> tuple[dict[str, int], int]:
        """How many of the thread's closed blocks hold each term, and how many it has."""
        by_token = {token(thread_id, t): t for t in terms if t}
        with self._read() as cur:
            df, blocks = self._frequencies(cur, thread_id, sorted(by_token))
        return {by_token[t]: n for t, n in df.items()}, blocks

    def _frequencies(self: Any, cur, thread_id: str, tokens: Sequence[str]) -> tuple[dict[str, int], int]:
        df: dict[str, int] = {}
        if tokens:
            cur.execute(self._sql(f"SELECT token, df FROM block_term_df WHERE thread_id = ? AND token IN "
                                  f"({marks(tokens)})"), (thread_id, *tokens))
            df = {t: int(n) for t, n in cur.fetchall()}
        cur.execute(self._sql("SELECT COALESCE(MAX(block_no), -1) + 1 FROM blocks WHERE thread_id = ?"), (thread_id,))
        return df, int(cur.fetchone()[0])
