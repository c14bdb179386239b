"""Where threads belong: a tenant and a channel recorded on the thread, the threads that share
them (a Teams channel's reply chains), and the thread each relayed response belongs to. A thread's place is set once: a write that names
another tenant or channel for it is refused, so a thread never changes hands."""

from __future__ import annotations

import time
from typing import Any

from semhist.kernel.errors import InputError
from semhist.kernel.model import Place


class ScopeMixin:
    def place(self: Any, thread_id: str, place: Place) -> None:
        """Record the thread's tenant and channel (what is None is left as it is); the thread is
        made if it is new. Naming another tenant or channel than the recorded one is refused."""
        with self._write(thread_id) as cur:
            self._ensure_thread(cur, thread_id)
            cur.execute(self._sql("SELECT tenant, channel FROM threads WHERE thread_id = ?"), (thread_id,))
            recorded = Place(*cur.fetchone())
            for what in ("tenant", "channel"):
                old, new = getattr(recorded, what), getattr(place, what)
                if old is not None and new is not None and old != new:
                    raise InputError(f"thread {thread_id!r} belongs to another {what}: a thread's {what} is "
                                     "set once", field=what)
            merged = Place(recorded.tenant or place.tenant, recorded.channel or place.channel)
            if merged != recorded:
                cur.execute(self._sql("UPDATE threads SET tenant = ?, channel = ? WHERE thread_id = ?"),
                            (merged.tenant, merged.channel, thread_id))

    def place_of(self: Any, thread_id: str) -> Place | None:
        """The thread's tenant and channel (None: no such thread)."""
        with self._read() as cur:
            cur.execute(self._sql("SELECT tenant, channel FROM threads WHERE thread_id = ?"), (thread_id,))
            row = cur.fetchone()
        return Place(*row) if row else None

    def neighbours(self: Any, thread_id: str, limit: int) -> list[str]:
        """The other threads of the thread's channel (same tenant, same channel), most recently
        written first, at most `limit`; none for a thread without a channel. One index range of
        `threads`, one look-up of each one's newest message."""
        place = self.place_of(thread_id)
        if place is None or place.channel is None:
            return []
        tenant = "tenant IS NULL" if place.tenant is None else "tenant = ?"
        newest = "COALESCE((SELECT MAX(sort_ts) FROM messages m WHERE m.thread_id = t.thread_id), -1e18)"
        with self._read() as cur:
            cur.execute(self._sql(f"SELECT thread_id FROM threads t WHERE {tenant} AND channel = ? AND thread_id <> ? "
                                  f"ORDER BY {newest} DESC, thread_id LIMIT ?"),
                        (*(() if place.tenant is None else (place.tenant,)), place.channel, thread_id, int(limit)))
            return [r[0] for r in cur.fetchall()]

    def note_response(self: Any, response_id: str, thread_id: str) -> None:
        """Record that the response `response_id` (a Responses API reply) belongs to the thread
        (the first record of an id stays)."""
        with self._write(thread_id) as cur:
            # keyed by thread (partitions, shards): that the id is new is checked, not constrained
            cur.execute(self._sql("INSERT INTO response_threads (response_id, thread_id, at) SELECT ?, ?, ? "
                                  "WHERE NOT EXISTS (SELECT 1 FROM response_threads WHERE response_id = ?)"),
                        (response_id, thread_id, time.time(), response_id))

    def response_thread(self: Any, response_id: str) -> str | None:
        """The thread a recorded response belongs to (None: not recorded, or forgotten)."""
        with self._read() as cur:
            # the one look-up not keyed on the thread: PostgreSQL probes each partition's index
            cur.execute(self._sql("SELECT thread_id FROM response_threads WHERE response_id = ? ORDER BY at LIMIT 1"),
                        (response_id,))
            row = cur.fetchone()
        return row[0] if row else None
