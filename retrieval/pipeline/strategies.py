"""History strategies: each decides what goes into the prompt, behind one interface.

Every strategy returns a Selection; `assemble.fit` turns it into messages within the
budget, so the boundary rules (system prompt intact, history starts on a user turn, tool
call and result together, last exchanges verbatim) hold for all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Protocol

import numpy as np

from indexers.errors import ConfigError
from indexers.index.thread_index import ThreadIndex
from indexers.model import Block, Thread
from indexers.settings import Settings
from indexers.tokens import count_text

from .assemble import CONTEXT_OVERHEAD, fixed_cost, history_cost, render_memory
from .keyword import TOPIC, KeywordResult
from .search import block_max, dense_rows, fused_blocks, fused_rows, score_messages, searched_terms
from .select import PROTECTED_UNITS, MemoryResult, Retrieved, Selection, last_units, line_cost, pack

# (alternatives largest first, cosine shown to the user or None for a time match, block id,
# the position the search hit or None); candidates are packed in list order, the rank order
Candidate = tuple[Iterable[tuple[int, ...]], "float | None", "int | None", "int | None"]


@dataclass(frozen=True)
class StrategyInput:
    thread: Thread
    units: tuple[tuple[int, ...], ...]
    settings: Settings
    index: ThreadIndex
    query_vector: np.ndarray | None = None
    keywords: KeywordResult | None = None
    request: str = ""
    budget_tokens: int | None = None  # the hard limit for the whole prompt, when one is set
    memory: MemoryResult | None = None  # the summary and user statements, for strategies that use them
    closing: str | None = None  # a system message the prompt will carry just before the request


class Strategy(Protocol):
    name: str
    uses_search: bool
    memory: frozenset[str]  # what compaction must provide first: "summary", "notes"

    def select(self, inp: StrategyInput) -> Selection: ...


class Full:
    """Every message (a budget then keeps the newest that fit)."""

    name, uses_search, memory = "full", False, frozenset()

    def select(self, inp: StrategyInput) -> Selection:
        return Selection(history=inp.units)


class Window:
    """The last N messages, cut on a user turn."""

    name, uses_search, memory = "window", False, frozenset()

    def select(self, inp: StrategyInput) -> Selection:
        return Selection(history=last_units(inp.thread.messages, inp.units, inp.settings.window))


class TokenBudget(Full):
    """The newest messages that fit the token budget (`history_budget` when none is given):
    everything is offered and `assemble.fit` drops the oldest turns."""

    name = "token-budget"


class Utterances:
    """Per-utterance semantic top-k plus the recent turns (the worked example's methods 2/3)."""

    name, uses_search, memory = "utterances", True, frozenset()

    def select(self, inp: StrategyInput) -> Selection:
        recent = last_units(inp.thread.messages, inp.units, inp.settings.recent)
        kept = {p for u in recent for p in u}
        hits = [(p, s) for p, s in score_messages(inp.index, inp.query_vector, inp.settings.utterance_k + len(kept))
                if p not in kept][: inp.settings.utterance_k]
        return Selection(tuple(Retrieved((p,), s, rank, None, (p,)) for rank, (p, s) in enumerate(hits)), recent)


class Blocks:
    """semhist's own: blocks and hits chosen by hybrid search, packed into the budget by rank,
    merged chronologically with the recent turns.

    A request that names a time takes the messages of that time first. A topic request
    ("what did we say about X", "summarize") takes whole blocks; a fact question takes a
    window of neighbours around each hit (the answer is often the message after the hit).
    """

    name, uses_search, memory = "blocks", True, frozenset()  # + the `blocks_memory` setting

    def select(self, inp: StrategyInput) -> Selection:
        s, thread, index, plan = inp.settings, inp.thread, inp.index, inp.keywords
        recent = last_units(thread.messages, inp.units, s.recent)
        if inp.budget_tokens is not None:
            recent = _within_share(thread, recent, RECENT_SHARE * inp.budget_tokens)
        kept = frozenset(p for u in recent for p in u)
        dense = dense_rows(index, inp.query_vector)
        budget, max_groups = s.context_tokens, s.top_n
        if inp.budget_tokens is not None:
            room = inp.budget_tokens - fixed_cost(thread, inp.request, s.system_prompt, inp.closing) \
                - history_cost(thread, kept) - CONTEXT_OVERHEAD
            # a budget is always a cap; with fill_budget it is also the target
            budget, max_groups = (room, None) if s.fill_budget else (min(room, budget), max_groups)
        candidates: list[Candidate] = []
        if plan.time_range is not None:
            candidates += _in_range(thread, index, plan, s.gap_seconds)
        terms = searched_terms(index, plan.terms)
        if plan.intent == TOPIC:
            candidates += _topic(index, dense, terms, s, relative=max_groups is not None)
        else:
            candidates += _facts(index, dense, terms, s.hit_window)
        mem = inp.memory
        if mem is not None and inp.budget_tokens is not None:
            budget -= _memory_cost(thread, mem)
        retrieved = pack(candidates, lambda p, whole: line_cost(thread, p, whole), budget, kept, max_groups)
        if mem is None:
            return Selection(tuple(retrieved), recent)
        return Selection(tuple(retrieved), recent, mem.summary, mem.notes, _quoted(index, mem))


# At a tight budget the recent turns beyond the protected last exchanges may take at most
# this share of it: at 5% of a JMultiWOZ thread (about 650 tokens) six recent messages took 36%.
RECENT_SHARE = 0.25


def _within_share(thread: Thread, recent: tuple[tuple[int, ...], ...], limit: float) -> tuple[tuple[int, ...], ...]:
    """The newest of the `recent` units that cost at most `limit`, never fewer than the
    protected last exchanges."""
    while len(recent) > PROTECTED_UNITS and history_cost(thread, (p for u in recent for p in u)) > limit:
        recent = recent[1:]
    return recent


class Summary:
    """A rolling LLM summary of everything older than the recent turns, plus the turns that
    aged out since the last compaction, verbatim, plus the recent turns."""

    name, uses_search, memory = "summary", False, frozenset({"summary"})

    def select(self, inp: StrategyInput) -> Selection:
        summary = inp.memory.summary if inp.memory else None
        first = inp.index.position_after(summary.upto) if summary else 0
        history = tuple(u for u in inp.units if u[0] >= first)
        return Selection(history=history, summary=summary)


class Structured(Summary):
    """`summary` plus the structured list of the user's constraints, preferences, decisions
    and facts, quoted from their messages; the summarizer never rewrites it."""

    name, memory = "structured", frozenset({"summary", "notes"})

    def select(self, inp: StrategyInput) -> Selection:
        if inp.memory is None:
            return super().select(inp)
        return replace(super().select(inp), notes=inp.memory.notes, quoted=_quoted(inp.index, inp.memory))


def _quoted(index: ThreadIndex, mem: MemoryResult) -> tuple[int | None, ...]:
    return tuple(index.position.get(n.source_id) for n in mem.notes)


def _memory_cost(thread: Thread, mem: MemoryResult) -> int:
    text = render_memory(Selection(summary=mem.summary, notes=mem.notes))
    return count_text(text) + 8 if text else 0


def _window(index: ThreadIndex, row: int, width: int) -> tuple[int, ...]:
    """Positions of `row` and `width` neighbours each side, within the row's block; a window
    never ends on a question: the reply after it comes too, even from the next block."""
    first, end = index.block_rows
    b = index.row_block[row]
    lo, hi = max(first[b], row - width), min(end[b], row + width + 1)
    return tuple(index.rows[lo:_reply_end(index, hi - 1)])


REPLY_MESSAGES = 2  # a reply longer than this (tool calls and results) is left to its block


def _reply_end(index: ThreadIndex, row: int) -> int:
    """The row after the reply to the user message at `row` (`row + 1` for other messages):
    asked 「ラーメンのトッピングは？」, the best hit is often the earlier question
    「おすすめのトッピングは？」, and the answer is the message after it."""
    rows, messages = index.rows, index.thread.messages
    end = row + 1
    if messages[rows[row]].role != "user":
        return end
    while (end < len(rows) and end - row <= REPLY_MESSAGES and rows[end] == rows[end - 1] + 1
           and messages[rows[end]].role not in ("user", "system")):
        end += 1
    return end


def _in_range(thread: Thread, index: ThreadIndex, plan: KeywordResult, gap_seconds: float) -> list[Candidate]:
    """The conversations that started in the named time, to their end, before anything else.

    "What did we say at 21:00" means the talk that began in that hour, not every message
    stamped 21:xx: each block that starts in the range comes whole (or, when it does not fit,
    its messages in the range), and of a block that began earlier, the topic sub-segments that
    start in the range. Then, at a lower rank, the blocks that carry those on without a pause
    (a conversation cut by the size limit, or by a topic shift inside it).
    """
    messages = thread.messages
    when = plan.time_range.contains
    # a day or an hour names the conversations wanted; a month or a year only narrows a search,
    # and parts of its conversations would crowd out what the search finds
    one_day = plan.time_range.end - plan.time_range.start <= timedelta(days=1)
    first: list[Candidate] = []
    after: list[Candidate] = []
    previous: Block | None = None  # the block before, when it was taken or carried on
    for block in index.blocks:
        ids = block.message_ids
        start = next((messages[p].timestamp for p in ids if messages[p].timestamp), None)
        later_parts = tuple(p for k in block.parts if k and when(messages[ids[k]].timestamp)
                            for p in block.part_of(k))
        taken = ids if when(start) else later_parts
        if taken:
            inside = tuple(p for p in taken if when(messages[p].timestamp))
            first.append(((taken, inside, *(_beginnings(inside) if one_day else ())), None, block.id, None))
        elif previous is not None and _no_pause(messages, previous, block, gap_seconds):
            after.append(((ids, block.part_of(0)), None, block.id, None))
        previous = block if taken or (after and after[-1][2] == block.id) else None
    return first + after


def _beginnings(ids: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Shorter and shorter starts of a conversation, for a budget that cannot hold all of it:
    its beginning says what it was about."""
    step = max(1, len(ids) // 16)  # at most 16 alternatives: each is priced when packed
    return [ids[:n] for n in range(len(ids) - step, 1, -step)]


def _no_pause(messages, before: Block, block: Block, gap_seconds: float) -> bool:
    end, start = messages[before.last].timestamp, messages[block.first].timestamp
    return end is not None and start is not None and (start - end).total_seconds() <= gap_seconds


def _topic(index: ThreadIndex, dense: np.ndarray, terms: list[str], s: Settings,
           relative: bool) -> list[Candidate]:
    """Whole blocks by hybrid block score; a block too big for what is left offers, largest
    first, its topic sub-segment around the best message, shorter stretches around that
    message, and a window."""
    scores = fused_blocks(index, dense, terms)
    best_dense = block_max(index, dense)
    fused = fused_rows(index, dense, terms)
    first, end = index.block_rows
    floor = -np.inf
    if relative and len(best_dense):  # without a budget, a block far weaker than the best is another topic
        floor = best_dense.max() * s.relative_score
    if s.min_score is not None:
        floor = max(floor, s.min_score)
    out = []
    for b in np.argsort(-scores, kind="stable"):
        if best_dense[b] < floor:
            continue
        row = int(first[b]) + int(np.argmax(fused[first[b]:end[b]]))
        out.append((_block_and_parts(index, b, row, s.hit_window), float(best_dense[b]), index.blocks[b].id,
                    index.rows[row]))
    return out


def _block_and_parts(index: ThreadIndex, b: int, row: int, width: int) -> Iterator[tuple[int, ...]]:
    """Block `b` whole, then, largest first, its topic sub-segment around its best message at
    `row`, shorter stretches around that message and a window. Made as the packer reaches the
    block: most blocks of a thread it never reaches."""
    block = index.blocks[b]
    yield block.message_ids
    smaller = [block.part_of(row - int(index.block_rows[0][b])), _window(index, row, width),
               *_stretches(index, b, row)]
    smaller = [ids for ids in dict.fromkeys(smaller) if len(ids) < len(block.message_ids)]
    smaller.sort(key=len, reverse=True)  # stable: a topic sub-segment before a stretch as long
    yield from smaller


# Where a stretch around the best message starts: this share of it comes before the message.
# The talk about a thing mostly follows where it is first named (JMultiWOZ at 5%: 0.736 with
# none before, 0.744 with a fifth to a third, 0.725 centred).
LEAD = 0.25


def _stretches(index: ThreadIndex, b: int, row: int) -> list[tuple[int, ...]]:
    """Shorter and shorter stretches of block `b` around its best message at `row`, for a
    budget that cannot hold the block: the most of it that fits, not only one sub-segment."""
    first, end = index.block_rows
    lo, hi = int(first[b]), int(end[b])
    step = max(1, (hi - lo) // 16)  # at most 16 alternatives: each is priced when packed
    out = []
    for size in range(hi - lo - step, 2, -step):
        start = min(max(lo, row - round(size * LEAD)), hi - size)
        out.append(tuple(index.rows[start:start + size]))
    return out


def _facts(index: ThreadIndex, dense: np.ndarray, terms: list[str], width: int,
           limit: int = 400) -> list[Candidate]:
    """Windows around the best messages by fused dense + BM25 rank."""
    fused = fused_rows(index, dense, terms)
    rows = np.argsort(-fused, kind="stable")[:limit]
    return [((_window(index, int(r), width), tuple(index.rows[r:_reply_end(index, int(r))]), (index.rows[r],)),
             float(dense[r]), int(index.row_block[r]), index.rows[r]) for r in rows]


STRATEGIES: dict[str, Callable[[], Strategy]] = {
    cls.name: cls for cls in (Full, Window, TokenBudget, Summary, Structured, Utterances, Blocks)
}
NEEDS_LLM = frozenset({"summary", "structured"})


def get_strategy(name: str) -> Strategy:
    try:
        return STRATEGIES[name]()
    except KeyError:
        raise ConfigError(f"unknown strategy {name!r}; valid: {', '.join(STRATEGIES)}") from None


def strategy_input(index: ThreadIndex, settings: Settings, query_vector: np.ndarray | None = None,
                   keywords: KeywordResult | None = None, request: str = "", budget_tokens: int | None = None,
                   memory: MemoryResult | None = None, closing: str | None = None,
                   thread: Thread | None = None) -> StrategyInput:
    """`thread`: the thread as the prompt shows it (old tool results cleared), if not the index's."""
    return StrategyInput(thread or index.thread, index.turn_units, settings, index, query_vector, keywords, request,
                         budget_tokens, memory, closing)
