"""The turn log: what each ask sent and why, enough to answer "why did the bot forget X"."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from semhist.indexers.index.thread_index import ThreadIndex
from semhist.indexers.pii import Masker

from semhist.kernel.tokens import count_message

from ..pipeline.asker import AskResult


def prefix_marks(messages) -> list[list]:
    """Each prompt message as [digest, tokens]: enough for `semhist stats` to tell how much of
    a prompt repeats the previous one's start (a provider's prompt cache), never the text."""
    # The last message is the request as the user wrote it (unmasked in a masked thread): left
    # out, it changes every turn anyway.
    return [[hashlib.sha256(json.dumps(m, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:12],
             count_message(m)] for m in messages[:-1]]


def kept_prompt(result: AskResult, masker: Masker | None) -> list[dict[str, Any]]:
    """The messages an ask sent, as the log keeps them: masked like the thread (the request
    is the user's own text, not yet masked)."""
    if masker is None:
        return list(result.prompt.messages)
    return [{**m, "content": masker(m["content"])} if isinstance(m.get("content"), str) else dict(m)
            for m in result.prompt.messages]


def turn_record(result: AskResult, index: ThreadIndex, masker: Masker | None, timings: dict[str, float],
                marks: list[list], layout: str = "head") -> dict[str, Any]:
    """`marks`: the prompt's `prefix_marks`, made once by the caller."""
    kw, thread, mem = result.keywords, result.thread, result.memory
    mask = masker or (lambda text: text)
    blocks = []
    for r in result.prompt.selection.retrieved:
        first, last = thread.messages[r.message_ids[0]], thread.messages[r.message_ids[-1]]
        block = index.block_with_id(r.block_id) if r.block_id is not None else None
        blocks.append({"block_messages": [first.index, last.index], "messages": len(r.message_ids),
                       "score": round(r.score, 4) if r.score is not None else None,
                       "start": first.timestamp.isoformat() if first.timestamp else None,
                       "end": last.timestamp.isoformat() if last.timestamp else None,
                       # why the block it came from starts: a pause, a topic shift (its score), a size cut
                       "block_starts": block.why if block else None})
    left = [{"block_messages": [thread.messages[r.message_ids[0]].index, thread.messages[r.message_ids[-1]].index],
             "messages": len(r.message_ids), "score": round(r.score, 4) if r.score is not None else None}
            for r in result.prompt.selection.left_out]
    recent = [thread.messages[p].index for p in result.prompt.selection.history_ids]
    return {
        "request": mask(result.request), "strategy": result.strategy,
        # the verbatim turns, by store id: with `retrieved`, which messages the prompt quoted
        "recent": [recent[0], recent[-1], len(recent)] if recent else None,
        "keyword": [mask(k) for k in kw.keywords] if kw else None, "extractor": kw.source if kw else None,
        "extractor_reason": kw.reason if kw else None, "intent": kw.intent if kw else None,
        "time_range": str(kw.time_range) if kw and kw.time_range else None,
        "retrieved": blocks, "left_out": left,
        # stretches about the request the budget could not hold, each named by a dated line (store ids)
        "listed": [thread.messages[p].index for p in result.prompt.selection.listed],
        "prompt_tokens": result.prompt.tokens, "budget_tokens": result.budget_tokens,
        "full_tokens": result.full_tokens, "llm_calls": result.llm_calls,
        "view": {"messages": len(index), "whole_thread": index.whole},
        "memory": None if mem is None else {
            "llm_calls": mem.llm_calls, "call_ms": [round(ms, 1) for ms in mem.call_ms], "compacted": mem.compacted, "summaries": mem.summaries,
            "extracted": mem.extracted, "backlog": mem.backlog, "notes": len(mem.notes),
            "summary_upto": list(mem.summary.upto) if mem.summary else None},
        "timings_ms": {**timings, "keyword_ms": round(kw.ms, 2) if kw else 0.0,
                       "selection_ms": round(result.selection_ms, 2)},
        "answered": result.answer is not None,
        # who stored each operator message the prompt opened with (kernel/writers.py)
        "operator_messages": [[m.index, m.writer or "unrecorded"] for m in (index.thread.messages[p]
                                                                              for p in index.thread.system_positions)],
        "notes": list(result.prompt.notes),
        "prefix": marks,
        "cached_tokens": result.cached_tokens,
        **({"cache": cache_record(result)} if layout == "cache" else {}),
        **({"elsewhere": [{"thread": e.thread_id, "score": round(e.score, 4), "lines": len(e.lines),
                           "start": e.start.isoformat() if e.start else None}
                          for e in result.prompt.selection.elsewhere]} if result.prompt.selection.elsewhere else {}),
    }


def previous_marks(records: list[dict[str, Any]], strategy: str) -> list | None:
    """The prefix marks of the newest logged prompt of `strategy` (records oldest first)."""
    return next((r["prefix"] for r in reversed(records) if r.get("strategy") == strategy and "prefix" in r), None)


def cache_record(result: AskResult) -> dict[str, Any]:
    """What the next turn's prompt in the cache layout carries over, by store id: where this
    prompt's turns start, whether they started again, and every retrieved history it holds
    (those carried from earlier turns and its own, last) as [the request it came before, its
    messages, those shown whole]. The newest record of a strategy is its whole state: one
    read finds it."""
    thread, prompt = result.thread, result.prompt
    selection = prompt.selection
    at = lambda positions: sorted({thread.messages[p].index for p in positions})  # noqa: E731
    contexts = [[thread.messages[e.before].index, at(e.retrieved.message_ids), at(e.retrieved.whole)]
                for e in selection.earlier]
    ids = at(p for r in selection.retrieved for p in r.message_ids)
    if prompt.context_before is not None and ids:
        contexts.append([thread.messages[prompt.context_before].index, ids,
                         at(p for r in selection.retrieved for p in r.whole)])
    history = selection.history
    return {"start": thread.messages[history[0][0]].index if history else None, "restarted": selection.restarted,
            "contexts": contexts}
