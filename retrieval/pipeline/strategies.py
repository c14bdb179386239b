"""History strategies: each decides what goes into the prompt, behind one interface.

Every strategy returns a Selection; `assemble.fit` turns it into messages within the
budget, so the boundary rules (system prompt intact, history starts on a user turn, tool
call and result together, last exchanges verbatim) hold for all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from itertools import chain
from typing import Protocol

import numpy as np

from semhist.kernel.errors import ConfigError
from semhist.indexers.index.thread_index import ThreadIndex
from semhist.kernel.model import Thread
from semhist.kernel.settings import Settings
from semhist.kernel.tokens import count_message, count_text

from .assemble import context_overhead, context_cost, fixed_cost, render_context, render_memory
from .cached import cached_part, region_of, turns_cap
from .keyword import TOPIC, KeywordResult
from .listing import LINE_SHARE, about, listed, reserve, unshown
from .mentions import Mentions, cover_boost, mention_rows, mentions_first
from .named_time import in_range
from .search import author_boost, block_max, dense_rows, fused_blocks, fused_rows, score_messages, searched_terms
from .select import (Candidate, Carried, Earlier, MemoryResult, Retrieved, Selection, clearable_results, line_cost,
                     pack, protected_count, shown_cost, stable_units)


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
    start: int | None = None  # cache layout: where the previous prompt's turns started (a position)
    earlier: tuple[Earlier, ...] = ()  # cache layout: earlier turns' retrieved history, by position
    billed: int | None = None  # cache layout: a billed budget (what is new each turn is held to it)
    step: int = 1  # cache layout, after an earlier prompt: recent turns are cut back this many at a time


class Strategy(Protocol):
    name: str
    uses_search: bool
    memory: frozenset[str]  # what compaction must provide first: "summary", "notes"

    def select(self, inp: StrategyInput) -> Selection: ...


class Full:
    """Every message (a budget then keeps the newest that fit). Of a thread past `view_limit`
    the history reads every message from the store for it, or as many of the newest as the
    budget can hold (retrieval/history/views.py `end_view`): never a search's candidates."""

    name, uses_search, memory = "full", False, frozenset()

    def select(self, inp: StrategyInput) -> Selection:
        return Selection(history=inp.units)


class Window:
    """The last N messages, cut on a user turn."""

    name, uses_search, memory = "window", False, frozenset()

    def select(self, inp: StrategyInput) -> Selection:
        return Selection(history=stable_units(inp.thread.messages, inp.units, inp.settings.window,
                                             inp.step))


class TokenBudget(Full):
    """The newest messages that fit the token budget (`history_budget` when none is given):
    everything is offered and `assemble.fit` drops the oldest turns. In the cache layout the
    turns start where the previous prompt's did until they pass the budget, then again from
    the recent turns: a prompt that slid one turn at a time would change every turn."""

    name = "token-budget"

    def select(self, inp: StrategyInput) -> Selection:
        # with no earlier prompt (the first ask, a file) the budget is filled as in the head layout
        if inp.budget_tokens is None or inp.start is None:
            return super().select(inp)
        fixed = fixed_cost(inp.thread, inp.request, inp.settings.system_prompt, inp.closing)
        cap = inp.budget_tokens - fixed if inp.billed is None else turns_cap(inp, fixed)
        region, _, restarted = region_of(replace(inp, earlier=()), cap)
        return Selection(history=region, restarted=restarted)


