"""LlamaIndex memory backed by semhist (extra `semhist[llamaindex]`).

- `SemhistMemory`: a `BaseMemory` over one stored thread for chat engines and agents
  (`SimpleChatEngine.from_defaults(memory=SemhistMemory.from_defaults(history, thread_id))`):
  `put` stores, `get` returns semhist's prompt for the current request.
- `SemhistMemoryBlock`: a block of `llama_index.core.memory.Memory`; the messages leaving its
  short-term queue are stored in semhist, and semhist's selection from them comes back.

LlamaIndex messages carry their text and tool calls (ToolCallBlock, or OpenAI-style
`additional_kwargs["tool_calls"]`) into semhist; other content blocks are refused.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from semhist.kernel.errors import InputError, missing_extra
from semhist.kernel.ids import check_thread_id

try:
    from llama_index.core.base.llms.types import (CachePoint, ChatMessage, TextBlock, ThinkingBlock,
                                                  ToolCallBlock)
    from llama_index.core.bridge.pydantic import ConfigDict, Field, field_validator
    from llama_index.core.memory import BaseMemory, BaseMemoryBlock
except ImportError as exc:
    raise missing_extra("llama-index-core", "llamaindex") from exc

from semhist.kernel.model import content_text

from semhist import History
from semhist.kernel.model import said
from . import _shared

# Where a prompt that left out the last exchanges is reported (LlamaIndex logs through
# Python's logging; with none configured, warnings reach stderr).
log = logging.getLogger("semhist.llamaindex")

__all__ = ["SemhistMemory", "SemhistMemoryBlock", "from_openai", "to_openai"]

# Cohere's and Gemini's names for the assistant.
_ROLES = {"chatbot": "assistant", "model": "assistant"}
# Blocks that are no part of what was said: the model's reasoning, a cache marker.
_SKIPPED = (ThinkingBlock, CachePoint)


def _budget_text(value: Any) -> str | None:
    budget = _shared.as_budget(value)
    return None if budget is None else str(budget)


class SemhistMemory(BaseMemory):
    """A chat memory over one semhist thread. `get()` after `put(user message)` (what chat
    engines and agents do) returns semhist's prompt for that message; with no user turn
    stored, the newest `recent` messages."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    history: History = Field(exclude=True, description="the semhist History that stores the thread")
    thread_id: str
    strategy: str = "blocks"
    budget: str | None = Field(default=None, description="prompt token budget: '2000' or '10%'")
    system_prompt: str | None = None
    recent: int = Field(default=20, gt=0)

    @field_validator("budget", mode="before")
    @classmethod
    def _check_budget(cls, value: Any) -> str | None:
        return _budget_text(value)

    @field_validator("thread_id")
    @classmethod
    def _check_thread(cls, value: str) -> str:
        return check_thread_id(value)

    @classmethod
    def class_name(cls) -> str:
        return "SemhistMemory"

    @classmethod
    def from_defaults(cls, history: History | None = None, thread_id: str | None = None,  # type: ignore[override]
                      chat_history: Sequence[ChatMessage] | None = None, token_limit: int | None = None,
                      **kwargs: Any) -> SemhistMemory:
        """A memory over `thread_id` (default: a new one). `token_limit`, which chat engines
        pass, becomes the budget unless one is given."""
        kwargs.pop("llm", None)  # chat engines pass their LLM to every memory; semhist's is its own
        if token_limit is not None and kwargs.get("budget") is None:
            kwargs["budget"] = token_limit
        memory = cls(history=history or History(), thread_id=thread_id or f"llamaindex-{uuid.uuid4().hex}", **kwargs)
        if chat_history:
            memory.set(list(chat_history))
        return memory

    def get(self, input: str | None = None, **kwargs: Any) -> list[ChatMessage]:
        """semhist's prompt for `input`, or for the newest stored user message."""
        stored_text, turn = _shared.current_turn(self.history, self.thread_id)
        request = input if input is not None else stored_text
        if request is None:
            return from_openai(_shared.stored(self.history, self.thread_id, self.recent))
        prompt = _shared.prompt(self.history, self.thread_id, request, turn=turn if stored_text == request else (),
                                strategy=self.strategy, budget=self.budget, system_prompt=self.system_prompt, log=log)
        return from_openai(prompt)

    def get_all(self) -> list[ChatMessage]:
        """The whole stored thread, oldest first."""
        return from_openai(_shared.stored(self.history, self.thread_id))

    def put(self, message: ChatMessage) -> None:
        _shared.store(self.history, self.thread_id, to_openai([message]))

    def put_messages(self, messages: list[ChatMessage]) -> None:
        """Store a batch in one write."""
        if messages:
            _shared.store(self.history, self.thread_id, to_openai(messages))

    def set(self, messages: list[ChatMessage]) -> None:
        """Make the thread hold `messages`. When they continue the stored thread only the rest
        is appended; otherwise the thread is forgotten and stored (embedded) again."""
        new = to_openai(messages)
        old = _shared.stored(self.history, self.thread_id)
        if old and [said(m) for m in old] == [said(m) for m in new[:len(old)]]:
            new = new[len(old):]
        elif old:
            self.reset()
        if new:
            _shared.store(self.history, self.thread_id, new)

    def reset(self) -> None:
        """Forget the thread (nothing happens when it is not stored)."""
        self.history.forget(self.thread_id)


