"""History strategies: each decides what goes into the prompt, behind one interface.

Every strategy returns a Selection; `assemble.fit` turns it into messages within the
budget, so the boundary rules (system prompt intact, history starts on a user turn, tool
call and result together, last exchanges verbatim) hold for all of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from indexers.errors import ConfigError
from indexers.index.thread_index import ThreadIndex
from indexers.model import Thread
from indexers.settings import Settings
from indexers.tokens import count_text

from .assemble import CONTEXT_OVERHEAD, fixed_cost, history_cost, render_memory
from .keyword import TOPIC, KeywordResult
from .search import block_max, dense_rows, fused_blocks, fused_rows, score_messages
from .select import MemoryResult, Retrieved, Selection, last_units, line_cost, pack

# (alternatives largest first, cosine shown to the user or None for a time match, block id);
# candidates are packed in list order, which is the rank order
Candidate = tuple[tuple[tuple[int, ...], ...], "float | None", "int | None"]


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
        return Selection(tuple(Retrieved((p,), s, rank) for rank, (p, s) in enumerate(hits)), recent)


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
            candidates += _in_range(thread, index, plan)
        if plan.intent == TOPIC:
            candidates += _topic(index, dense, plan, s, relative=max_groups is not None)
        else:
            candidates += _facts(index, dense, plan, s.hit_window)
        mem = inp.memory
        if mem is not None and inp.budget_tokens is not None:
            budget -= _memory_cost(thread, mem)
        retrieved = pack(candidates, lambda p: line_cost(thread, p), budget, kept, max_groups)
        if mem is None:
            return Selection(tuple(retrieved), recent)
        return Selection(tuple(retrieved), recent, mem.summary, mem.notes, _quoted(index, mem))


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
    """Positions of `row` and `width` neighbours each side, within the row's block."""
    first, end = index.block_rows
    b = index.row_block[row]
    lo, hi = max(first[b], row - width), min(end[b], row + width + 1)
    return tuple(index.rows[lo:hi])


def _in_range(thread: Thread, index: ThreadIndex, plan: KeywordResult) -> list[Candidate]:
    """The named time's messages, block by block, in chronological order, before anything else."""
    out = []
    for block in index.blocks:
        ids = tuple(p for p in block.message_ids if plan.time_range.contains(thread.messages[p].timestamp))
        if ids:
            out.append(((ids,), None, block.id))
    return out


def _topic(index: ThreadIndex, dense: np.ndarray, plan: KeywordResult, s: Settings,
           relative: bool) -> list[Candidate]:
    """Whole blocks by hybrid block score; a block too big for what is left offers its topic
    sub-segment around the best message, then a window."""
    scores = fused_blocks(index, dense, plan.terms)
    best_dense = block_max(index, dense)
    fused = fused_rows(index, dense, plan.terms)
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
        offset = int(np.argmax(fused[first[b]:end[b]]))
        block = index.blocks[b]
        out.append(((block.message_ids, block.part_of(offset), _window(index, first[b] + offset, s.hit_window)),
                    float(best_dense[b]), block.id))
    return out


def _facts(index: ThreadIndex, dense: np.ndarray, plan: KeywordResult, width: int,
           limit: int = 400) -> list[Candidate]:
    """Windows around the best messages by fused dense + BM25 rank."""
    fused = fused_rows(index, dense, plan.terms)
    rows = np.argsort(-fused, kind="stable")[:limit]
    return [((_window(index, int(r), width), (index.rows[r],)), float(dense[r]),
             int(index.row_block[r])) for r in rows]


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
                   memory: MemoryResult | None = None, closing: str | None = None) -> StrategyInput:
    return StrategyInput(index.thread, index.turn_units, settings, index, query_vector, keywords, request,
                         budget_tokens, memory, closing)
