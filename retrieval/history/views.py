"""What one request reads of a thread longer than `view_limit`.

A searching strategy reads a candidate view: the blocks of the nearest messages in the
thread's FAISS index (HNSW when large), the blocks whose rarest matching terms score best in
the store's full-text index (the same janome/Snowball terms the ranker uses; more of them for a
topic request, whose stretches left out are named by a line each), the messages of
a time the request names, the recent turns, the open block and every operator instruction.
Retrieval then runs on that view exactly as on a whole thread, so a request costs the same at
1M messages as at 10k.

A strategy that does not search (full, window, token-budget, summary, structured) sends the
thread's end: it reads the newest messages, paged from the store, as far back as what it can
send reaches (a budget's tokens, the window's messages), so it sends what it would send from
the whole thread. `full` without a budget reads every message, up to `MAX_PAGED_TOKENS`; past
that it is refused (no model reads the whole thread at once): give a budget.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from semhist.kernel.errors import TooLongError
from semhist.indexers.index.thread_index import ThreadIndex
from semhist.kernel.model import Thread
from semhist.indexers.index.vectors import ThreadVectors
from semhist.indexers.segment import Segmenter, TimeGapSegmenter
from semhist.kernel.budget import Budget
from semhist.indexers.store import Marker, StoreReader, StoredMessage
from semhist.kernel.tokens import count_message

from ..pipeline.asker import BUDGETED, Asker
from ..pipeline.assemble import fixed_cost
from ..pipeline.keyword import TOPIC, KeywordResult
from ..pipeline.listing import MAX_LINES
from ..pipeline.select import PROTECTED_UNITS, Carried, goes_on
from ..pipeline.toolresults import placeholder
from .timeview import conversation_blocks

CANDIDATE_HITS = 32  # nearest messages whose blocks enter the view
DENSE_BLOCKS = 16  # at most this many of their blocks (a budget holds far fewer)
LEXICAL_BLOCKS = 16  # blocks taken for their terms
# ...for a topic request, which names every stretch about its thing when they do not all fit
# (pipeline/listing.py: at most MAX_LINES lines): the stretches must be in the view to be named
TOPIC_LEXICAL_BLOCKS = LEXICAL_BLOCKS + MAX_LINES
# ...and the block after each of its best: a block cut for its size leaves the talk about a
# thing to go on in the next (pipeline/mentions.py, `mentions_run_on`). About as many as a
# budget of 8,000 tokens holds whole (blocks are cut at 1,200); the next block of all 48 (and
# the one before each) added little to JMultiWOZ joined's entity recall for six times the reads
NEXT_BLOCKS = 8
RECENT_VIEW = 40  # latest messages always in the view
TIME_MESSAGES = 400  # messages of a named time, the earliest first
REGION_MESSAGES = 2_000  # the cache layout's turns read, at most (they cost a few thousand tokens)
CACHED_MESSAGES = 8_000  # messages of closed blocks kept between requests, per thread


class ClosedMessages:
    """Messages of closed blocks read for earlier views of one thread: they never change
    (until the thread's generation does), so later views read only what is new to them."""

    def __init__(self, limit: int = CACHED_MESSAGES):
        self.limit = limit
        self._held: OrderedDict[int, StoredMessage] = OrderedDict()
        self._lineage: tuple[str, int] | None = None

    def get(self, store: StoreReader, thread_id: str, ids: set[int], marker: Marker) -> list[StoredMessage]:
        if self._lineage != (marker.uid, marker.generation):
            self._held.clear()
            self._lineage = (marker.uid, marker.generation)
        missing = [i for i in ids if i not in self._held]
        found = {i: self._held[i] for i in ids if i in self._held}
        for m in store.messages(thread_id, ids=missing) if missing else ():
            found[m.id] = m
            if m.block_no is not None:
                self._held[m.id] = m
        for i in found:
            if i in self._held:
                self._held.move_to_end(i)
        while len(self._held) > self.limit:
            self._held.popitem(last=False)
        return list(found.values())

    @property
    def nbytes(self) -> int:
        return len(self._held) * 700


class NoVectors:
    """The vectors of a thread whose index is still being read (in the background): nothing to
    search yet, as for a long thread whose FAISS index is being built. Its view takes the
    request's terms, its time and the recent turns; their vectors come from the store."""

    size = 0  # vectors held

    def __init__(self, thread_id: str):
        self.thread_id = thread_id

    def search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros(0, dtype=np.float32), np.zeros(0, dtype=np.int64)

    def vectors_of(self, ids: list[int]) -> dict[int, np.ndarray]:
        return {}


def candidate_view(store: StoreReader, vectors: ThreadVectors | NoVectors, cache: ClosedMessages, marker: Marker,
                   query: np.ndarray | None, keywords: KeywordResult | None, dim: int,
                   segmenter: Segmenter, recent: int = RECENT_VIEW, listing: bool = False,
                   carried: Carried | None = None, run_on: bool = False) -> ThreadIndex:
    """`recent`: the newest messages wanted whole (at least `RECENT_VIEW`); `listing`: a topic
    request's stretches left out are named (`list_stretches`); `carried`: what the cache
    layout's last prompt held, which the view holds too; `run_on`: the talk after a topic
    request's mentions goes on into the next block (`mentions_run_on`)."""
    thread_id = vectors.thread_id
    nearest = query is None or vectors.size > 0  # no vectors read yet: no nearest messages to search
    chosen = _dense_blocks(store, vectors, query) if query is not None else []
    if keywords is not None:
        k = TOPIC_LEXICAL_BLOCKS if keywords.intent == TOPIC and listing else LEXICAL_BLOCKS
        found = [no for no, _ in store.search_blocks(thread_id, keywords.terms, k)]
        chosen += [no for no in found if no not in chosen]
        if run_on and keywords.intent == TOPIC:  # the next block of each of the best (none: none read)
            chosen += [no + 1 for no in found[:NEXT_BLOCKS] if no + 1 not in chosen]
    region = _region(store, thread_id, carried)
    if carried is not None and carried.contexts:  # the blocks of the retrieval it carries, whole
        owners = store.block_of(thread_id, sorted({i for _, group, _ in carried.contexts for i in group}))
        chosen += sorted({b for b in owners.values() if b is not None and b >= 0 and b not in chosen})
    tail = store.tail(thread_id, with_vectors=False)  # the open block
    fresh = tail + store.system_messages(thread_id) + region
    if keywords is not None and keywords.time_range is not None:
        span = keywords.time_range
        timed = store.in_time(thread_id, span.start.timestamp(), span.end.timestamp(), TIME_MESSAGES)
        fresh += timed  # and its conversations whole, to their end, with the ones around them
        gap = getattr(segmenter, "gap_seconds", None)
        chosen += [no for no in conversation_blocks(store, thread_id, span, timed, gap) if no not in chosen]
    blocks = store.blocks(thread_id, sorted(chosen))
    known = {m.id for m in fresh}
    last = store.last_ids(thread_id, max(RECENT_VIEW, recent))
    wanted = ({i for b in blocks for i in b.message_ids} | set(last)) - known
    stored = sorted({m.id: m for m in fresh + cache.get(store, thread_id, wanted, marker)}.values(),
                    key=lambda m: m.key)
    # the turns: from where the last prompt's started (the newest messages without one), an
    # unbroken run to the thread's end; where they start holds from turn to turn
    run = {m.id for m in region} if region else set(last)
    begins = min((m.key for m in stored if m.id in run), default=None)
    # and the open block from there (a late message stamped long ago sorts far back: not a turn)
    turns = run | {m.id for m in tail if begins is not None and m.key >= begins}
    # which words name a thing (a topic request's listing), and how many blocks the thread has
    # closed: the view's open blocks are numbered after them, as the whole thread's are
    named = keywords is not None and keywords.intent == TOPIC and listing
    frequencies = store.block_frequencies(thread_id, keywords.terms if named else ())
    index = ThreadIndex.build(thread_id, stored, blocks, dim, segmenter, marker=marker, whole=False,
                              vectors=_vectors(store, vectors, stored),  # positions are `stored`'s
                              tail_from=next((p for p, m in enumerate(stored) if m.id in turns), len(stored)),
                              gaps=_gaps(stored, turns, {b.block_no for b in blocks}), closed_blocks=frequencies[1])
    index.history_tokens = marker.tokens  # budgets and compaction price the whole thread
    index.chosen_blocks = len(blocks)
    index.searched_nearest = nearest
    if named:
        index.block_frequencies = frequencies
    return index


def unsearched_note(index: ThreadIndex, marker: Marker) -> str | None:
    """What a view read without the thread's vectors (the first ask of a thread this process has
    not read yet) left out: the asks once they are read search every message, so they may send
    other stretches and more of the budget (a request whose words point to no old block gets
    only the recent turns here)."""
    if index.whole or index.searched_nearest:
        return None
    found = (f"and the {index.chosen_blocks} older blocks the request's words and time point to"
             if index.chosen_blocks else "only: the request's words and time point to no older block")
    return (f"first ask of this thread in this process: searched a view of {len(index.messages):,} of "
            f"{marker.messages:,} messages (the recent turns {found}), without a similarity search, while the "
            "process reads the thread: its later asks search every message and may send other stretches")


def _gaps(stored: list[StoredMessage], turns: set[int], whole: set[int]) -> frozenset[int]:
    """The view's positions whose message does not follow the one before it in the thread:
    neighbours are neighbours there when both are of its unbroken end (`turns`), or of one
    block the view holds whole (the open one too), or of two consecutive ones."""
    out = set()
    for p in range(1, len(stored)):
        a, b = stored[p - 1], stored[p]
        if (a.id in turns and b.id in turns) or (a.block_no is None and b.block_no is None):
            continue  # the open block is read whole too
        blocks = (a.block_no, b.block_no)
        if not (blocks[0] in whole and blocks[1] in whole and blocks[1] - blocks[0] in (0, 1)):
            out.add(p)
    return frozenset(out)


def _region(store: StoreReader, thread_id: str, carried: Carried | None) -> list[StoredMessage]:
    """The cache layout's turns: from where the last prompt's started to the thread's end. The
    view holds them (and what they carried), or its prompt would start again every turn and the
    provider's cache would hold nothing of it. More than `REGION_MESSAGES`: none (it starts again)."""
    if not goes_on(carried):
        return []
    first = store.messages(thread_id, ids=[carried.start])
    last = store.messages(thread_id, last=1)
    if not first or not last:
        return []
    region = store.between(thread_id, (first[0].sort_ts, first[0].id - 1), last[0].key, limit=REGION_MESSAGES + 1)
    return region if len(region) <= REGION_MESSAGES else []


def _dense_blocks(store: StoreReader, vectors: ThreadVectors, query: np.ndarray) -> list[int]:
    _, hits = vectors.search(query, CANDIDATE_HITS)
    owners = store.block_of(vectors.thread_id, [int(i) for i in hits])
    ranked = dict.fromkeys(owners[int(i)] for i in hits if owners.get(int(i)) is not None)
    return [b for b in ranked if b >= 0][:DENSE_BLOCKS]  # best-ranked first


def _vectors(store: StoreReader, vectors: ThreadVectors, stored: list[StoredMessage]) -> dict[int, np.ndarray]:
    """Vectors come from the FAISS index in memory, not as 2 KB blobs over the wire; what it
    does not hold yet (stored by another process a moment ago) is read from the store."""
    searchable = [m.id for m in stored if m.role != "system"]
    found = vectors.vectors_of(searchable)
    missing = [i for i in searchable if i not in found]
    if missing:
        found.update({m.id: m.vector for m in store.messages(vectors.thread_id, ids=missing, with_vectors=True)
                      if m.vector is not None})
    return found


# -- the thread's end, for the strategies that do not search ---------------------------------
PAGE = 256  # newest messages read first; each further read takes four times as many
# The largest context windows offered (1M tokens): a thread's end read for one prompt past
# this could never be sent, and reading it would cost more than any ask may.
MAX_PAGED_TOKENS = 1_000_000
# The least a tool result can cost in a prompt: a budget may show it as its placeholder.
LEAST_RESULT = count_message({"role": "tool", "content": placeholder("", "", 0)})


@dataclass(frozen=True)
class Reach:
    """How much of its end a strategy that does not search can send: more than `messages`
    non-system messages, and messages costing at least `tokens` (None: all of them) plus
    `share` of the operator instructions (a share of the thread counts them too). The current
    turn and the last two exchanges are always read whole."""

    messages: int = 0
    tokens: int | None = 0
    share: float = 0.0


def reach_for(asker: Asker, name: str, budget: Budget | None, request: str, marker: Marker) -> Reach:
    """How far back a strategy that does not search sends a thread's end (read only of a
    thread past `view_limit`): the window's messages, the budget's tokens, or all of it."""
    s = asker.settings
    share = budget.value if budget is not None and budget.relative else 0.0
    if name == "window":
        return Reach(messages=s.window)
    if budget is not None and budget.billed:
        tokens: int | None = asker.billed_limit(budget)
    elif budget is not None:  # the thread's instructions are added by the view, which reads them
        tokens = budget.tokens(marker.tokens + fixed_cost(Thread("", ()), request, s.system_prompt,
                                                                     asker.closing))
    else:
        tokens = s.history_budget if name in BUDGETED else None
    return Reach(messages=s.recent + 1 if name in BUDGETED else 0, tokens=tokens, share=share)


def end_view(store: StoreReader, thread_id: str, marker: Marker, reach: Reach) -> ThreadIndex:
    """The newest messages of a thread past `view_limit`, as far back as `reach`, and every
    operator instruction: built like a candidate view, never searched."""
    wanted = marker.tokens if reach.tokens is None else min(reach.tokens, marker.tokens)
    if wanted > MAX_PAGED_TOKENS:
        what = "every message" if reach.tokens is None else f"{reach.tokens:,} tokens of messages"
        raise TooLongError(f"thread {thread_id} has {marker.messages:,} messages ({marker.tokens:,} tokens): "
                           f"sending {what} is more than one prompt can hold ({MAX_PAGED_TOKENS:,} tokens "
                           "are read at most); give a smaller budget (e.g. --budget 100000) or a strategy that "
                           "searches (blocks)")
    system = store.system_messages(thread_id)
    if reach.tokens is None:
        stored = store.messages(thread_id)
    else:
        n = PAGE
        while True:
            stored = store.messages(thread_id, last=n)
            if len(stored) < n or _reaches(stored, system, reach):
                break
            n *= 4
    held = {m.id for m in stored}
    stored = sorted(stored + [m for m in system if m.id not in held], key=lambda m: m.key)
    closed = sorted({m.block_no for m in stored if m.block_no is not None and m.block_no >= 0})
    # no vectors (one zero dimension): nothing searches this view
    index = ThreadIndex.build(thread_id, stored, store.blocks(thread_id, closed) if closed else (), 1,
                              _UNSEARCHED, marker=marker, whole=False)
    index.history_tokens = marker.tokens  # budgets price the whole thread
    return index


def _reaches(stored: list[StoredMessage], system: list[StoredMessage], reach: Reach) -> bool:
    """Whether the newest messages read hold what the strategy can send: its oldest turn may
    be cut, so one message more than it counts, and tokens priced at their least (a tool
    result as its placeholder, the request sent in place of its stored copy)."""
    turns = [m for m in stored if m.role != "system"]
    users = [k for k, m in enumerate(turns) if m.role == "user"]
    least = sum(min(m.tokens, LEAST_RESULT) if m.role == "tool" else m.tokens for m in turns) - (
        turns[users[-1]].tokens if users else 0)
    if least >= MAX_PAGED_TOKENS:  # more than any prompt holds: nothing older could be sent
        return True
    if len(users) <= PROTECTED_UNITS or len(turns) <= reach.messages:
        return False
    return least >= (reach.tokens or 0) + reach.share * sum(m.tokens for m in system)


class _Unsearched:
    """The segmenter of an end view: its open tail by time alone (it has no vectors)."""

    def segment(self, messages, vectors=None, history=()):
        return TimeGapSegmenter().segment(messages, None)


_UNSEARCHED = _Unsearched()
