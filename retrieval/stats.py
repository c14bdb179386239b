"""Monitoring figures from the turn log: what was sent, how often compaction ran, and what
the LLM cost, per thread and overall (`semhist stats`)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from semhist.indexers.store import StoreReader

from .billing import PriceModel, price_model, shared_marks


def _p(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 1) if values else None


def _reused(turns: list[dict[str, Any]]) -> tuple[int, int]:
    """(tokens that repeat the previous prompt's start, tokens sent) over one thread's turns
    after the first, by whole messages (turns logged before this was recorded are skipped)."""
    shared = total = 0
    for before, now in zip(turns, turns[1:]):
        if "prefix" not in before or "prefix" not in now:
            continue
        total += sum(t for _, t in now["prefix"])
        shared += shared_marks(before["prefix"], now["prefix"])
    return shared, total


def _billed(turns: list[dict[str, Any]], model: PriceModel) -> float:
    """Input billed for these turns under `model`, each turn's cached tokens as logged (the
    previous prompt's start it repeats; none for turns logged before this was recorded)."""
    return sum(model.billed(t["prompt_tokens"], t.get("cached_tokens") or 0) for t in turns)


def _figures(turns: list[dict[str, Any]], model: PriceModel) -> dict[str, Any]:
    prompt = [t["prompt_tokens"] for t in turns]
    full = [t["full_tokens"] for t in turns]
    sizes = [t["view"]["messages"] for t in turns if t.get("view")]
    memory = [t["memory"] for t in turns if t.get("memory")]
    call_ms = [ms for m in memory for ms in m.get("call_ms", [])]
    sequences: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)  # a bot asks with one strategy
    for t in turns:
        sequences[(t.get("thread", ""), t.get("strategy", ""))].append(t)
    shared, total = map(sum, zip(*(_reused(r) for r in sequences.values()))) if sequences else (0, 0)
    budgeted = [t for t in turns if t.get("budget_tokens")]
    return {
        "asks": len(turns),
        "messages_p50": _p(sizes, 50), "messages_p95": _p(sizes, 95),
        "prompt_tokens_p50": _p(prompt, 50), "prompt_tokens_p95": _p(prompt, 95),
        "tokens_sent": int(sum(prompt)), "full_history_tokens": int(sum(full)),
        "sent_vs_full": round(sum(prompt) / sum(full), 4) if sum(full) else None,
        "compactions": sum(m.get("summaries", 0) for m in memory),
        "note_extractions": sum(m.get("extracted", 0) for m in memory),
        "llm_calls": int(sum(t.get("llm_calls", 0) for t in turns)),
        "compaction_llm_ms_p50": _p(call_ms, 50), "compaction_llm_ms_p95": _p(call_ms, 95),
        # what a provider's prompt cache could read: tokens that repeat the previous prompt's start
        "prefix_reuse": round(shared / total, 4) if total else None,
        # what the provider bills, in uncached tokens, when its cache held what repeated
        "cached_tokens": int(sum(t.get("cached_tokens") or 0 for t in turns)),
        "billed_input": round(_billed(turns, model)), "price_model": model.name,
        # the share of budgeted asks whose whole history would not have fit: the budget chose
        "at_budget": round(sum(t["full_tokens"] > t["budget_tokens"] for t in budgeted) / len(budgeted), 4)
        if budgeted else None,
        "over_budget": sum(any(n.startswith("over budget") for n in t.get("notes", ())) for t in turns),
    }


def stats(store: StoreReader, thread_id: str | None = None, price: str = "openai") -> dict[str, Any]:
    """`price`: the price model billed input is figured under (semhist.billing.PRICE_MODELS)."""
    model = price_model(price)
    turns = store.turns(thread_id)
    by_thread: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for t in turns:
        by_thread[t["thread"]].append(t)
    return {"overall": _figures(turns, model),
            "threads": {t: _figures(r, model) for t, r in sorted(by_thread.items())}}
