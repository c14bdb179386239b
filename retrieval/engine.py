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
from indexers.errors import ConfigError, InputError
from indexers.index import HistoryIndex, thread_fingerprint
from indexers.model import Thread
from indexers.segment import get_segmenter
from indexers.settings import Budget, Settings

from .assemble import Prompt, fit
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

    @property
    def llm_calls(self) -> int:
        return (self.keywords.llm_calls if self.keywords else 0) + (1 if self.answer is not None else 0)

    @property
    def included(self) -> frozenset[int]:
        return self.prompt.selection.included


class Engine:
    """semhist's library entry point. Settings resolve once; backends load on first use."""

    def __init__(self, settings: Settings | None = None, *, llm: LLMClient | None | str = "auto"):
        self.settings = settings or Settings.load()
        self._llm_arg = llm
        self._indexes: dict[str, HistoryIndex] = {}

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
                joined_blocks=s.block_scoring == "joined", progress=progress)
            self._indexes[key].warm()
        return self._indexes[key]

    def use_index(self, thread: Thread, directory: str | Path) -> HistoryIndex:
        """Load a saved index for this thread, refusing one built with another embedder."""
        index = HistoryIndex.load(directory)
        index.check(self.embedder.id, thread)
        index.warm()
        self._indexes[thread_fingerprint(thread)] = index
        return index

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
        limit = budget.tokens(full) if budget else (s.history_budget if strategy == "token-budget" else None)
        index = self.index(thread) if strat.uses_search else None
        start = time.perf_counter()
        vector = None
        if strat.uses_search:
            keywords = keywords or self.keywords(request, thread)
            vector = embed_query(self.embedder, keywords.query)
        selection = strat.select(strategy_input(thread, s, index, vector, keywords, request, limit))
        prompt = fit(thread, selection, request, limit, system_prompt=s.system_prompt,
                     context_role=s.context_role)
        elapsed = (time.perf_counter() - start) * 1000 + (keywords.ms if keywords and strat.uses_search else 0)
        scores = {r.block_id: r.score for r in selection.retrieved if r.block_id is not None and r.score is not None}
        result = AskResult(strategy, request, prompt, full, limit, keywords if strat.uses_search else None,
                           scores, elapsed)
        if answer:
            result = self._answer(result)
        return result

    def compare(self, thread: Thread, request: str, strategies: Iterable[str], *,
                budget: Budget | None = None) -> list[AskResult]:
        """The same request under several strategies; the keyword is extracted once."""
        kw = None
        out = []
        for name in strategies:
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
                "block_scoring": s.block_scoring, "keyword": s.keyword,
                "llm": s.llm.model if s.llm else None}
