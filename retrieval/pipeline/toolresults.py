"""Old tool results leave the prompt's turns; a short placeholder says what was there.

In an agent's thread, tool outputs (file contents, search results) take most of the tokens
and are rarely needed once answered. Every prompt keeps the last `keep_tool_results` results
whole; older ones show a placeholder naming the call. A call and its result stay together
(the result message stays, only its content changes), results of `protected_tools` are never
cleared, and results are cleared `tool_clear_step` at a time: between steps the prompt's start
is the same from turn to turn, so a provider's prompt cache keeps working.

A cleared result is still stored, embedded and indexed like any message: a request that needs
it retrieves it, whole, into the context message.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from indexers.model import Message, Thread
from indexers.settings import Settings

ARGUMENTS_SHOWN = 60  # characters of a call's arguments the placeholder repeats


def tool_names(thread: Thread) -> dict[str, tuple[str, str]]:
    """call id -> (function name, its arguments as sent), from the assistant's tool calls."""
    out: dict[str, tuple[str, str]] = {}
    for m in thread.messages:
        for call in m.tool_calls or ():
            function: Any = call.get("function") or {}
            arguments = function.get("arguments", "")
            out[str(call.get("id"))] = (str(function.get("name") or "a tool"),
                                        arguments if isinstance(arguments, str) else json.dumps(arguments))
    return out


def placeholder(name: str, arguments: str, chars: int) -> str:
    shown = arguments if len(arguments) <= ARGUMENTS_SHOWN else arguments[:ARGUMENTS_SHOWN] + "…"
    return f"[result of {name}({shown}) cleared: {chars:,} characters, retrieved when a request needs them]"


def clearable(thread: Thread, settings: Settings) -> list[int]:
    """Positions of the tool results a prompt shows as placeholders, oldest first. The results
    of the current turn (after the last user message) are never among them: an agent in a
    tool loop needs all it has read for the answer it is writing."""
    if settings.keep_tool_results < 0:
        return []
    protected = {n.strip() for n in settings.protected_tools.split(",") if n.strip()}
    names = tool_names(thread) if protected else {}
    results = [p for p, m in enumerate(thread.messages) if m.role == "tool"
               and (names.get(str(m.tool_call_id), ("",))[0] not in protected)]
    old = len(results) - settings.keep_tool_results
    step = settings.tool_clear_step
    turn = next((p for p in range(len(thread.messages) - 1, -1, -1) if thread.messages[p].role == "user"), 0)
    return [p for p in results[:old // step * step] if p < turn] if old > 0 else []


def clear_old_results(thread: Thread, settings: Settings) -> Thread:
    """The thread as prompts show it: old tool results replaced by placeholders (Asker keeps
    it with the thread's index until the thread changes)."""
    positions = clearable(thread, settings)
    if not positions:
        return thread
    names = tool_names(thread)
    messages = list(thread.messages)
    for p in positions:
        m: Message = messages[p]
        name, arguments = names.get(str(m.tool_call_id), ("a tool", ""))
        # characters, not tokens: counting a large result's tokens on every request costs more than it says
        messages[p] = replace(m, cleared=placeholder(name, arguments, len(m.content)))
    return replace(thread, messages=tuple(messages))
