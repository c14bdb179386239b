"""The summary and the structured list for one ask: brought up to date from the store,
compacting only when the prompt would pass `summary_trigger` of its budget."""

from __future__ import annotations

from dataclasses import dataclass

from semhist.kernel.errors import BackendError, ConfigError
from semhist.indexers.index.thread_index import ThreadIndex
from semhist.kernel.settings import Settings
from semhist.indexers.store import Key, SQLStore, SummaryRecord
from semhist.indexers.store.rows import now_iso
from semhist.kernel.tokens import count_text

from ..llm import LLMClient
from ..pipeline.assemble import day, fixed_cost, history_cost, render_memory
from ..pipeline.select import MemoryResult, Selection, last_units
from ..pipeline.strategies import get_strategy
from .compaction import Compactor

NEEDS_LLM_HINT = ("set OPENAI_BASE_URL/OPENAI_API_KEY (or AZURE_OPENAI_*) and SEMHIST_LLM_MODEL, "
                  "or run semhist llm-server")


def memory_needs(strategy: str, settings: Settings) -> frozenset[str]:
    """What compaction must provide before `strategy` selects: "summary", "notes"."""
    needs = set(get_strategy(strategy).memory)
    if strategy == "blocks":
        needs |= {"none": set(), "structured": {"notes"}, "summary": {"summary", "notes"}}[settings.blocks_memory]
    return frozenset(needs)


@dataclass(frozen=True)
class MemoryPlan:
    """What one ask's compaction will do, decided from the thread's index."""

    thread_id: str
    needs: frozenset[str]
    aged: Key | None  # the newest message older than the recent turns
    compact: bool  # the prompt would pass `summary_trigger` of its budget
    room: int  # tokens the summary may take


def check_llm(needs: frozenset[str], llm: LLMClient | None) -> None:
    """A strategy that compacts needs an LLM: say so before any work."""
    if needs and llm is None:
        raise ConfigError(f"{' and '.join(sorted(needs))} need{'s' if len(needs) == 1 else ''} an LLM: "
                          + NEEDS_LLM_HINT)


class Memory:
    def __init__(self, store: SQLStore, llm: LLMClient | None, settings: Settings, closing: str | None = None):
        self.store, self.llm, self.settings, self.closing = store, llm, settings, closing

    def plan(self, index: ThreadIndex, needs: frozenset[str], request: str, limit: int | None) -> MemoryPlan:
        s = self.settings
        check_llm(needs, self.llm)
        recent = last_units(index.messages, index.turn_units, s.recent)
        recent_start = recent[0][0] if recent else len(index)
        aged = index.keys[recent_start - 1] if recent_start > 0 else None
        compact = "summary" in needs and aged is not None and self._should_compact(index, recent, request, limit)
        return MemoryPlan(index.thread_id, needs, aged, compact, max(60, (limit or s.history_budget) // 3))

    def run(self, plan: MemoryPlan) -> MemoryResult:
        """Bring the summary and/or the user statements up to date (the LLM calls happen
        here); LLM failures keep what exists and say so."""
        thread_id, needs, result = plan.thread_id, plan.needs, MemoryResult()
        calls = self.settings.compaction_calls
        compactor = Compactor(self.llm, self.store)
        try:
            self._start(plan)
            result.summary = self.store.summary(thread_id)
            if plan.compact:
                result.summary = compactor.summarize_through(thread_id, plan.aged, result, max_tokens=plan.room,
                                                             calls=calls)
            if "notes" in needs:
                through = plan.aged if "summary" not in needs else (result.summary.upto if result.summary else None)
                if through is not None:
                    compactor.extract_through(thread_id, through, result, calls=calls - result.llm_calls)
        except BackendError as exc:
            result.problems.append(f"compaction failed, older turns stay verbatim where they fit: {exc}")
            result.summary = self.store.summary(thread_id)
        if result.backlog:
            result.problems.append("compaction is catching up with older messages over the next asks "
                                   f"(at most {calls} LLM calls an ask)")
        if "summary" not in needs:
            result.summary = None
        if "notes" in needs:
            latest = {n.quote: n for n in self.store.notes(thread_id)}  # said twice: kept once, the newest
            result.notes = tuple(sorted(latest.values(), key=lambda n: (n.source_ts or 0.0, n.source_id)))
        return result

    def _start(self, plan: MemoryPlan) -> None:
        """On a thread compaction has never read, start `compaction_lookback` messages back:
        what is older is left to retrieval (an imported history is not read by the LLM)."""
        lookback, store, thread_id = self.settings.compaction_lookback, self.store, plan.thread_id
        if not lookback or plan.aged is None:
            return
        start = None
        if "notes" in plan.needs and store.notes_progress(thread_id) is None:
            start = store.key_before(thread_id, plan.aged, lookback)
            if start is not None:
                store.record_extraction(thread_id, start, None, self.llm.model, 0.0)
        if plan.compact and store.summary(thread_id) is None:
            start = start or store.key_before(thread_id, plan.aged, lookback)
            if start is not None:
                covered = store.tokens_through(thread_id, start)
                store.put_summary(thread_id, SummaryRecord(
                    start, f"(the conversation before {day(start[0])} is not summarized)", "none", covered, now_iso(),
                    start[0], start[0]), 0.0)

    def _should_compact(self, index: ThreadIndex, recent, request: str, limit: int | None) -> bool:
        s = self.settings
        summary = self.store.summary(index.thread_id)
        recent_cost = history_cost(index.thread, [p for u in recent for p in u])
        aged_cost = index.history_tokens - (summary.covered_tokens if summary else 0) - recent_cost
        if aged_cost <= 0:
            return False
        memory = render_memory(Selection(summary=summary))
        total = (fixed_cost(index.thread, request, s.system_prompt, self.closing) + (count_text(memory) if memory else 0)
                 + aged_cost + recent_cost)
        return total > s.summary_trigger * (limit or s.history_budget)
