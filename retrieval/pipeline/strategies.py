"""History strategies: each decides what goes into the prompt, behind one interface.

Every strategy returns a Selection; `assemble.fit` turns it into messages within the
budget, so the boundary rules (system prompt intact, history starts on a user turn, tool
call and result together, last exchanges verbatim) hold for all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
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
from .candidates import fact_candidates, time_candidates, topic_candidates
from .mentions import Mentions, mention_rows
from .ranker import get_ranker
from .search import dense_rows, score_messages, searched_terms
from .select import (Candidate, Carried, Earlier, MemoryResult, Retrieved, Selection, clearable_results,
                     current_turn, line_cost, pack, protected_count, shown_cost, stable_units, unit_cost)


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
        if _whole_fits(inp):  # retrieval could only send it again, framed and dated: more tokens
            return Selection(history=inp.units, restarted=inp.start != inp.units[0][0], whole_thread=True)
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
        scores = get_ranker(s.ranker, s.ranker_model).rows(index, plan, dense, s.gap_seconds)
        long = plan.intent == TOPIC and not index.whole  # a thing's words are everywhere (mentions.py)
        # under a budget it fills, the rows that mention its thing
        mentioned = mention_rows(index, terms) if long and s.mentions_first and max_groups is None else None

        def candidates(room: int) -> Iterable[Candidate]:  # made afresh for each packing: read as packed
            timed = time_candidates(thread, index, plan, s.gap_seconds) if plan.time_range is not None else []
            if plan.intent == TOPIC:
                mentions = None if mentioned is None else Mentions(
                    mentioned, room, s.gap_seconds if s.mentions_run_on else None)
                return chain(timed, topic_candidates(index, dense, scores, s, relative=max_groups is not None,
                                                     mentions=mentions))
            return chain(timed, fact_candidates(index, dense, scores, s.hit_window))

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
        room = None if inp.budget_tokens is None else (budget - lines) + context_overhead()
        if mem is None:
            return Selection(tuple(retrieved), recent, cleared=cleared, earlier=earlier, restarted=restarted,
                             left_out=tuple(left), listed=named, room=room)
        return Selection(tuple(retrieved), recent, mem.summary, mem.notes, _quoted(index, mem), cleared, earlier,
                         restarted, left_out=tuple(left), listed=named, room=room)


def _whole_fits(inp: StrategyInput) -> bool:
    """Whether the whole thread, sent as `full` sends it, fits the token budget (a billed
    budget's turns are held to it by the cache layout's own rules: cached.py). Its stored
    current turn costs as `assemble.fit` counts it; counting stops at the budget."""
    if inp.budget_tokens is None or inp.billed is not None or not inp.index.whole or not inp.units:
        return False
    thread, units = inp.thread, inp.units
    current = current_turn(thread.messages, units[-1], inp.request)
    total = fixed_cost(thread, inp.request, inp.settings.system_prompt, inp.closing)
    for i, unit in enumerate(reversed(units)):
        total += unit_cost(thread, unit, (), inp.request if current and i == 0 else None)
        if total > inp.budget_tokens:
            return False
    return True


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
