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
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from semhist.indexers.index.thread_index import ThreadIndex
from semhist.kernel.model import Message, Thread
from semhist.kernel.settings import Settings

ARGUMENTS_SHOWN = 60  # characters of a call's arguments the placeholder repeats


def call_name(call: dict[str, Any]) -> tuple[str, str]:
    """A tool call's function name and its arguments as sent."""
    function: Any = call.get("function") or {}
    arguments = function.get("arguments", "")
    return str(function.get("name") or "a tool"), arguments if isinstance(arguments, str) else json.dumps(arguments)


def placeholder(name: str, arguments: str, chars: int) -> str:
    shown = arguments if len(arguments) <= ARGUMENTS_SHOWN else arguments[:ARGUMENTS_SHOWN] + "…"
    return f"[result of {name}({shown}) cleared: {chars:,} characters, retrieved when a request needs them]"


class ClearedResults:
    """The thread as prompts show it, kept by appends (a ThreadIndex derivation): each message
    is looked at once, when it arrives, and a result is cleared once, when its step comes.

    Results are cleared oldest first and the newest user turn only moves forward, so the
    cleared results are always a prefix of the clearable ones: a pointer into them is enough.
    """

    def __init__(self, settings: Settings, tail_from: int = 0):
        self.keep, self.step = settings.keep_tool_results, settings.tool_clear_step
        # a long thread's view: results before its unbroken end (blocks chosen for the request)
        # are older than every result of that end, so cleared (unless of the current turn); the
        # steps count the end's alone, which keeps them where they were from turn to turn
        self.tail_from = tail_from
        self.early: list[int] = []  # results before it, not yet cleared (the current turn's are not)
        self.changed = False  # a result shows as its placeholder
        self.protected = {n.strip() for n in settings.protected_tools.split(",") if n.strip()}
        self.calls: dict[str, tuple[str, str]] = {}  # call id -> (function name, arguments)
        self.results: list[int] = []  # positions of the results that may be cleared, in order
        self.cleared = 0  # results[:cleared] show as placeholders
        self.turn = -1  # position of the newest user message
        self.shown: list[Message] = []
        self._thread: Thread | None = None

    def extend(self, messages: Sequence[Message], start: int) -> None:
        for p in range(start, len(messages)):
            m = messages[p]
            self.shown.append(m)
            for call in m.tool_calls or ():
                self.calls[str(call.get("id"))] = call_name(call)
            if m.role == "user":
                self.turn = p
            elif m.role == "tool" and self.keep >= 0 and self._name(m)[0] not in self.protected:
                (self.early if p < self.tail_from else self.results).append(p)
        while self.early and self.early[0] < self.turn:  # before the current turn: cleared
            self._clear(messages, self.early.pop(0))
        old = len(self.results) - self.keep
        due = old // self.step * self.step if self.keep >= 0 and old > 0 else 0
        # the current turn's results (after the last user message) are never cleared: an
        # agent in a tool loop needs all it has read for the answer it is writing
        while self.cleared < due and self.results[self.cleared] < self.turn:
            self._clear(messages, self.results[self.cleared])
            self.cleared += 1

    def _clear(self, messages: Sequence[Message], p: int) -> None:
        name, arguments = self._name(messages[p])
        # characters, not tokens: counting a large result's tokens costs more than it says
        self.shown[p] = replace(messages[p], cleared=placeholder(name, arguments, len(messages[p].content)))
        self._thread, self.changed = None, True

    def _name(self, result: Message) -> tuple[str, str]:
        return self.calls.get(str(result.tool_call_id), ("a tool", ""))

    def shown_thread(self, thread: Thread) -> Thread:
        if not self.changed:
            return thread
        if self._thread is None or len(self._thread.messages) != len(self.shown):
            self._thread = thread.with_messages(tuple(self.shown))
        return self._thread

    def value(self, index: ThreadIndex) -> Thread:
        return self.shown_thread(index.thread)


def clearable(thread: Thread, settings: Settings) -> list[int]:
    """Positions of the tool results a prompt shows as placeholders, oldest first."""
    cleared = ClearedResults(settings)
    cleared.extend(thread.messages, 0)
    return cleared.results[:cleared.cleared]


def clear_old_results(thread: Thread, settings: Settings) -> Thread:
    """The thread as prompts show it: old tool results replaced by placeholders."""
    cleared = ClearedResults(settings)
    cleared.extend(thread.messages, 0)
    return cleared.shown_thread(thread)
