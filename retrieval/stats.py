"""Monitoring figures from the turn log: what was sent, how often compaction ran, and what
the LLM cost, per thread and overall (`semhist stats`)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from indexers.store import SQLStore


def _p(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 1) if values else None


def _figures(turns: list[dict[str, Any]]) -> dict[str, Any]:
    prompt = [t["prompt_tokens"] for t in turns]
    full = [t["full_tokens"] for t in turns]
    sizes = [t["view"]["messages"] for t in turns if t.get("view")]
    memory = [t["memory"] for t in turns if t.get("memory")]
    call_ms = [ms for m in memory for ms in m.get("call_ms", [])]
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
    }


def stats(store: SQLStore, thread_id: str | None = None) -> dict[str, Any]:
    turns = store.turns(thread_id)
    by_thread: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for t in turns:
        by_thread[t["thread"]].append(t)
    return {"overall": _figures(turns), "threads": {t: _figures(r) for t, r in sorted(by_thread.items())}}
