"""The chat-completions rules on turns: tool calls and their results in pairs, instructions
never between them, and same-role turns merged for APIs that insist on alternation."""

from __future__ import annotations

from typing import Any


def after_tool_results(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An instruction that arrived between a tool call and its results waits until the results
    are in: the API refuses anything between them."""
    out: list[dict[str, Any]] = []
    waiting: list[dict[str, Any]] = []
    for m in turns:
        if m["role"] == "system" and out and (out[-1]["role"] == "tool" or out[-1].get("tool_calls")):
            waiting.append(m)
            continue
        if waiting and m["role"] != "tool":
            out.extend(waiting)
            waiting = []
        out.append(m)
    return out + waiting


def _first_by(items: list[dict[str, Any]], key) -> list[dict[str, Any]]:
    seen: set = set()
    out = []
    for item in items:
        if key(item) not in seen:
            seen.add(key(item))
            out.append(item)
    return out


def pair_tool_messages(turns: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """Keep tool calls and their results in the pairs the chat-completions API insists on: a
    `tool` message must answer a call of the assistant message just before it (other results
    between), and every call of an assistant message must be answered. The window or the
    budget can cut a pair in two; the half left alone is dropped (a call's text stays)."""
    out: list[dict[str, Any]] = []
    calls_dropped = results_dropped = 0
    i = 0
    while i < len(turns):
        m = turns[i]
        if m["role"] == "tool":  # no assistant call right before it
            results_dropped += 1
            i += 1
            continue
        if m["role"] != "assistant" or not m.get("tool_calls"):
            out.append(m)
            i += 1
            continue
        j = i + 1
        while j < len(turns) and turns[j]["role"] == "tool":
            j += 1
        results = _first_by(turns[i + 1:j], lambda r: r.get("tool_call_id"))  # a result stored twice goes once
        answered = {r.get("tool_call_id") for r in results}
        calls = [c for c in _first_by(m["tool_calls"], lambda c: c.get("id")) if c.get("id") in answered]
        ids = {c.get("id") for c in calls}
        kept = [r for r in results if r.get("tool_call_id") in ids]
        results_dropped += j - i - 1 - len(results)
        calls_dropped += len(m["tool_calls"]) - len(calls)
        results_dropped += len(results) - len(kept)
        if calls:
            out.append({**m, "tool_calls": calls})
            out.extend(kept)
        elif m.get("content"):
            out.append({k: v for k, v in m.items() if k != "tool_calls"})
        i = j
    notes = []
    if results_dropped:
        notes.append(f"left out {results_dropped} tool result(s) whose call is not in the prompt")
    if calls_dropped:
        notes.append(f"left out {calls_dropped} tool call(s) whose result is not in the prompt")
    return out, notes


def _as_parts(content: Any) -> list[dict[str, Any]]:
    return list(content) if isinstance(content, list) else [{"type": "text", "text": content or ""}]


def merge_same_role(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For APIs that require user/assistant to alternate: consecutive plain messages of one
    role become one message (tool calls and results are never merged); text is joined, and
    content parts are concatenated when either side has them."""
    out: list[dict[str, Any]] = []
    for m in turns:
        plain = set(m) <= {"role", "content", "name"} and m["role"] in ("user", "assistant")
        prev = out[-1] if out else None
        if plain and prev is not None and prev["role"] == m["role"] and set(prev) <= {"role", "content", "name"}:
            if isinstance(prev["content"], str) and isinstance(m["content"], str):
                content: Any = f"{prev['content']}\n\n{m['content']}"
            else:
                content = _as_parts(prev["content"]) + _as_parts(m["content"])
            out[-1] = {"role": m["role"], "content": content}
        else:
            out.append(dict(m))
    return out
