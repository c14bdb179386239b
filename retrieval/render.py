"""Plain-text and JSON views of results, for the CLI and notebooks (no printing here)."""

from __future__ import annotations

import json
from typing import Any

from .billing import price_model, warm_tokens
from .pipeline import AskResult
from .pipeline.assemble import NO_ROOM


def _time(ts) -> str | None:
    return ts.isoformat() if ts else None


def thread_dict(info) -> dict[str, Any]:
    """A stored thread's summary (`semhist threads --json`, `GET /v1/threads`)."""
    return {"thread": info.thread_id, "messages": info.messages, "first": _time(info.first),
            "last": _time(info.last), "retention_days": info.retention_days}


# What a result's message numbers are: a stored thread's are the store's ids (as the service, the
# turn log and `forget --message` use them), a history file's are positions in the file.
STORE_IDS, FILE_POSITIONS = "store id", "file position"
_SPAN_WORDS = {STORE_IDS: "store ids", FILE_POSITIONS: "file positions"}


def ask_dict(result: AskResult, numbering: str = STORE_IDS) -> dict[str, Any]:
    """One `ask` as a JSON-ready object; `message_indices` are what `numbering` says:
    store ids for a stored thread, positions in the file for a history file."""
    thread, kw = result.thread, result.keywords
    blocks = []
    for r in sorted(result.prompt.selection.retrieved, key=lambda r: r.rank):
        first, last = thread.messages[r.message_ids[0]], thread.messages[r.message_ids[-1]]
        blocks.append({"rank": r.rank, "block_id": r.block_id,
                       "score": None if r.score is None else round(r.score, 4),
                       "reason": "time range" if r.score is None else "search",
                       "start": _time(first.timestamp), "end": _time(last.timestamp),
                       "message_indices": [thread.messages[p].index for p in r.message_ids]})
    out = {
        "thread": thread.id,
        "request": result.request,
        "strategy": result.strategy,
        "keyword": None if kw is None else kw.to_dict(),
        "retrieved": blocks,
        "message_numbering": numbering,
        "recent_message_indices": [thread.messages[p].index for p in result.prompt.selection.history_ids],
        "messages": list(result.prompt.messages),
        "prompt_tokens": result.prompt.tokens,
        "full_history_tokens": result.full_tokens,
        "token_ratio": round(result.prompt.tokens / result.full_tokens, 4),
        "budget_tokens": result.budget_tokens,
        "cached_tokens": result.cached_tokens,
        "llm_calls": result.llm_calls,
        "notes": list(result.prompt.notes),
    }
    if result.prompt.selection.whole_thread:  # blocks sent the thread as full does: nothing to retrieve
        out["whole_thread"] = True
    if result.prompt.selection.elsewhere:  # other threads of the channel (a wider scope)
        out["elsewhere"] = [{"thread": e.thread_id, "score": round(e.score, 4), "start": _time(e.start),
                             "messages": len(e.lines)} for e in result.prompt.selection.elsewhere]
    truth = thread.ground_truth(result.request)
    if truth and truth.has_evidence:
        kept = {thread.messages[p].index for p in result.included}
        out["evidence_kept"] = {"kept": len(kept & set(truth.relevant)), "of": len(truth.relevant)}
    if result.answer is not None:
        out["answer"] = result.answer
    if result.answer_error is not None:
        out["answer_error"] = result.answer_error
    return out


def ask_text(data: dict[str, Any]) -> str:
    lines = []
    kw = data["keyword"]
    words = _SPAN_WORDS[data.get("message_numbering", STORE_IDS)]
    if kw:
        lines.append(f"keyword: {' '.join(kw['keywords'])}   [{kw['source']}: {kw['reason']}]   "
                     f"intent: {kw['intent']}" + (f"   time: {kw['time_range']['start']} .. "
                                                 f"{kw['time_range']['end']}" if kw["time_range"] else ""))
    if data["retrieved"]:
        lines.append("retrieved (best first):")
        for b in data["retrieved"]:
            idx = b["message_indices"]
            span = f"{b['start'] or '?'} .. {b['end'] or '?'}"
            label = f"block {b['block_id']}" if b["block_id"] is not None else "message"
            why = "in the named time" if b["score"] is None else f"cosine {b['score']:.3f}"
            lines.append(f"  {label:>9}  {why}  {span}  {words} {idx[0]}-{idx[-1]} ({len(idx)})")
    elif data.get("whole_thread"):
        lines.append("retrieved: none needed: the whole thread fits the budget, sent as it is")
    elif kw:  # said where it is the cause (once): the budget, not the scores, left retrieval out
        room = next((n for n in data["notes"] if n.startswith(NO_ROOM)), None)
        lines.append(f"retrieved: nothing: {room}" if room else "retrieved: nothing scored high enough")
    recent = data["recent_message_indices"]
    if recent:
        lines.append(f"recent verbatim turns: {words} {recent[0]}-{recent[-1]} ({len(recent)})")
    lines.append("prompt (OpenAI messages):")
    lines.append(json.dumps(data["messages"], ensure_ascii=False, indent=2))
    lines.append(f"prompt tokens: {data['prompt_tokens']}   full history: {data['full_history_tokens']}   "
                 f"({data['token_ratio']:.1%})" + (f"   budget: {data['budget_tokens']}" if data["budget_tokens"] else ""))
    if "evidence_kept" in data:
        ev = data["evidence_kept"]
        lines.append(f"ground truth kept: {ev['kept']}/{ev['of']}")
    lines.extend(f"note: {n}" for n in data["notes"] if not (n.startswith(NO_ROOM) and kw and not data["retrieved"]))
    if "answer" in data:
        lines.append("answer:")
        lines.append(data["answer"])
    return "\n".join(lines)