class Utterances:
    """Per-utterance semantic top-k plus the recent turns (the worked example's methods 2/3)."""

    name, uses_search, memory = "utterances", True, frozenset()

    def select(self, inp: StrategyInput) -> Selection:
        recent = stable_units(inp.thread.messages, inp.units, inp.settings.recent, inp.step)
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
        recent = stable_units(thread.messages, inp.units, s.recent, inp.step)
        cleared: tuple[int, ...] = ()
        earlier: tuple[Earlier, ...] = ()
        fresh, restarted = None, True
        # the cache layout carries on from an earlier prompt; with none (the first ask, a file)
        # the recent turns are chosen as in the head layout
        if inp.budget_tokens is not None and inp.start is not None:
            recent, earlier, fresh, restarted = cached_part(inp)
        elif inp.budget_tokens is not None:
            recent, cleared = _within_share(thread, recent, RECENT_SHARE * inp.budget_tokens, inp.request)
        kept = frozenset(p for u in recent for p in u) | {p for e in earlier for p in e.retrieved.message_ids}
        dense = dense_rows(index, inp.query_vector)
        budget, max_groups = s.context_tokens, s.top_n
        if inp.budget_tokens is not None:
            room = inp.budget_tokens - fixed_cost(thread, inp.request, s.system_prompt, inp.closing) \
                - shown_cost(thread.messages, (p for u in recent for p in u), cleared) - context_overhead() \
                - sum(e.tokens for e in earlier)
            if fresh is not None:  # the cache layout: what is new each turn is billed in full, so
                # it is held to the budget's room and to the best `top_n` groups, never filled up
                room = min(room, fresh)
            # a budget is always a cap; with fill_budget it is also the target
            budget, max_groups = (room, None) if s.fill_budget and fresh is None else (min(room, budget), max_groups)
        terms = searched_terms(index, plan.terms)
        boost = author_boost(index, plan.terms) if s.author_boost else None  # the people it names
        long = plan.intent == TOPIC and not index.whole  # a thing's words are everywhere (mentions.py)
        if long and s.term_cover:  # and the blocks that name its thing
            cover = cover_boost(index, terms)
            boost = cover if boost is None else boost if cover is None else boost + cover
        # under a budget it fills, the rows that mention its thing
        mentioned = mention_rows(index, terms) if long and s.mentions_first and max_groups is None else None

        def candidates(room: int) -> Iterable[Candidate]:  # made afresh for each packing: read as packed
            timed = _in_range(thread, index, plan, s.gap_seconds) if plan.time_range is not None else []
            if plan.intent == TOPIC:
                return chain(timed, _topic(index, dense, terms, s, relative=max_groups is not None, boost=boost,
                                           mentions=None if mentioned is None else Mentions(
                                               mentioned, room, s.gap_seconds if s.mentions_run_on else None)))
            return chain(timed, _facts(index, dense, terms, s.hit_window, boost=boost))

        mem = inp.memory
        if mem is not None and inp.budget_tokens is not None:
            budget -= _memory_cost(thread, mem)
        cost = lambda p, whole: line_cost(thread, p, whole)  # noqa: E731
        retrieved, left = pack(candidates(budget), cost, budget, kept, max_groups, count_kept=fresh is not None)
        named: tuple[int, ...] = ()
        # a topic request under a budget it fills: the stretches about it that did not fit are named,
        # each by a dated line, the budget's last verbatim stretches making room for the lines
        found = about(index, terms) if (s.list_stretches and plan.intent == TOPIC and inp.budget_tokens is not None
                                        and max_groups is None and plan.time_range is None) else []
        lines = reserve(index, found, kept | {p for r in retrieved for p in r.message_ids}, budget)
        if lines:
            retrieved, left = pack(candidates(budget - lines), cost, budget - lines, kept, max_groups)
            named = _named(thread, index, found, kept, retrieved, budget)
        if mem is None:
            return Selection(tuple(retrieved), recent, cleared=cleared, earlier=earlier, restarted=restarted,
                             left_out=tuple(left), listed=named)
        return Selection(tuple(retrieved), recent, mem.summary, mem.notes, _quoted(index, mem), cleared, earlier,
                         restarted, left_out=tuple(left), listed=named)


def _named(thread: Thread, index: ThreadIndex, found, kept: frozenset[int], retrieved: list[Retrieved],
           budget: int) -> tuple[int, ...]:
    """The lines for the stretches about the request left out, in what the stretches, as
    rendered, leave of `budget` (packing prices a stretch's date header by its mean); while not
    every stretch is named, the lowest-ranked stretch makes room, up to the lines' share."""
    while True:
        shown = kept | {p for r in retrieved for p in r.message_ids}
        rendered = count_message({"role": "user", "content": render_context(thread, tuple(retrieved))})
        room = budget - (rendered - context_overhead())
        named = listed(index, found, shown, room)
        if len(named) >= len(unshown(index, found, shown)) or len(retrieved) <= 1 or room >= LINE_SHARE * budget:
            return named
        retrieved.pop()


# At a tight budget the recent turns beyond the protected last exchanges may take at most
# this share of it: at 5% of a JMultiWOZ thread (about 650 tokens) six recent messages took 36%.
RECENT_SHARE = 0.25


def _within_share(thread: Thread, recent: tuple[tuple[int, ...], ...], limit: float,
                  request: str) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]:
    """The newest of the `recent` units that cost at most `limit`, never fewer than the
    protected last exchanges (and the current turn), and the tool results shown as
    placeholders: a turn's results are cleared before the turn is dropped."""
    keep = protected_count(thread.messages, recent, request)
    cleared: set[int] = set()
    while len(recent) > keep and shown_cost(thread.messages, (p for u in recent for p in u), cleared) > limit:
        found = clearable_results(thread.messages, recent[0], cleared)
        if found:
            cleared.update(found)
        else:
            recent = recent[1:]
    return recent, tuple(sorted(p for u in recent for p in u if p in cleared))


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
    """The conversations that started in the named time, to their end, before anything else
    (named_time.in_range); for a request that names nothing but the time, then the
    conversations around it: a search for no topic would find unrelated talk."""
    return in_range(thread.messages, index.blocks, plan.time_range, gap_seconds, around=not plan.keywords)


