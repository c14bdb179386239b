"""Microsoft Agent Framework memory backed by semhist (extra `semhist[agent-framework]`).

An agent session is a stored thread (`session.session_id`, made a thread id as Teams ids are).

- `SemhistHistoryProvider(history)`: a `HistoryProvider` that replays the thread as stored (its
  newest `last` messages, or all) and stores each run's input and reply.
- `SemhistContextProvider(history, budget=...)`: the same storage, but before each run, instead
  of the whole thread, semhist's prompt for the newest user message: the recent turns as they
  were, then the retrieved history as one quoted context message just before the input. What
  stays the same from turn to turn comes first, so a provider's prompt cache keeps it; the
  context is a user message of quoted history, never instructions (the agent's own
  `instructions` stay the framework's).

    agent = Agent(client, instructions="...", context_providers=[SemhistContextProvider(history, budget="2000")])
    reply = await agent.run(text, session=agent.create_session(session_id=conversation_id))
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from semhist.kernel.errors import InputError, missing_extra
from semhist.kernel.ids import thread_id_for
from semhist.kernel.model import content_text

try:
    from agent_framework import Content, HistoryProvider, Message
except ImportError as exc:
    raise missing_extra("agent-framework-core", "agent-framework") from exc

from semhist import History
from . import _shared
from ._shared import BudgetLike

log = logging.getLogger("semhist.agent_framework")

__all__ = ["SemhistContextProvider", "SemhistHistoryProvider", "from_openai", "thread_of", "to_openai"]


def thread_of(session_id: str | None) -> str:
    """The stored thread of an agent session."""
    if not session_id:
        raise InputError("the run has no session id: pass session=agent.create_session(session_id=...)",
                         field="session_id")
    return thread_id_for(session_id, prefix="af-")


class SemhistHistoryProvider(HistoryProvider):
    """The session's stored thread, replayed whole (or its newest `last` messages), and each
    run's input and reply stored (a message's `message_id` is its idempotency key)."""

    def __init__(self, history: History, *, last: int | None = None, source_id: str = "semhist", **options: Any):
        super().__init__(source_id, **options)
        self.history, self.last = history, last

    async def get_messages(self, session_id: str | None, *, state: dict[str, Any] | None = None,
                           **kwargs: Any) -> list[Message]:
        return from_openai(await asyncio.to_thread(_shared.stored, self.history, thread_of(session_id), self.last))

    async def save_messages(self, session_id: str | None, messages: Sequence[Message], *,
                            state: dict[str, Any] | None = None, **kwargs: Any) -> None:
        await asyncio.to_thread(_shared.store, self.history, thread_of(session_id), to_openai(messages))


class SemhistContextProvider(SemhistHistoryProvider):
    """Stores like `SemhistHistoryProvider`; before each run, semhist's prompt for the newest
    user message (recent turns and the retrieved history, within `budget`) instead of the thread."""

    def __init__(self, history: History, *, budget: BudgetLike = None, strategy: str = "blocks",
                 source_id: str = "semhist", **options: Any):
        super().__init__(history, source_id=source_id, **options)
        self.budget, self.strategy = _shared.as_budget(budget), strategy

    async def before_run(self, *, agent: Any, session: Any, context: Any, state: dict[str, Any]) -> None:
        request = next((m.text for m in reversed(context.input_messages) if m.role == "user" and m.text), None)
        if request is None:  # a run that only carries tool results: the turn under way has its context
            return
        thread = thread_of(context.session_id)
        prompt = await asyncio.to_thread(_shared.prompt, self.history, thread, request, strategy=self.strategy,
                                         budget=self.budget, system_prompt="", log=log)
        if prompt and prompt[-1]["role"] == "user":
            prompt = prompt[:-1]  # the request itself: the run's input follows
        context.extend_messages(self, from_openai(prompt))


# -- Agent Framework messages <-> OpenAI chat dicts ----------------------------------------------
def to_openai(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Framework messages as chat dicts: text, function calls (an assistant's `tool_calls`) and
    each function result as a tool message; what has none of these is named by its kinds."""
    out: list[dict[str, Any]] = []
    for m in messages:
        key = m.message_id
        results = [c for c in m.contents if c.type == "function_result"]
        for i, r in enumerate(results):
            result = r.result if isinstance(r.result, str) else json.dumps(r.result, ensure_ascii=False, default=str)
            out.append({"role": "tool", "tool_call_id": r.call_id, "content": result,
                        **({"id": f"{key}:{i}"} if key else {})})
        if results:
            continue
        calls = [{"id": c.call_id, "type": "function", "function": {
            "name": c.name, "arguments": c.arguments if isinstance(c.arguments, str) else
            json.dumps(c.arguments or {}, ensure_ascii=False)}} for c in m.contents if c.type == "function_call"]
        text = m.text or (None if calls else "[" + ", ".join(c.type for c in m.contents) + "]")
        message: dict[str, Any] = {"role": m.role, "content": text}
        if calls:
            message["tool_calls"] = calls
        if m.author_name:
            message["name"] = m.author_name
        if key:
            message["id"] = key
        out.append(message)
    return out


def from_openai(messages: Sequence[Mapping[str, Any]]) -> list[Message]:
    """Chat dicts (a prompt, a stored thread) as framework messages."""
    out = []
    for m in messages:
        role = "system" if m["role"] == "developer" else m["role"]
        if role == "tool":
            contents = [Content.from_function_result(m.get("tool_call_id"), result=content_text(m.get("content")))]
        else:
            text = content_text(m.get("content"))
            contents = [Content.from_text(text)] if text else []
            contents += [Content.from_function_call(c["id"], c["function"]["name"],
                                                    arguments=c["function"].get("arguments") or "")
                         for c in m.get("tool_calls") or ()]
        out.append(Message(role, contents, author_name=m.get("name"), message_id=m.get("id")))
    return out
