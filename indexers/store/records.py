"""The records that cross the store's interface, and thread-id validation."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from semhist.kernel.errors import BackendError, InputError

# Teams conversation ids look like "19:abc@thread.v2" or "a:1Xyz;messageid=12"; anything with a
# slash, a backslash, whitespace or ".." is refused, so an id can never walk out of a directory.
THREAD_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:;@=+\-]{0,255}$")

Key = tuple[float, int]  # (sort_ts, id): a message's place in its thread


def check_thread_id(thread_id: str) -> str:
    if not isinstance(thread_id, str) or not THREAD_ID.fullmatch(thread_id) or ".." in thread_id:
        raise InputError(f"invalid thread id {thread_id!r}: use 1-256 characters from A-Z a-z 0-9 _ . : ; @ = + -, "
                         "starting with a letter, digit or _, and no '..'")
    return thread_id


def thread_id_for(name: str, prefix: str = "conv-") -> str:
    """The stored thread for an outside name (a Teams conversation id, an OpenAI `user`): the
    name itself when the store accepts it, else a stable digest of it (names with '|', '/', spaces)."""
    try:
        return check_thread_id(name)
    except InputError:
        return prefix + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:40]


class StaleRules(BackendError):
    """Another writer turned masking on for the thread while these messages were prepared
    without it (the writer prepares them again; twice in a row is an error)."""


@dataclass(frozen=True)
class NewMessage:
    """A message on its way in. `source_key` makes storing the same input twice a no-op."""

    role: str
    content: str
    timestamp: datetime | None = None
    name: str | None = None
    tool_calls: tuple[dict[str, Any], ...] | None = None
    tool_call_id: str | None = None
    source_key: str | None = None
    terms: tuple[str, ...] = ()
    vector: np.ndarray | None = field(default=None, compare=False)
    tokens: int = 0  # what the message costs in a prompt
    verbatim: dict[str, Any] | None = field(default=None, compare=False)  # see Message.verbatim


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
    tokens: int = 0
    verbatim: dict[str, Any] | None = field(default=None, compare=False)

    @property
    def key(self) -> Key:
        return (self.sort_ts, self.id)


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
class Marker:
    """Identifies the state of a stored thread. `uid` is new for every incarnation of a thread
    id (a forgotten id used again is another thread); `generation` grows whenever messages are
    removed or re-embedded, so nothing derived before can be extended; `version` grows with
    every write."""

    uid: str
    generation: int
    version: int
    messages: int = 0
    tokens: int = 0  # prompt cost of every non-system message
    vectors: int = 0
    pii: str | None = None  # the masking rules the thread is written with

    def same_lineage(self, other: Marker | None) -> bool:
        """True when `other` can be brought up to this state by adding what was appended."""
        return other is not None and (self.uid, self.generation) == (other.uid, other.generation)


@dataclass(frozen=True)
class AppendResult:
    ids: tuple[int, ...]
    closed: tuple[StoredBlock, ...]  # blocks this write closed
    before: Marker | None  # the thread as the write found it
    after: Marker
    messages: tuple[StoredMessage, ...] = ()  # what was inserted, as a read would return it
    history: tuple[float, ...] | None = None  # the drift history after `closed` (None: no block closed)


@dataclass(frozen=True)
class Changes:
    """What was stored since a state was read: messages (with vectors) and closed blocks."""

    marker: Marker
    messages: tuple[StoredMessage, ...]
    blocks: tuple[StoredBlock, ...]
    segment_history: tuple[float, ...] = ()


@dataclass(frozen=True)
class ThreadInfo:
    thread_id: str
    messages: int
    first: datetime | None
    last: datetime | None
    retention_days: float | None


@dataclass(frozen=True)
class SummaryRecord:
    """A rolling summary of every message up to `upto` (a key), and who wrote it."""

    upto: Key
    text: str
    model: str
    covered_tokens: int  # prompt cost of the non-system messages it covers
    created_at: str
    first_ts: float | None = None  # time of the first message it covers
    upto_ts: float | None = None


@dataclass(frozen=True)
class NoteRecord:
    """A user statement kept verbatim (`quote`) with the LLM's short restatement."""

    id: int
    source_id: int  # the message it came from
    kind: str  # constraint | preference | decision | fact
    text: str
    quote: str
    source_ts: float | None = None
    superseded_by: int | None = None