class SemhistMemoryBlock(BaseMemoryBlock[list[ChatMessage]]):
    """A `Memory` block: what leaves the short-term queue is stored in semhist (the thread
    `thread_id`, default the Memory's session id); each get returns semhist's selection from
    it for the newest user message, as messages put before the queue."""

    name: str = "semhist"
    history: History = Field(exclude=True)
    thread_id: str | None = None
    strategy: str = "blocks"
    budget: str | None = None

    @field_validator("budget", mode="before")
    @classmethod
    def _check_budget(cls, value: Any) -> str | None:
        return _budget_text(value)

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> list[ChatMessage]:
        thread_id = self.thread_id or block_kwargs.get("session_id")
        users = [m for m in messages or () if m.role.value == "user"]
        request = (users[-1].content or "") if users else ""
        if not thread_id or not request.strip():
            return []
        return await asyncio.to_thread(self._selection, thread_id, request)

    def _selection(self, thread_id: str, request: str) -> list[ChatMessage]:
        if not self.history.store.count(thread_id):
            return []
        # No system prompt (the chat engine has its own), and not the request: it is the
        # Memory's own newest message.
        prompt = _shared.prompt(self.history, thread_id, request, strategy=self.strategy, budget=self.budget,
                                system_prompt="", log=log)
        return from_openai(prompt[:-1])

    async def _aput(self, messages: list[ChatMessage]) -> None:
        if not messages:
            return
        thread_id = self.thread_id or messages[0].additional_kwargs.get("session_id")
        if not thread_id:
            raise InputError("SemhistMemoryBlock needs a thread_id, or a Memory that passes its session id",
                             field="thread_id")
        await asyncio.to_thread(_shared.store, self.history, thread_id, to_openai(messages))


# -- conversion ----------------------------------------------------------------------------
def to_openai(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """LlamaIndex messages as the OpenAI chat dicts semhist stores (`additional_kwargs`
    "name", "tool_call_id" and "timestamp" carried over)."""
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, ChatMessage):
            raise InputError(f"message {i}: expected a LlamaIndex ChatMessage, got {type(message).__name__}",
                             index=i, field="message")
        out.append(_to_dict(message, i))
    return out


def _to_dict(message: ChatMessage, index: int) -> dict[str, Any]:
    texts, calls = [], []
    for block in message.blocks:
        if isinstance(block, TextBlock):
            texts.append(block.text)
        elif isinstance(block, ToolCallBlock):
            calls.append(_block_call(block))
        elif not isinstance(block, _SKIPPED):
            raise InputError(f"message {index}: semhist stores the text and tool calls of LlamaIndex messages, "
                             f"not a {type(block).__name__}", index=index, field="blocks")
    kw = message.additional_kwargs
    known = {c["id"] for c in calls}
    calls += [c for c in map(_legacy_call, kw.get("tool_calls") or ()) if c["id"] not in known]
    role = message.role.value
    out: dict[str, Any] = {"role": _ROLES.get(role, role), "content": "\n".join(texts)}
    if calls:
        out["tool_calls"] = calls
    out.update({k: kw[k] for k in ("name", "tool_call_id", "timestamp") if kw.get(k) is not None})
    return out


def _block_call(block: ToolCallBlock) -> dict[str, Any]:
    args = block.tool_kwargs
    arguments = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    return {"id": block.tool_call_id, "type": "function", "function": {"name": block.tool_name, "arguments": arguments}}


def _legacy_call(call: Any) -> dict[str, Any]:
    """An OpenAI-style call from `additional_kwargs` (a dict, or the OpenAI SDK's object)."""
    data = call.model_dump() if hasattr(call, "model_dump") else dict(call)
    fn = dict(data.get("function") or {})
    return {"id": data.get("id"), "type": data.get("type", "function"),
            "function": {"name": fn.get("name"), "arguments": fn.get("arguments")}}


def from_openai(messages: Sequence[Mapping[str, Any]]) -> list[ChatMessage]:
    """OpenAI chat dicts (semhist's prompt or stored messages) as LlamaIndex messages."""
    return [_chat_message(m) for m in messages]


def _chat_message(m: Mapping[str, Any]) -> ChatMessage:
    text = content_text(m.get("content"))
    calls = m.get("tool_calls") or ()
    blocks: list[Any] = [TextBlock(text=text)] if text or not calls else []
    blocks += [ToolCallBlock(tool_call_id=c["id"], tool_name=c["function"]["name"],
                             tool_kwargs=_args(c["function"]["arguments"])) for c in calls]
    extra = {k: m[k] for k in ("name", "tool_call_id") if m.get(k)}
    return ChatMessage(role=m["role"], blocks=blocks, additional_kwargs=extra)


def _args(arguments: str) -> dict[str, Any] | str:
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return arguments
    return parsed if isinstance(parsed, dict) else arguments
