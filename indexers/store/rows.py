"""How message rows are read back, and the small helpers every statement shares."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from typing import Any

import numpy as np

from .records import StoredBlock, StoredMessage

COLUMNS = ("id, thread_id, role, content, ts, tz, sort_ts, name, tool_calls, tool_call_id, terms, block_no, tokens, "
           "verbatim, writer")

# One message row as written; the backends differ only in how they send it.
INSERT = ("INSERT INTO messages (thread_id, ts, tz, sort_ts, role, name, content, tool_calls, tool_call_id, "
          "source_key, terms, embedder, vector, tokens, verbatim, writer) "
          "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
          "ON CONFLICT DO NOTHING RETURNING id")


def request_key(text: str) -> str:
    """What the turn log keeps to find an ask by its request (forgetting the message it was)."""
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def stamp(ts: float | None, tz: str | None) -> datetime | None:
    if ts is None:
        return None
    moment = datetime.fromtimestamp(ts, timezone.utc)
    return moment.astimezone(_zone(tz)) if tz else moment  # the message's own offset comes back


@lru_cache(maxsize=64)
def _zone(offset: str) -> timezone:
    sign = 1 if offset[0] == "+" else -1
    return timezone(sign * timedelta(hours=int(offset[1:3]), minutes=int(offset[4:6])))


def offset(ts: datetime | None) -> str | None:
    if ts is None or ts.utcoffset() is None:
        return None
    return ts.strftime("%z")[:3] + ":" + ts.strftime("%z")[3:]


TERMS_SEP = "\x1f"  # between a message's index terms in its `terms` column; no term holds it


def terms_column(terms: Sequence[str]) -> str:
    return TERMS_SEP.join(terms)


def column_terms(column: str | None) -> tuple[str, ...]:
    return tuple(column.split(TERMS_SEP)) if column else ()


def message_row(r: Sequence[Any], with_vector: bool = False) -> StoredMessage:
    mid, tid, role, content, ts, tz, sort_ts, name, calls, call_id, terms, block_no, tokens, verbatim, writer = r[:15]
    vector = np.frombuffer(bytes(r[15]), dtype=np.float32) if with_vector and r[15] is not None else None
    return StoredMessage(int(mid), tid, role, content, stamp(ts, tz), float(sort_ts), name,
                         tuple(json.loads(calls)) if calls else None, call_id,
                         column_terms(terms), block_no, vector, int(tokens or 0),
                         json.loads(verbatim) if verbatim else None, writer)


def assemble_blocks(heads: list[tuple], members: list[tuple]) -> list[StoredBlock]:
    """Blocks from their rows (block_no, tokens, parts, cause, cut) and member rows (block_no, id, sort_ts)."""
    by_block: dict[int, list[int]] = {}
    for no, mid, _ in sorted(members, key=lambda r: (r[2], r[1])):
        by_block.setdefault(int(no), []).append(int(mid))
    return [StoredBlock(int(no), tuple(by_block.get(int(no), ())), int(tok), tuple(json.loads(parts)), cause or "",
                        cut or "") for no, tok, parts, cause, cut in heads]


def history_blob(blob: Any) -> tuple[float, ...]:
    return tuple(np.frombuffer(bytes(blob), dtype=np.float32).tolist()) if blob else ()


def chunks(values: Sequence[Any], size: int = 500) -> Iterator[list[Any]]:
    for start in range(0, len(values), size):
        yield list(values[start:start + size])


def marks(chunk: Sequence[Any]) -> str:
    return ",".join("?" * len(chunk))
