"""The records that cross the store's interface, and thread-id validation."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from .errors import InputError

# Teams conversation ids look like "19:abc@thread.v2" or "a:1Xyz;messageid=12"; anything with a
# slash, a backslash, whitespace or ".." is refused, so an id can never walk out of a directory.
_THREAD_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:;@=+\-]{0,255}$")


def check_thread_id(thread_id: str) -> str:
    if not isinstance(thread_id, str) or not _THREAD_ID.match(thread_id) or ".." in thread_id:
        raise InputError(f"invalid thread id {thread_id!r}: use 1-256 characters from A-Z a-z 0-9 _ . : ; @ = + -, "
                         "starting with a letter, digit or _, and no '..'")
    return thread_id


@dataclass(frozen=True)
class NewMessage:
    """A message on its way in. `source_key` makes re-ingesting the same input a no-op."""

    role: str
    content: str
    timestamp: datetime | None = None
    name: str | None = None
    tool_calls: tuple[dict[str, Any], ...] | None = None
    tool_call_id: str | None = None
    source_key: str | None = None
    terms: tuple[str, ...] = ()
    vector: np.ndarray | None = field(default=None, compare=False)


@dataclass(frozen=True)
class StoredMessage:
    id: int  # global arrival order
    thread_id: str
    role: str
    content: str
    timestamp: datetime | None
    sort_ts: float
    name: str | None = None
    tool_calls: tuple[dict[str, Any], ...] | None = None
    tool_call_id: str | None = None
    terms: tuple[str, ...] = ()
    block_no: int | None = None
    vector: np.ndarray | None = field(default=None, compare=False)


@dataclass(frozen=True)
class ClosedBlock:
    """A block the segmenter will never revise again: its members are fixed."""

    message_ids: tuple[int, ...]
    tokens: int
    parts: tuple[int, ...] = (0,)


@dataclass(frozen=True)
class StoredBlock:
    block_no: int
    message_ids: tuple[int, ...]
    tokens: int
    parts: tuple[int, ...]


@dataclass(frozen=True)
class ThreadInfo:
    thread_id: str
    messages: int
    first: datetime | None
    last: datetime | None
    retention_days: float | None