def _topic(index: ThreadIndex, dense: np.ndarray, terms: list[str], s: Settings,
           relative: bool, boost: np.ndarray | None = None,
           mentions: Mentions | None = None) -> list[Candidate]:
    """Whole blocks by hybrid block score; a block too big for what is left offers, largest
    first, its topic sub-segment around the best message, shorter stretches around that
    message, and a window. With `mentions`, the blocks that mention the request's thing come
    first, or the stretch around each one's mentions when they do not fit (mentions.py)."""
    scores = fused_blocks(index, dense, terms)
    if boost is not None:
        scores = scores + boost
    best_dense = block_max(index, dense)
    fused = fused_rows(index, dense, terms)
    first, end = index.block_rows
    floor = -np.inf
    if relative and len(best_dense):  # without a budget, a block far weaker than the best is another topic
        floor = best_dense.max() * s.relative_score
    if s.min_score is not None:
        floor = max(floor, s.min_score)
    out, ranked = [], []  # the candidates, and their blocks
    for b in np.argsort(-scores, kind="stable"):
        if best_dense[b] < floor:
            continue
        row = int(first[b]) + int(np.argmax(fused[first[b]:end[b]]))
        out.append((_block_and_parts(index, b, row, s.hit_window), float(best_dense[b]), index.blocks[b].id,
                    index.rows[row]))
        ranked.append(int(b))
    return out if mentions is None else mentions_first(index, out, ranked, mentions)


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
           limit: int = 400, boost: np.ndarray | None = None) -> Iterator[Candidate]:
    """Windows around the best messages by fused dense + BM25 rank (`boost`: per block)."""
    fused = fused_rows(index, dense, terms)
    if boost is not None:
        fused = fused + boost[np.asarray(index.row_block)]
    rows = np.argsort(-fused, kind="stable")[:limit]
    # made as the packer reads them: a budget stops it after a few dozen of the 400
    return ((_fact(index, int(r), width), float(dense[r]), int(index.row_block[r]), index.rows[r]) for r in rows)


def _fact(index: ThreadIndex, row: int, width: int) -> Iterator[tuple[int, ...]]:
    """A hit's window, then the hit and its reply, then the hit alone."""
    yield _window(index, row, width)
    yield tuple(index.rows[row:_reply_end(index, row)])
    yield (index.rows[row],)


STRATEGIES: dict[str, Callable[[], Strategy]] = {
    cls.name: cls for cls in (Full, Window, TokenBudget, Summary, Structured, Utterances, Blocks)
}
NEEDS_LLM = frozenset({"summary", "structured"})


def get_strategy(name: str) -> Strategy:
    """A new strategy by its name in `STRATEGIES`; an unknown name lists the valid ones."""
    try:
        return STRATEGIES[name]()
    except KeyError:
        raise ConfigError(f"unknown strategy {name!r}; valid: {', '.join(STRATEGIES)}") from None


def strategy_input(index: ThreadIndex, settings: Settings, query_vector: np.ndarray | None = None,
                   keywords: KeywordResult | None = None, request: str = "", budget_tokens: int | None = None,
                   memory: MemoryResult | None = None, closing: str | None = None,
                   thread: Thread | None = None, carried: Carried | None = None,
                   billed: int | None = None, step: int = 1) -> StrategyInput:
    """`thread`: the thread as the prompt shows it (old tool results cleared), if not the index's.
    `carried`: the previous prompts' layout (store ids), placed in this index's positions;
    what this index does not hold is left out."""
    start, earlier, thread = None, [], thread or index.thread
    if carried is not None:
        where = index.position
        start = where.get(carried.start) if carried.start is not None else None
        for before, ids, whole in carried.contexts:
            shown = tuple(where[i] for i in ids if i in where)
            if before in where and shown:
                e = Earlier(where[before], Retrieved(shown, None, 0, None, tuple(where[i] for i in whole if i in where)))
                earlier.append(replace(e, tokens=context_cost(thread, e)))
    return StrategyInput(thread, index.turn_units, settings, index, query_vector, keywords, request,
                         budget_tokens, memory, closing, start, tuple(earlier), billed, step)
