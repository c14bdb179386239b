"""`semhist eval`: every benchmark query, whole thread as history, metrics per strategy.

The output shape is the project's evaluation contract (DESIGN.md): keep it stable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from indexers.errors import ConfigError
from indexers.model import Thread
from indexers.settings import Budget

from .engine import Engine
from .pipeline import get_strategy


@dataclass
class _Tally:
    recall: list[float] = field(default_factory=list)
    complete: list[bool] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    ratio: list[float] = field(default_factory=list)
    ms: list[float] = field(default_factory=list)
    over_budget: int = 0
    llm_calls: int = 0
    by_category: dict[str, list[tuple[float, bool]]] = field(default_factory=dict)

    def categories(self) -> dict[str, dict[str, float | int]]:
        return {cat: {"evidence_recall": round(float(np.mean([r for r, _ in v])), 4),
                      "all_evidence_rate": round(float(np.mean([c for _, c in v])), 4),
                      "n_queries": len(v)}
                for cat, v in sorted(self.by_category.items())}

    def summary(self) -> dict[str, float | int]:
        if not self.recall:
            return {**{k: None for k in ("evidence_recall", "all_evidence_rate", "mean_prompt_tokens",
                                         "token_ratio", "p50_ms", "p95_ms")}, "n_queries": 0,
                    "over_budget": 0, "llm_calls": 0}
        return {
            "evidence_recall": round(float(np.mean(self.recall)), 4),
            "all_evidence_rate": round(float(np.mean(self.complete)), 4),
            "mean_prompt_tokens": round(float(np.mean(self.tokens)), 1),
            "token_ratio": round(float(np.mean(self.ratio)), 4),
            "p50_ms": round(float(np.percentile(self.ms, 50)), 3),
            "p95_ms": round(float(np.percentile(self.ms, 95)), 3),
            "n_queries": len(self.recall),
            "over_budget": self.over_budget,
            "llm_calls": self.llm_calls,
        }


def evaluate(engine: Engine, threads: Sequence[Thread], strategies: Sequence[str], *,
             budget: Budget | None = None, dataset: str = "",
             on_thread: Callable[[Thread, int], Callable[[int], None] | None] | None = None,
             on_query: Callable[[], None] | None = None) -> dict:
    """Run every answerable query of every thread under each strategy.

    `on_thread(thread, n_messages)` may return a progress callback for embedding;
    `on_query()` is called once per evaluated query (for a progress bar).
    """
    for name in strategies:
        get_strategy(name)  # unknown names fail before any work
        if engine.memory_needs(name) and engine.llm is None:
            raise ConfigError(f"strategy {name} needs an LLM to summarize; configure one or leave it out")
    tallies = {name: _Tally() for name in strategies}
    skipped = 0
    needs_index = any(get_strategy(n).uses_search for n in strategies)
    if needs_index:
        # Load the tokenizer and the query embedder outside the timed loop: a bot pays
        # that once per process, not per request.
        engine.keywords("warm up")
        engine.embedder.inner.embed(["warm up"], "query")
    for thread in threads:
        progress = on_thread(thread, len(thread.messages)) if on_thread else None
        if needs_index:
            engine.put(thread, progress=progress)
        for query in thread.queries:
            if not query.has_evidence:
                skipped += 1
                continue
            keywords = engine.keywords(query.text, thread) if needs_index else None
            relevant = set(query.relevant)
            for name in strategies:
                result = engine.ask(thread, query.text, strategy=name, budget=budget, keywords=keywords)
                kept = {result.thread.messages[p].index for p in result.included}
                t = tallies[name]
                t.recall.append(len(relevant & kept) / len(relevant))
                t.complete.append(relevant <= kept)
                t.by_category.setdefault(query.category or "none", []).append((t.recall[-1], t.complete[-1]))
                t.tokens.append(result.prompt.tokens)
                t.ratio.append(result.prompt.tokens / result.full_tokens)
                t.ms.append(result.selection_ms)
                t.over_budget += any(n.startswith("over budget") for n in result.prompt.notes)
                t.llm_calls += result.llm_calls
            if on_query:
                on_query()
    return {
        "dataset": dataset,
        "budget": str(budget) if budget else None,
        "settings": engine.describe(),
        "skipped_queries": skipped,
        "strategies": {name: tallies[name].summary() for name in strategies},
        "categories": {name: tallies[name].categories() for name in strategies},
    }
