"""One request against a stored thread: the keyword once, then for each strategy the thread's
view (the whole index, or a long thread's candidate view or its end), the budget, memory
(summaries, statements: LLM calls made outside the thread's lock), the prompt, the answer, and
the turn logged. `History.ask` and `History.compare` come here; nothing here is kept between
requests."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterable
from typing import Any
from dataclasses import replace

from semhist.indexers.index.thread_index import ThreadIndex
from semhist.indexers.store import Marker
from semhist.kernel.budget import Budget
from semhist.kernel.settings import Settings
from semhist.kernel.validate import check_request

from ..billing import shared_marks
from ..memory import Memory, check_llm, memory_needs
from ..pipeline import AskResult, Asker, get_strategy
from ..pipeline.asker import ANSWER_GUIDANCE, answer_reminder
from ..pipeline.assemble import floor_cost
from ..pipeline.elsewhere import Excerpt
from ..pipeline.select import Carried, goes_on
from .parts import Parts
from .states import Entry
from .timeview import on_their_clocks
from .turns import kept_prompt, prefix_marks, previous_marks, turn_record
from .views import NoVectors, Reach, candidate_view, end_view, reach_for, unsearched_note


# Asking a stored thread without logging the turn, in the cache layout: the next ask carries the
# last *logged* prompt, not this one (cost.md, "Two layouts").
UNLOGGED = ("cache layout without the turn log: this prompt carries what the last logged ask held, and "
            "the next ask will not carry this one (a bot's asks log their turns, log_turn=True, to keep the "
            "prompt's start)")

# Turn-log records read for the cache layout: the newest of the strategy holds its whole state,
# and a bot asks with one strategy (a `compare` of several writes one record each).
CARRIED_TURNS = 16


def compare(parts: Parts, current: Callable[[], tuple[Entry, Marker]], thread_id: str, request: str,
            strategies: Iterable[str], *, budget: Budget | None, answer: bool, log_turn: bool | None, keywords,
            strict: bool, system_prompt: str | None, closing: str | None,
            elsewhere: Callable[[Any, Any], tuple[Excerpt, ...]] | None = None) -> list[AskResult]:
    """The prompt for `request` under each strategy (see `History.compare`); `current` reads
    the thread's entry and marker once the request and strategies are known to be valid.
    `elsewhere(vector, keywords)`: stretches of other threads (a request beyond its thread).
    `log_turn` None: a file's thread, never logged."""
    settings: Settings = parts.settings
    start = time.perf_counter()
    check_request(request, settings.max_message_chars)
    asker, memory_ = parts.asker, parts.memory
    if answer and system_prompt is None and not settings.system_prompt:
        system_prompt, closing = ANSWER_GUIDANCE, answer_reminder(request)
    if system_prompt:
        check_request(system_prompt, settings.max_message_chars, what="system prompt")
    if system_prompt is not None or closing:  # counted in the budget like the configured one
        changed = replace(settings, system_prompt=(settings.system_prompt if system_prompt is None
                                                   else system_prompt or None))
        asker = Asker(changed, parts.embedder, parts.llm, closing)
        memory_ = Memory(parts.store, parts.llm, changed, closing)
    names = []
    for name in strategies:
        get_strategy(name)  # an unknown name fails before any work
        needs = memory_needs(name, settings)
        if strict:
            check_llm(needs, parts.llm)
        if parts.llm is not None or not needs:
            names.append(name)
    entry, marker = current()
    if keywords is None and any(get_strategy(n).uses_search for n in names):
        keywords = asker.keywords(request, _anchor(parts, entry, marker))
    if keywords is not None and keywords.time_range is not None:
        keywords = replace(keywords, time_range=on_their_clocks(parts.store, thread_id, keywords.time_range))
    vector = asker.query_vector(keywords) if keywords is not None else None
    # other threads are searched before this one's lock is taken, each under its own
    found = elsewhere(vector, keywords) if elsewhere is not None and vector is not None else ()
    masker = parts.ingestor.masker(marker.pii)  # the thread's masking came with its marker
    as_stored = masker(request) if masker else None
    # the previous prompts: what the cache layout carries over, and what a cache holds of this one
    cache = settings.layout_for(budget) == "cache"
    unlogged = cache and log_turn is False
    if unlogged:
        warnings.warn(UNLOGGED, stacklevel=4)  # the caller of History.ask
    logged = parts.store.turns(thread_id, CARRIED_TURNS if cache else len(names)) if cache or log_turn else []
    out = []
    for name in names:
        began = time.perf_counter()
        reach = None if get_strategy(name).uses_search else reach_for(asker, name, budget, request, marker)
        carried = Carried.from_turns(logged, name) if cache else None
        with entry.lock:
            index = _searched(parts, entry, marker, vector, keywords, reach, carried, _fills(settings, budget, carried))
            viewed = time.perf_counter()
            applied, raised = _floored(asker, index, request, budget, as_stored)
            needs = memory_needs(name, settings)
            plan = memory_.plan(index, needs, request, asker.limit(index, request, name, applied)) \
                if needs else None
        memory = memory_.run(plan) if plan else None  # LLM calls: the thread stays open to writes
        with entry.lock:
            if memory is not None and index.whole:
                index = _searched(parts, entry, parts.store.marker(thread_id) or marker, vector, keywords, reach,
                                  carried, _fills(settings, budget, carried))
            result = asker.ask(index, request, strategy=name, budget=applied, keywords=keywords,
                               vector=vector, memory=memory, as_stored=as_stored,
                               carried=carried, elsewhere=found)
        marks = prefix_marks(result.prompt.messages) if logged or log_turn else []
        before = previous_marks(logged, name)
        if before is not None:
            result = replace(result, cached_tokens=shared_marks(before, marks))
        result = _noted(result, index, budget, raised, marker)
        if unlogged:
            result = replace(result, prompt=replace(result.prompt, notes=(*result.prompt.notes, UNLOGGED)))
        if answer:  # one deadline for the request analysis and the answer
            result = asker.answer(result, timeout=settings.llm_timeout - (time.perf_counter() - start))
        if log_turn:
            timings = {"view_ms": round((viewed - began) * 1000, 2),
                       "total_ms": round((time.perf_counter() - (start if not out else began)) * 1000, 2)}
            parts.store.log_turn(thread_id, turn_record(result, index, masker, timings, marks,
                                                             "cache" if cache else "head"),
                                 kept_prompt(result, masker) if settings.log_prompts else None)
        out.append(result)
    return out


