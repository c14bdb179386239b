"""Monitoring figures from the memory store: what was sent, how often compaction ran, and
what the LLM cost, per thread and overall (`semhist stats`)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from indexers.memory import MemoryStore


def _p(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 1) if values else None


def _figures(rows: list[tuple]) -> dict[str, Any]:
    asks = [r for r in rows if r[1] == "ask"]
    calls = [r for r in rows if r[6]]
    prompt = [r[4] for r in asks]
    full = [r[5] for r in asks]
    per_call = [r[7] / r[6] for r in calls if r[1] != "ask"]
    return {
        "asks": len(asks),
        "messages_p50": _p([r[3] for r in asks], 50), "messages_p95": _p([r[3] for r in asks], 95),
        "prompt_tokens_p50": _p(prompt, 50), "prompt_tokens_p95": _p(prompt, 95),
        "tokens_sent": int(sum(prompt)), "full_history_tokens": int(sum(full)),
        "sent_vs_full": round(sum(prompt) / sum(full), 4) if sum(full) else None,
        "compactions": sum(1 for r in rows if r[1] == "summary"),
        "note_extractions": sum(r[6] for r in rows if r[1] == "notes"),
        "llm_calls": int(sum(r[6] for r in rows if r[1] == "ask")),
        "compaction_llm_ms_p50": _p(per_call, 50), "compaction_llm_ms_p95": _p(per_call, 95),
    }


def stats(store: MemoryStore, thread_id: str | None = None) -> dict[str, Any]:
    rows = store.events(thread_id)
    by_thread: dict[str, list[tuple]] = defaultdict(list)
    for r in rows:
        by_thread[r[0]].append(r)
    return {"overall": _figures(rows), "threads": {t: _figures(r) for t, r in sorted(by_thread.items())}}
