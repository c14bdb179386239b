"""The facade that wires the stages: index a thread, then request -> prompt (-> answer)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from indexers.build import build_index
from indexers.cache import EmbeddingCache
from indexers.embed import CachedEmbedder, get_embedder
from indexers.errors import BackendError, ConfigError, InputError
from indexers.index import HistoryIndex, thread_fingerprint
from indexers.model import Thread
from indexers.segment import get_segmenter
from indexers.settings import Budget, Settings

from indexers.memory import MemoryStore
from indexers.tokens import count_text

from .assemble import Prompt, fit, fixed_cost, history_cost, render_memory
from .compaction import Compactor, MemoryResult
from .select import Selection, last_units, turn_units
from .keyword import KeywordResult, extract_keywords
from .llm import LLMClient, make_llm
from .search import embed_query
from .strategies import get_strategy, strategy_input


@dataclass(frozen=True)
class AskResult:
    """Everything one request produced: what was searched, what was kept, the prompt."""

    strategy: str
    request: str
    prompt: Prompt
    full_tokens: int
    budget_tokens: int | None
    keywords: KeywordResult | None
    block_scores: dict[int, float] = field(default_factory=dict)
    selection_ms: float = 0.0
    answer: str | None = None
    memory: MemoryResult | None = None

    @property
    def llm_calls(self) -> int:
        return ((self.keywords.llm_calls if self.keywords else 0) + (1 if self.answer is not None else 0)
                + (self.memory.llm_calls if self.memory else 0))

    @property
    def included(self) -> frozenset[int]:
        return self.prompt.selection.included


class Engine:
    """semhist's library entry point. Settings resolve once; backends load on first use."""

    def __init__(self, settings: Settings | None = None, *, llm: LLMClient | None | str = "auto",
                 record: bool = False):
        self.settings = settings or Settings.load()
        self._llm_arg = llm
        self._indexes: dict[str, HistoryIndex] = {}
        self.record = record  # keep per-ask figures for `semhist stats`

    @cached_property
    def memory_store(self) -> MemoryStore:
        return MemoryStore(self.settings.cache_dir / "memory.sqlite3")

    def memory_needs(self, strategy: str) -> frozenset[str]:
        needs = set(get_strategy(strategy).memory)
        if strategy == "blocks":
            needs |= {"none": set(), "structured": {"notes"}, "summary": {"summary", "notes"}}[
                self.settings.blocks_memory]
        return frozenset(needs)

    def memory(self, thread: Thread, needs: frozenset[str], request: str, limit: int | None) -> MemoryResult:
        """Bring the summary and/or the user statements up to date, compacting only when the
        prompt would pass `summary_trigger` of its budget; LLM failures keep what exists."""
        s = self.settings
        if self.llm is None:
            raise ConfigError(f"{' and '.join(sorted(needs))} need{'s' if len(needs) == 1 else ''} an LLM: set OPENAI_BASE_URL/OPENAI_API_KEY "
                              "(or AZURE_OPENAI_*) and SEMHIST_LLM_MODEL, or run semhist llm-server")
        store, result = self.memory_store, MemoryResult()
        units = turn_units(thread.messages)
        recent = last_units(thread.messages, units, s.recent)
        aged_upto = (recent[0][0] if recent else len(thread.messages)) - 1
        compactor = Compactor(self.llm, store)
        try:
            result.summary = store.summary(thread)
            if "summary" in needs and self._should_compact(thread, units, recent, result, request, limit):
                # the summary gets at most a third of the budget: recent turns and notes need the rest
                room = max(60, (limit or s.history_budget) // 3)
                result.summary = compactor.summarize_through(thread, aged_upto, result, max_tokens=room)
            if "notes" in needs:
                through = aged_upto if "summary" not in needs else (result.summary.upto if result.summary else -1)
                compactor.extract_through(thread, through, result)
        except BackendError as exc:
            result.problems.append(f"compaction failed, older turns stay verbatim where they fit: {exc}")
            result.summary = store.summary(thread)
        if "summary" not in needs:
            result.summary = None
        if "notes" in needs:
            latest = {n.quote: n for n in store.notes(thread)}  # a statement repeated is kept once, newest
            result.notes = tuple(sorted(latest.values(), key=lambda n: n.source))
        return result

    def _should_compact(self, thread, units, recent, result: MemoryResult, request: str, limit: int | None) -> bool:
        s = self.settings
        start = result.summary.upto + 1 if result.summary else 0
        recent_start = recent[0][0] if recent else len(thread.messages)
        aged = [p for u in units if start <= u[0] < recent_start for p in u]
        if not aged:
            return False
        memory = render_memory(thread, Selection(summary=result.summary))
        total = (fixed_cost(thread, request, s.system_prompt) + (count_text(memory) if memory else 0)
                 + history_cost(thread, aged) + history_cost(thread, [p for u in recent for p in u]))
        return total > s.summary_trigger * (limit or s.history_budget)

    @cached_property
    def embedder(self) -> CachedEmbedder:
        cache = EmbeddingCache(self.settings.cache_dir / "embeddings.sqlite3")
        return CachedEmbedder(get_embedder(self.settings.embedder), cache)

    @cached_property
    def llm(self) -> LLMClient | None:
        if self._llm_arg == "auto":
            return make_llm(self.settings.llm)
        return self._llm_arg  # type: ignore[return-value]

    def index(self, thread: Thread, progress: Callable[[int], None] | None = None) -> HistoryIndex:
        """Segment and embed a thread once per process (embeddings also persist in the cache)."""
        key = thread_fingerprint(thread)
        if key not in self._indexes:
            s = self.settings
            params = {"gap_seconds": s.gap_seconds, "max_block_tokens": s.max_block_tokens,
                      "min_block_messages": s.min_block_messages, "percentile": s.topic_percentile}
            segmenter = get_segmenter(s.segmenter, **params)
            self._indexes[key] = build_index(
                thread, self.embedder, segmenter, segmenter_name=s.segmenter, segmenter_params=params,
                progress=progress)
            self._indexes[key].warm()
        return self._indexes[key]

    def use_index(self, thread: Thread, directory: str | Path) -> HistoryIndex:
        """Load a saved index for this thread, refusing one built with another embedder."""
        index = HistoryIndex.load(directory)
        index.check(self.embedder.id, thread)
        index.warm()
        self._indexes[thread_fingerprint(thread)] = index
        return index

    def register_index(self, thread: Thread, index: HistoryIndex) -> None:
        """Use an index built elsewhere (a stored thread's view) for this thread."""
        index.warm()
        self._indexes[thread_fingerprint(thread)] = index

    def forget_indexes(self) -> None:
        self._indexes.clear()

    def keywords(self, request: str, thread: Thread | None = None) -> KeywordResult:
        """What to search for; relative dates resolve against the thread's last message."""
        anchor = None
        if thread is not None:
            anchor = next((m.timestamp for m in reversed(thread.messages) if m.timestamp), None)
        return extract_keywords(request, self.llm if self.settings.keyword != "local" else None,
                                self.settings.keyword, anchor)

    def full_tokens(self, thread: Thread, request: str) -> int:
        return fit(thread, get_strategy("full").select(strategy_input(thread, self.settings)), request,
                   None, system_prompt=self.settings.system_prompt).tokens

    def ask(self, thread: Thread, request: str, *, strategy: str = "blocks", budget: Budget | None = None,
            keywords: KeywordResult | None = None, answer: bool = False) -> AskResult:
        """Build the prompt for `request` with one strategy; optionally send it to the LLM."""
        s = self.settings
        if not request.strip():
            raise InputError("the request is empty")
        strat = get_strategy(strategy)
        full = self.full_tokens(thread, request)
        limit = budget.tokens(full) if budget else (
            s.history_budget if strategy in ("token-budget", "summary", "structured") else None)
        index = self.index(thread) if strat.uses_search else None
        needs = self.memory_needs(strategy)
        memory = self.memory(thread, needs, request, limit) if needs else None
        start = time.perf_counter()
        vector = None
        if strat.uses_search:
            keywords = keywords or self.keywords(request, thread)
            vector = embed_query(self.embedder, keywords.query)
        selection = strat.select(strategy_input(thread, s, index, vector, keywords, request, limit, memory))
        prompt = fit(thread, selection, request, limit, system_prompt=s.system_prompt,
                     context_role=s.context_role, alternate=s.alternate)
        if memory is not None and memory.problems:
            prompt = replace(prompt, notes=prompt.notes + tuple(memory.problems))
        elapsed = (time.perf_counter() - start) * 1000 + (keywords.ms if keywords and strat.uses_search else 0)
        scores = {r.block_id: r.score for r in selection.retrieved if r.block_id is not None and r.score is not None}
        result = AskResult(strategy, request, prompt, full, limit, keywords if strat.uses_search else None,
                           scores, elapsed, memory=memory)
        if answer:
            result = self._answer(result)
        if self.record:
            calls_ms = (memory.llm_ms if memory else 0.0) + (keywords.ms if keywords and keywords.llm_calls else 0.0)
            self.memory_store.record_ask(thread, strategy, prompt.tokens, full, result.llm_calls, calls_ms)
        return result

    def compare(self, thread: Thread, request: str, strategies: Iterable[str], *,
                budget: Budget | None = None) -> list[AskResult]:
        """The same request under several strategies; the keyword is extracted once."""
        kw = None
        out = []
        for name in strategies:
            if self.memory_needs(name) and self.llm is None:
                continue  # the caller reports what was skipped and why
            if get_strategy(name).uses_search and kw is None:
                kw = self.keywords(request, thread)
            out.append(self.ask(thread, request, strategy=name, budget=budget, keywords=kw))
        return out

    def _answer(self, result: AskResult) -> AskResult:
        if self.llm is None:
            raise ConfigError("--answer needs an LLM: set OPENAI_BASE_URL/OPENAI_API_KEY (or the "
                              "AZURE_OPENAI_* variables) and SEMHIST_LLM_MODEL, or run semhist llm-server")
        reply = self.llm.chat(list(result.prompt.messages), max_tokens=1024)
        return replace(result, answer=reply)

    def describe(self) -> dict[str, Any]:
        s = self.settings
        return {"embedder": s.embedder, "segmenter": s.segmenter, "gap_seconds": s.gap_seconds,
                "max_block_tokens": s.max_block_tokens, "top_n": s.top_n, "min_score": s.min_score,
                "relative_score": s.relative_score, "recent": s.recent, "window": s.window,
                "hit_window": s.hit_window, "context_tokens": s.context_tokens,
                "min_block_messages": s.min_block_messages,
                "utterance_k": s.utterance_k,
                "keyword": s.keyword,
                "llm": s.llm.model if s.llm else None}