def _fills(settings: Settings, budget: Budget | None, carried: Carried | None) -> bool:
    """Whether `blocks` packs this request up to its budget, where `mentions_first` acts: a
    budget, `fill_budget`, and no earlier prompt the cache layout goes on from."""
    return budget is not None and settings.fill_budget and not goes_on(carried)


def _searched(parts: Parts, entry: Entry, marker: Marker, vector, keywords, reach: Reach | None = None,
              carried: Carried | None = None, fills: bool = False) -> ThreadIndex:
    """What this request reads: the whole thread, or of a long thread a candidate view
    (searching strategies; holding what the cache layout's last prompt held, `carried`) or its
    end as far back as `reach` (the others). `fills`: a budget the request is packed up to."""
    parts.states.current(entry, marker)
    if entry.index is not None:
        return entry.index
    if reach is not None:
        return end_view(parts.store, entry.thread_id, marker, reach)
    # a thread being read whole in the background: its first asks search the store's candidates
    vectors = entry.vectors if entry.vectors is not None else NoVectors(entry.thread_id)
    return candidate_view(parts.store, vectors, entry.closed, marker, vector, keywords, parts.embedder.dim,
                          parts.segmenter, recent=parts.settings.recent + 1, listing=parts.settings.list_stretches,
                          carried=carried,
                          run_on=fills and parts.settings.mentions_first and parts.settings.mentions_run_on)


def _anchor(parts: Parts, entry: Entry, marker: Marker):
    """The time of the thread's last message: relative dates ("last week") count from it."""
    index = entry.index
    if index is not None and index.marker == marker:
        return index.last_time
    last = [m for m in parts.store.messages(entry.thread_id, last=1) if m.timestamp]
    return last[-1].timestamp if last else None


# -- budgets and what a long thread's view left out ------------------------------------------
def _floored(asker: Asker, index: ThreadIndex, request: str, budget: Budget | None,
             as_stored: str | None) -> tuple[Budget | None, bool]:
    """The budget applied, and whether a share was raised to its floor (`floor_cost`): a share
    of a young thread is too small for the conversation it must carry on."""
    if budget is None or not budget.relative:
        return budget, False
    s = asker.settings
    full = asker.full_tokens(index, request)
    floor = floor_cost(index.thread, index.turn_units, request, s.system_prompt, asker.closing, as_stored)
    tokens = budget.tokens(full, floor)
    return Budget(float(tokens), False), tokens > budget.tokens(full)


def _noted(result: AskResult, index: ThreadIndex, budget: Budget | None, raised: bool, marker: Marker) -> AskResult:
    """The result with notes on what the budget or a long thread's view changed."""
    notes = []
    if raised:
        notes.append(f"the {budget} budget was raised to {result.budget_tokens} tokens: what the system prompt, "
                     "the request and the last two exchanges need")
    if result.strategy == "full" and not index.whole and result.budget_tokens is None:
        notes.append(f"the thread has {marker.messages:,} messages, more than view_limit: every one was read "
                     "from the store for `full`")
    unsearched = unsearched_note(index, marker)
    if unsearched:
        notes.append(unsearched)
    if not notes:
        return result
    return replace(result, prompt=replace(result.prompt, notes=(*notes, *result.prompt.notes)))
