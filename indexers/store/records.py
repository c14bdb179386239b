"""The records that cross the store's interface (thread ids and stored messages are the kernel's)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from semhist.kernel.errors import BackendError
from semhist.kernel.model import Key, StoredMessage  # noqa: F401  (the store's interface)


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
    writer: str | None = None  # see Message.writer


@dataclass(frozen=True)
class ClosedBlock:
    """A block the segmenter will never revise again: its members are fixed."""

    message_ids: tuple[int, ...]
    tokens: int
    parts: tuple[int, ...] = (0,)
    cause: str = ""  # why it starts (Block.cause); "" when the segment call began with it: the store knows
    cut: str = ""  # why the block after it starts: decided when this one closed


@dataclass(frozen=True)
class StoredBlock:
    block_no: int
    message_ids: tuple[int, ...]
    tokens: int
    parts: tuple[int, ...]
    cause: str = ""  # why it starts ("" for a thread's first, and in a store from before it was kept)
    cut: str = ""  # why the block after it starts


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
