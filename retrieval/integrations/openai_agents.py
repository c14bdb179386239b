"""OpenAI Agents SDK memory backed by semhist (extra `semhist[openai-agents]`).

`SemhistSession(history, session_id)` implements the SDK's `Session` protocol over a stored
thread: `add_items` stores each item of a run (messages, function calls and their outputs, as
chat messages), `pop_item` and `clear_session` forget. The Runner asks a session for its items
before it knows the new input, so semhist's prompt for that input is made in the run's
`session_input_callback`:

    session = SemhistSession(History(), conversation_id, budget=2000)
    result = await Runner.run(agent, text, session=session,
                              run_config=RunConfig(session_input_callback=session.prompt))

`prompt` replaces the history with semhist's prompt for the new input (the recent turns as
they were, the retrieved history quoted in one user message), so the model never gets the
whole thread. Without the callback, `get_items()` gives the thread's newest turns only (at
most `session_settings.limit` items, else the last `RECENT` messages), never the whole thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

from semhist.kernel.errors import missing_extra
from semhist.kernel.ids import thread_id_for
from semhist.kernel.items import as_chat, as_input

try:
    from agents.memory import SessionSettings
    from agents.models.fake_id import FAKE_RESPONSES_ID
except ImportError as exc:
    raise missing_extra("openai-agents", "openai-agents") from exc

from semhist import History
from . import _shared
from ._shared import BudgetLike

log = logging.getLogger("semhist.openai_agents")

__all__ = ["SemhistSession"]

RECENT = 8  # messages get_items gives without a limit: the last exchanges, never the whole thread


class SemhistSession:
    """The SDK's `Session` over one stored thread (`session_id`, made a thread id as Teams ids are)."""

    def __init__(self, history: History, session_id: str, *, budget: BudgetLike = None, strategy: str = "blocks",
                 session_settings: SessionSettings | None = None):
        self.history, self.session_id = history, session_id
        self.thread = thread_id_for(session_id, prefix="oa-")
        self.budget, self.strategy = _shared.as_budget(budget), strategy
        self.session_settings = session_settings
        self._handed: Counter[tuple] = Counter()  # the items the last `prompt` added

    async def get_items(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The newest stored items, oldest first: `limit` of them (or the session settings'),
        else the last RECENT messages."""
        limit = limit if limit is not None else getattr(self.session_settings, "limit", None)
        if limit is not None and limit <= 0:
            return [] if limit == 0 else await self._items(None)
        return await self._items(limit if limit is not None else RECENT)

    async def _items(self, last: int | None) -> list[dict[str, Any]]:
        stored = await asyncio.to_thread(_shared.stored, self.history, self.thread, last)
        return as_input([_shared.prompt_form(m) for m in stored])

    async def add_items(self, items: list[dict[str, Any]]) -> None:
        messages: list[dict[str, Any]] = []
        for item in items:
            if self._handed_out(item):
                continue  # the SDK takes what `prompt` added for new: it is stored (or derived) already
            converted = as_chat({"input": [dict(item)]}, strict=False) if isinstance(item, dict) else []
            if not converted:
                continue
            message, key = converted[0], _key(item)
            last = messages[-1] if messages else None
            if message.get("tool_calls") and last and last.get("tool_calls") and not last["content"]:
                last["tool_calls"] += message["tool_calls"]  # parallel calls: one assistant turn
                last["id"] = f"{last['id']},{item.get('call_id')}"[:500]
                continue
            messages.append({**message, "id": key} if key else message)
        # what `prompt` handed out comes back, if at all, in the first save after it (the new
        # input's); held longer, a new reply saying the words of an earlier one was dropped
        self._handed = Counter()
        if messages:
            await asyncio.to_thread(_shared.store, self.history, self.thread, messages)

    async def pop_item(self) -> dict[str, Any] | None:
        """Forget the newest stored message; it comes back as an item."""
        def pop():
            last = self.history.store.messages(self.thread, last=1) if self.history.store.count(self.thread) else []
            if not last:
                return None
            self.history.forget(self.thread, ids=[last[0].id])
            return last[0]
        message = await asyncio.to_thread(pop)
        if message is None:
            return None
        items = as_input([_shared.prompt_form(_shared.as_dict(message))])
        return items[-1] if items else None

    async def clear_session(self) -> None:
        def clear():
            if self.history.store.count(self.thread):
                self.history.forget(self.thread)
        await asyncio.to_thread(clear)

    async def prompt(self, history: list[Any], new_input: list[Any]) -> list[Any]:
        """`RunConfig(session_input_callback=session.prompt)`: semhist's prompt for the newest
        user text of the new input, then the new input as given (the SDK stores it)."""
        request = next((_text(i) for i in reversed(new_input) if isinstance(i, dict) and i.get("role") == "user"
                        and _text(i)), None)
        if request is None:  # tool outputs only: the turn under way continues from what it had
            return [*history, *new_input]
        prompt = await asyncio.to_thread(_shared.prompt, self.history, self.thread, request, strategy=self.strategy,
                                         budget=self.budget, system_prompt="", log=log)
        if prompt and prompt[-1]["role"] == "user":
            prompt = prompt[:-1]  # the request itself: the new input follows
        items = as_input(prompt)
        self._handed = Counter(_fingerprint(i) for i in items)
        return [*items, *new_input]

    def _handed_out(self, item: Any) -> bool:
        """Whether `item` is one `prompt` handed out (each once, in order): the SDK persists every
        item a callback adds that was neither history nor new input."""
        key = _fingerprint(item) if isinstance(item, dict) else None
        if key is not None and self._handed.get(key, 0) > 0:
            self._handed[key] -= 1
            return True
        return False


def _text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(p.get("text", "") for p in content or () if isinstance(p, dict) and "text" in p)


def _fingerprint(item: dict[str, Any]) -> tuple:
    kind = item.get("type") or "message"
    return (kind, item.get("role"), _text(item)) if kind == "message" else (kind, item.get("call_id"))


def _key(item: dict[str, Any]) -> str | None:
    """A stored item's idempotency key: its id (messages), its call's id (calls, outputs);
    None when nothing names it (a user message given as text)."""
    if item.get("type") == "function_call_output":
        return f"{item['call_id']}:output" if item.get("call_id") else None
    if item.get("type") == "function_call":
        return f"call:{item['call_id']}" if item.get("call_id") else None
    key = item.get("id")
    # the SDK gives every message from a chat-completions model the same placeholder id: keyed
    # by it, each reply after the first would be taken for the first and dropped
    return key if isinstance(key, str) and key and key != FAKE_RESPONSES_ID else None
