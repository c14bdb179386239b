"""`semhist eval`: every benchmark query, whole thread as history, metrics per strategy.

The output shape is the project's evaluation contract (DESIGN.md): keep it stable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from semhist.kernel.errors import BackendError, ConfigError, InputError
from semhist.kernel.model import Query, Thread
from semhist.kernel.budget import Budget

from .engine import Engine
from .llm import LLMClient
from .memory import memory_needs
from .pipeline import get_strategy
from .pipeline.asker import AskResult
from .scoring import answer_f1, coverage, judge, prefix_reuse, token_f1


@dataclass
class _Tally:
    recall: list[float] = field(default_factory=list)
    complete: list[bool] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    ratio: list[float] = field(default_factory=list)
    ms: list[float] = field(default_factory=list)
    over_budget: int = 0
    llm_calls: int = 0
    llm_failures: list[str] = field(default_factory=list)  # one per query whose LLM step failed
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
                    "over_budget": 0, "llm_calls": 0, "llm_failures": 0}
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
            "llm_failures": len(self.llm_failures),
        }


def _mean(values: Sequence[float]) -> float | None:
    return round(float(np.mean(values)), 4) if len(values) else None


@dataclass
class _Answers:
    """Answer scores of one strategy (eval --answer)."""

    f1: list[float] = field(default_factory=list)
    judged: list[bool] = field(default_factory=list)
    judge_failures: int = 0
    coverage: list[float] = field(default_factory=list)
    ms: list[float] = field(default_factory=list)
    reuse: list[float] = field(default_factory=list)
    by_category: dict[str, dict[str, list]] = field(default_factory=dict)
    previous: Sequence[dict] | None = None  # the prompt of the previous question on this thread

    def add(self, result: AskResult, query: Query, thread: Thread, judge_llm: LLMClient | None) -> dict:
        reply = result.answer or ""  # a failed answer scores as a wrong one (and is counted)
        scores: dict[str, float | bool | None] = {"answer": reply[:300] if result.answer else None}
        if query.answer is not None:
            scores["f1"] = round(answer_f1(reply, query.answer, query.category), 4)
            self.f1.append(scores["f1"])
            if judge_llm is not None:
                try:
                    scores["judge"] = judge(judge_llm, query.text, query.answer, reply) if reply else False
                    self.judged.append(scores["judge"])
                except BackendError:
                    self.judge_failures += 1
        else:
            by_index = {m.index: m for m in thread.messages}  # --lenient may have skipped some
            evidence = [by_index[i].content for i in query.relevant if i in by_index]
            scores["coverage"] = coverage(reply, evidence)
            if scores["coverage"] is not None:
                self.coverage.append(scores["coverage"])
        if result.answer_ms is not None:
            self.ms.append(result.answer_ms)
        if self.previous is not None:  # a thread's first question has nothing to reuse
            self.reuse.append(prefix_reuse(self.previous, result.prompt.messages))
        self.previous = result.prompt.messages
        mine = self.by_category.setdefault(query.category or "none", {"f1": [], "judge": [], "coverage": []})
        for key in ("f1", "judge", "coverage"):
            if scores.get(key) is not None:
                mine[key].append(float(scores[key]))
        return scores

    def summary(self) -> dict[str, float | int | None]:
        return {"answer_f1": _mean(self.f1), "judge_accuracy": _mean(self.judged),
                "judge_failures": self.judge_failures, "answer_coverage": _mean(self.coverage),
                "answer_ms_p50": round(float(np.percentile(self.ms, 50)), 1) if self.ms else None,
                "prompt_prefix_reuse": _mean(self.reuse)}

    def categories(self) -> dict[str, dict[str, float | None]]:
        return {cat: {"answer_f1": _mean(v["f1"]), "judge_accuracy": _mean(v["judge"]),
                      "answer_coverage": _mean(v["coverage"])} for cat, v in sorted(self.by_category.items())}


def sample_queries(threads: Sequence[Thread], n: int) -> list[Thread]:
    """The threads with `n` of their answerable queries, evenly spaced over all of them in
    file order: the same subset on every run, every thread and category in proportion."""
    if n < 1:
        raise InputError(f"--sample needs at least one query, got {n}")
    where = [(t, q) for t, thread in enumerate(threads) for q, query in enumerate(thread.queries)
             if query.has_evidence]
    step = max(1.0, len(where) / n)
    chosen = {where[int(i * step)] for i in range(min(n, len(where)))}
    return [replace(thread, queries=tuple(q for j, q in enumerate(thread.queries) if (t, j) in chosen))
            for t, thread in enumerate(threads) if any(c[0] == t for c in chosen)]


def _merged(recall: dict[str, dict], scored: dict[str, dict]) -> dict[str, dict]:
    return {cat: {**v, **scored.get(cat, {})} for cat, v in recall.items()}


def evaluate(engine: Engine, threads: Sequence[Thread], strategies: Sequence[str], *,
             budget: Budget | None = None, dataset: str = "", details: bool = False,
             answer: bool = False, judge_llm: LLMClient | None = None,
             on_thread: Callable[[Thread, int], Callable[[int], None] | None] | None = None,
             on_query: Callable[[], None] | None = None) -> dict:
    """Run every answerable query of every thread under each strategy.

    `details`: the report gains "queries", one record per query (request analysis, recall
    per strategy). `answer`: each prompt is sent to the LLM and the reply scored (scoring.py),
    graded by `judge_llm` where a gold answer exists. `on_thread(thread, n_messages)` may return a progress callback for
    embedding; `on_query()` is called once per evaluated query (for a progress bar).
    """
    for name in strategies:
        get_strategy(name)  # unknown names fail before any work
        if memory_needs(name, engine.settings) and engine.parts.llm is None:
            raise ConfigError(f"strategy {name} needs an LLM to summarize; configure one or leave it out")
    if answer and engine.parts.llm is None:
        raise ConfigError("eval --answer needs an LLM: set OPENAI_BASE_URL/OPENAI_API_KEY and SEMHIST_LLM_MODEL, "
                          "or run semhist llm-server")
    if answer:
        token_f1("ready", "ready")  # nltk missing: fail before the first answer, not after it
    answers = {name: _Answers() for name in strategies}
    tallies = {name: _Tally() for name in strategies}
    skipped = 0
    records: list[dict] = []
    needs_index = any(get_strategy(n).uses_search for n in strategies)
    if needs_index:
        # Load the tokenizer and the query embedder outside the timed loop: a bot pays
        # that once per process, not per request.
        engine.parts.asker.keywords("warm up")
        engine.parts.embedder.inner.embed(["warm up"], "query")
    for thread in threads:
        progress = on_thread(thread, len(thread.messages)) if on_thread else None
        if needs_index:
            engine.put(thread, progress=progress)
        for a in answers.values():
            a.previous = None
        for query in thread.queries:
            if not query.has_evidence:
                skipped += 1
                continue
            keywords = engine.parts.asker.keywords(query.text, thread.last_time) if needs_index else None
            relevant = set(query.relevant)
            record = {"thread": thread.id, "query": query.text, "category": query.category,
                      "analysis": keywords.to_dict() if keywords else None, "evidence_recall": {}}
            for name in strategies:
                result = engine.ask(thread, query.text, strategy=name, budget=budget, keywords=keywords,
                                    answer=answer)
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
                if result.llm_failures:
                    t.llm_failures.append(f"{query.text[:60]!r}: {result.llm_failures[0]}")
                record["evidence_recall"][name] = round(t.recall[-1], 4)
                if answer:
                    record.setdefault("answers", {})[name] = answers[name].add(result, query, thread, judge_llm)
            if details:
                records.append(record)
            if on_query:
                on_query()
    return {
        "dataset": dataset,
        "budget": str(budget) if budget else None,
        "settings": _described(engine),
        "skipped_queries": skipped,
        "strategies": {name: {**tallies[name].summary(), **(answers[name].summary() if answer else {})}
                       for name in strategies},
        "categories": {name: _merged(tallies[name].categories(), answers[name].categories() if answer else {})
                       for name in strategies},
        # why the LLM step failed, first few per strategy (the figures above include those queries)
        "llm_failures": {name: tallies[name].llm_failures[:5] for name in strategies},
        **({"queries": records} if details else {}),
    }


def _described(engine: Engine) -> dict:
    """The settings a report's figures depend on."""
    s = engine.settings
    return {"embedder": s.embedder, "segmenter": s.segmenter, "gap_seconds": s.gap_seconds,
            "max_block_tokens": s.max_block_tokens, "top_n": s.top_n, "min_score": s.min_score,
            "relative_score": s.relative_score, "recent": s.recent, "window": s.window,
            "hit_window": s.hit_window, "context_tokens": s.context_tokens,
            "min_block_messages": s.min_block_messages, "utterance_k": s.utterance_k,
            "keyword": s.keyword, "llm": s.llm.model if s.llm else None}
