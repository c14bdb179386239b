"""The query-time form of one thread, or of a candidate view of a long one: messages in
order, their vectors in FAISS, BM25 over messages and over blocks, blocks and turn units.

It is built once from what the store returns and then extended by appends: messages and
closed blocks are only ever added, the open tail (the block still growing) is segmented
again, and nothing before it is read or derived again. Rows are the non-system messages,
block after block; for a thread they are in chronological order.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from functools import cached_property
from typing import Any, Protocol

import numpy as np

from ..lexical import BM25, ScanBM25
from semhist.kernel.model import Block, Message, Thread, as_message
from ..segment import Segmenter
from ..store.records import Key, Marker, StoredBlock, StoredMessage
from semhist.kernel.tokens import count_message
from .faiss_index import FaissIndex

_MESSAGE_OVERHEAD = 300  # bytes a message costs in memory besides its text, about
MAX_DERIVATIONS = 4  # a process asks with one or two sets of settings: a few are enough


class Derivation(Protocol):
    """State derived from a thread's messages and kept up to date by appends: `extend` sees
    each message once, in order, so an append costs what was appended, not the thread."""

    def extend(self, messages: Sequence[Message], start: int) -> None:
        """Take in `messages[start:]` (the messages added since the last call)."""

    def value(self, index: ThreadIndex) -> Any:
        """What the query stages read."""


class ThreadIndex:
    def __init__(self, thread_id: str, dim: int, segmenter: Segmenter, *, whole: bool = True):
        self.thread_id, self.dim, self.segmenter, self.whole = thread_id, dim, segmenter, whole
        self.marker: Marker | None = None
        self.messages: list[Message] = []
        self.keys: list[Key] = []
        self.position: dict[int, int] = {}  # store id -> position
        self.max_id = 0  # the newest store id held: what was stored after it is new
        self.rows: list[int] = []  # row -> position
        self.vectors = FaissIndex(dim)  # FAISS ids are row numbers
        # a view serves one request: scanning its documents beats building postings
        self.lexical = BM25(keep_terms=False) if whole else ScanBM25()
        self.block_lexical = BM25() if whole else ScanBM25()
        self.closed: list[Block] = []
        self.open: list[Block] = []
        self._next_cause = ""  # why the block after the closed ones starts (the last one's cut)
        self.closed_rows = 0
        self._closed_sizes: list[int] = []  # rows of each closed block, kept as they close
        # the thread's newest closed block, by the store's number: blocks are named by the
        # store's numbers (a view's too, which holds a few of them) and its open ones come after
        self.last_block_no = -1
        self.units: list[tuple[int, ...]] = []
        self.history_tokens = 0  # prompt cost of every non-system message of the thread
        self.tokens: list[int] = []  # each message's prompt cost, by position (0: an operator's)
        # a view holds every message of the thread from this position on (its turns); before
        # it, blocks chosen for a request, with the thread's other messages between them
        self.tail_from = 0
        self.gaps: frozenset[int] = frozenset()  # Thread.gaps (a view's)
        # a view's: how many of the whole thread's closed blocks hold each of the request's
        # terms, and how many it has (the view holds a few of them)
        self.block_frequencies: tuple[dict[str, int], int] | None = None
        # a view's: the closed blocks it took for the request (its nearest messages, its words,
        # its time), and whether nearest messages were searched (not while the process has not
        # read the thread's vectors yet: its first ask)
        self.chosen_blocks = 0
        self.searched_nearest = True
        self.last_time = None  # time of the newest timed message (relative dates count from it)
        self.appendable = True
        self._history: tuple[float, ...] = ()
        self._tail: dict[int, tuple[np.ndarray | None, tuple[str, ...]]] = {}  # row -> (vector, terms)
        self._system: list[int] = []  # positions of the operator's messages
        self._derived: OrderedDict[Hashable, tuple[int, Derivation]] = OrderedDict()  # see `derived`
        self._text_bytes = 0

    # -- building ------------------------------------------------------------------------
    @classmethod
    def build(cls, thread_id: str, stored: Sequence[StoredMessage], blocks: Iterable[StoredBlock], dim: int,
              segmenter: Segmenter, history: Sequence[float] = (), marker: Marker | None = None,
              whole: bool = True, vectors: Mapping[int, np.ndarray] | None = None, tail_from: int = 0,
              gaps: frozenset[int] = frozenset(), closed_blocks: int = 0) -> ThreadIndex:
        """From messages in order and the closed blocks they belong to; vectors are the
        messages' own or come from `vectors` (by id). A view may hold only some messages of a
        block: they then form a block of their own, under the block's number (`tail_from`,
        `gaps`: a view's, by position; `closed_blocks`: how many the thread has closed, so a
        view's open blocks are numbered as the whole thread's are)."""
        index = cls(thread_id, dim, segmenter, whole=whole)
        index.marker, index._history = marker, tuple(history)
        index.tail_from, index.gaps = tail_from, gaps
        for m in stored:
            index._add_message(m)
        known = {b.block_no: b for b in blocks}
        groups: dict[int, list[StoredMessage]] = {}
        for m in stored:
            if m.block_no is not None and m.block_no >= 0 and m.role != "system":
                groups.setdefault(m.block_no, []).append(m)
        ordered = sorted(groups.items(), key=lambda g: index.position[g[1][0].id])
        in_block = {m.id for _, ms in ordered for m in ms}
        tail = [m for m in stored if m.role != "system" and m.id not in in_block]
        closed_rows = sum(len(ms) for _, ms in ordered)
        index._add_rows([m for _, ms in ordered for m in ms] + tail, vectors, keep_from=closed_rows)
        for block_no, members in ordered:
            whole_block = known.get(block_no)
            complete = whole_block is not None and len(whole_block.message_ids) == len(members)
            index._close([index.position[m.id] for m in members], block_no, whole_block if complete else None,
                         [t for m in members for t in m.terms], whole_block)
            index.last_block_no = max(index.last_block_no, block_no)
        if closed_blocks - 1 > index.last_block_no:  # a view without the last closed block: the tail's cause is its cut
            last = known.get(closed_blocks - 1)
            index._next_cause = last.cut if last else ""
        index.last_block_no = max(index.last_block_no, closed_blocks - 1)
        index.appendable = index.rows == sorted(index.rows)
        index._segment_open()
        return index

    def _add_message(self, m: StoredMessage) -> None:
        pos = len(self.messages)
        msg = as_message(m)
        self.messages.append(msg)
        self.keys.append(m.key)
        self.position[m.id] = pos
        self.max_id = max(self.max_id, m.id)
        self._text_bytes += 2 * len(m.content) + _MESSAGE_OVERHEAD + (len(str(m.verbatim)) if m.verbatim else 0)
        if m.timestamp is not None:
            self.last_time = m.timestamp
        if m.role == "system":
            self._system.append(pos)
            self.tokens.append(0)
            return
        tokens = m.tokens or count_message(msg.to_openai())
        self.tokens.append(tokens)
        self.history_tokens += tokens
        if m.role == "user" or not self.units:
            self.units.append((pos,))
        else:
            self.units[-1] = self.units[-1] + (pos,)

    def _add_rows(self, messages: Sequence[StoredMessage], vectors: Mapping[int, np.ndarray] | None = None,
                  keep_from: int = 0) -> None:
        """Rows for these messages, in this order; the open tail's rows (from `keep_from` on)
        keep their vector and terms for segmenting it again."""
        if not messages:
            return
        first = len(self.rows)
        zero = np.zeros(self.dim, dtype=np.float32)
        matrix = np.empty((len(messages), self.dim), dtype=np.float32)
        for k, m in enumerate(messages):
            vector = m.vector if m.vector is not None else (vectors or {}).get(m.id)
            matrix[k] = zero if vector is None else vector
            self.rows.append(self.position[m.id])
            self.lexical.add(m.terms)
            if first + k >= keep_from:  # a copy: a view would keep the whole matrix alive beside FAISS's
                self._tail[first + k] = (matrix[k].copy(), m.terms)
        self.vectors.add(np.arange(first, first + len(messages)), matrix)

    def _close(self, positions: list[int], block_no: int, stored: StoredBlock | None,
               terms: list[str] | None = None, record: StoredBlock | None = None) -> None:
        """Close the block made of the next rows (`positions`, in row order), the store's
        block `block_no`; `record`: the store's block, also when a view holds only part of it
        (its causes)."""
        record = record or stored
        first = self.closed_rows
        rows = range(first, first + len(positions))
        if terms is None:
            terms = [t for r in rows for t in self._tail[r][1]]
        self.block_lexical.truncate(len(self.closed))
        self.block_lexical.add(terms)
        tokens = stored.tokens if stored else sum(count_message(self.messages[p].to_openai()) for p in positions)
        parts = tuple(stored.parts) if stored else (0,)
        cause = record.cause if record else self._next_cause
        self.closed.append(Block(block_no, tuple(positions), self.messages[positions[0]].timestamp,
                                 self.messages[positions[-1]].timestamp, tokens, parts, cause))
        self._next_cause = record.cut if record else ""
        self._closed_sizes.append(len(positions))
        for r in rows:
            self._tail.pop(r, None)
        self.closed_rows += len(positions)

    def _segment_open(self) -> None:
        """Segment the rows after the closed blocks as they stand now."""
        tail_rows = list(range(self.closed_rows, len(self.rows)))
        self.block_lexical.truncate(len(self.closed))
        self.open = []
        if tail_rows:
            positions = [self.rows[r] for r in tail_rows]
            vectors = np.vstack([self._tail[r][0] for r in tail_rows])
            found = self.segmenter.segment([self.messages[p] for p in positions], vectors, self._history)
            for b in found:
                ids = tuple(positions[i] for i in b.message_ids)
                self.open.append(Block(self.last_block_no + 1 + len(self.open), ids, b.start_time, b.end_time,
                                       b.tokens, b.parts, b.cause if self.open else self._next_cause))
                self.block_lexical.add([t for i in b.message_ids for t in self._tail[tail_rows[i]][1]])
        self._changed()

    # -- appends -------------------------------------------------------------------------
    def apply(self, messages: Sequence[StoredMessage], blocks: Sequence[StoredBlock],
              history: Sequence[float], marker: Marker) -> bool:
        """Add what was stored since this index was read. False when it cannot be done by
        adding (a message that sorts before the newest one, a block that does not continue
        the closed ones): the caller then builds the index again."""
        if not self.appendable or not self.whole:
            return False
        if messages and self.keys and messages[0].key < self.keys[-1]:
            return False
        for m in messages:
            self._add_message(m)
        self._add_rows([m for m in messages if m.role != "system"], keep_from=self.closed_rows)
        for b in sorted(blocks, key=lambda b: b.block_no):
            positions = [self.position.get(i) for i in b.message_ids]
            expected = self.rows[self.closed_rows:self.closed_rows + len(positions)]
            if b.block_no != self.last_block_no + 1 or None in positions or positions != expected:
                return False
            self._close(positions, b.block_no, b)
            self.last_block_no = b.block_no
        self._history = tuple(history) if blocks else self._history
        self.marker = marker
        self._segment_open()
        return True

    # -- what the query stages read -------------------------------------------------------
    def _changed(self) -> None:
        for name in ("thread", "blocks", "block_rows", "row_block", "turn_units", "system"):
            self.__dict__.pop(name, None)

    @cached_property
    def thread(self) -> Thread:
        return Thread.indexed(self.thread_id, tuple(self.messages), tuple(self._system), self.gaps)

    def derived(self, key: Hashable, make: Callable[[], Derivation]) -> Any:
        """The value of the derivation `make()` registered under `key`, brought up to date with
        the messages appended since it last looked (messages are only ever appended to an
        index: one that changes otherwise is built again, derivations with it)."""
        held = self._derived.get(key)
        if held is None:
            held = (0, make())
            while len(self._derived) >= MAX_DERIVATIONS:
                self._derived.popitem(last=False)
        seen, derivation = held
        if seen < len(self.messages):
            derivation.extend(self.messages, seen)
        self._derived[key] = (len(self.messages), derivation)
        self._derived.move_to_end(key)
        return derivation.value(self)

    @cached_property
    def blocks(self) -> tuple[Block, ...]:
        return tuple(self.closed) + tuple(self.open)

    @cached_property
    def turn_units(self) -> tuple[tuple[int, ...], ...]:
        return tuple(self.units)

    @cached_property
    def block_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """(first row, end row) of each block: rows are stored block after block."""
        sizes = np.array(self._closed_sizes + [len(b.message_ids) for b in self.open], dtype=np.int64)
        ends = np.cumsum(sizes)
        return ends - sizes, ends

    def block_with_id(self, block_id: int) -> Block | None:
        """The block numbered `block_id`, by bisection: no walk over the thread's blocks."""
        at = bisect_left(self.closed, block_id, key=lambda b: b.id)
        if at < len(self.closed) and self.closed[at].id == block_id:
            return self.closed[at]
        return next((b for b in self.open if b.id == block_id), None)

    @cached_property
    def row_block(self) -> np.ndarray:
        first, end = self.block_rows
        return np.repeat(np.arange(len(first), dtype=np.int64), end - first)

    def dense(self, query: np.ndarray) -> np.ndarray:
        """Cosine of every row with the query, in row order."""
        return self.vectors.scores_all(query)

    def position_after(self, key: Key) -> int:
        """The first position whose message comes after `key`."""
        return bisect_right(self.keys, key)

    @property
    def nbytes(self) -> int:
        """About what this index holds in memory."""
        return self.vectors.nbytes + self.lexical.nbytes + self.block_lexical.nbytes + self._text_bytes

    def __len__(self) -> int:
        return len(self.messages)