def compare_rows(results: list[AskResult], price: str = "openai", layout: str = "head") -> list[dict[str, Any]]:
    """One row per strategy. `billed_warm`: the input billed under the `price` model had the
    previous turn's prompt been built the same way and still be cached (billing.warm_tokens)."""
    model = price_model(price)
    rows = []
    for r in results:
        truth = r.thread.ground_truth(r.request)
        kept = {r.thread.messages[p].index for p in r.included}
        append_only = layout == "cache" or (r.strategy == "full" and r.budget_tokens is None)
        warm = warm_tokens(r.prompt.messages, append_only)
        row = {"strategy": r.strategy, "input_tokens": r.prompt.tokens,
               "billed_warm": round(model.billed(r.prompt.tokens, warm)),
               "token_ratio": round(r.prompt.tokens / r.full_tokens, 4),
               "messages_kept": len(kept), "llm_calls": r.llm_calls,
               "keyword": " ".join(r.keywords.keywords) if r.keywords else None,
               "keyword_source": r.keywords.source if r.keywords else None,
               "llm_failures": list(r.llm_failures), "notes": list(r.prompt.notes)}
        if truth and truth.has_evidence:
            row["evidence_kept"] = len(kept & set(truth.relevant))
            row["evidence_total"] = len(truth.relevant)
        rows.append(row)
    return rows


def table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(_width(r[i]) for r in cells) for i in range(len(headers))]
    fmt = lambda r: "  ".join(c + " " * (w - _width(c)) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([fmt(cells[0]), fmt(["-" * w for w in widths])] + [fmt(r) for r in cells[1:]])


def _width(text: str) -> int:
    import unicodedata

    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def compare_text(rows: list[dict[str, Any]], full_tokens: int) -> str:
    has_truth = any("evidence_kept" in r for r in rows)
    headers = ["strategy", "input tokens", "vs full", "billed, warm cache", "messages kept"]
    headers += ["ground truth kept"] if has_truth else []
    headers += ["LLM calls", "keyword"]
    body = []
    for r in rows:
        line = [r["strategy"], r["input_tokens"], f"{r['token_ratio']:.0%}", r["billed_warm"], r["messages_kept"]]
        if has_truth:
            line.append(f"{r['evidence_kept']}/{r['evidence_total']} "
                        f"({r['evidence_kept'] / r['evidence_total']:.0%})")
        line += [r["llm_calls"], f"{r['keyword']} ({r['keyword_source']})" if r["keyword"] else "-"]
        body.append(line)
    failed = [f"{r['strategy']}: LLM step failed, the prompt shown did without it: {why}"
              for r in rows for why in r.get("llm_failures", ())]
    noted = [f"{r['strategy']}: note: {n}" for r in rows for n in r.get("notes", ())
             if not n.startswith("compaction failed")]  # said above, as a failed LLM step
    return "\n".join([table(headers, body), f"full history: {full_tokens} tokens", *failed, *noted])


def eval_text(report: dict[str, Any]) -> str:
    headers = ["strategy", "evidence_recall", "all_evidence_rate", "mean_prompt_tokens", "token_ratio",
               "p50_ms", "p95_ms", "n_queries"]
    if any("answer_f1" in m for m in report["strategies"].values()):
        headers += ["answer_f1", "judge_accuracy", "answer_coverage", "answer_ms_p50", "prompt_prefix_reuse"]
    rows = [[name] + ["-" if m.get(h) is None else m[h] for h in headers[1:]]
            for name, m in report["strategies"].items()]
    head = f"dataset: {report['dataset']}   budget: {report['budget'] or 'none'}   " \
           f"skipped (no evidence): {report['skipped_queries']}"
    failed = [f"{name}: the LLM step failed on {m['llm_failures']} of {m['n_queries']} queries "
              f"(first: {report['llm_failures'][name][0]})"
              for name, m in report["strategies"].items() if m.get("llm_failures")]
    return "\n".join([head, table(headers, rows), *failed])


def segmentation_text(report: dict[str, Any]) -> str:
    seg = report["segmentation"]
    rows = [[f"{seg['segmenter']} (configured)", seg["pk"], seg["window_diff"]]]
    rows += [[name, m["pk"], m["window_diff"]] for name, m in seg["baselines"].items()]
    head = f"dataset: {report['dataset']}   threads with topic_segments: {seg['n_threads']}   (lower is better)"
    return "\n".join([head, table(["segmentation", "pk", "window_diff"], rows)])
