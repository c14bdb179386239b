"""The data that flows between stages: messages, threads, blocks."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import cached_property
from datetime import datetime
from typing import Any

ROLES = ("system", "user", "assistant", "tool")


@dataclass(frozen=True)
class Message:
    """One validated utterance; `index` is its position in the thread as loaded."""

    index: int
    role: str
    content: str
    timestamp: datetime | None = None
    name: str | None = None
    tool_calls: tuple[dict[str, Any], ...] | None = field(default=None, compare=False)
    tool_call_id: str | None = None

    def to_openai(self) -> dict[str, Any]:
        """This message as an OpenAI chat `messages` entry (tool calls kept as they are)."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.name and self.role in ("user", "assistant"):
            out["name"] = self.name
        if self.tool_calls:
            out["tool_calls"] = [dict(c) for c in self.tool_calls]
        if self.tool_call_id:
            out["tool_call_id"] = self.tool_call_id
        return out


@dataclass(frozen=True)
class Query:
    """A benchmark question with the message indices that answer it."""

    text: str
    relevant: tuple[int, ...] = ()
    category: str | None = None
    answerable: bool = True

    @property
    def has_evidence(self) -> bool:
        return self.answerable and bool(self.relevant)


@dataclass(frozen=True)
class Thread:
    """One conversation: validated messages plus optional benchmark queries."""

    id: str
    messages: tuple[Message, ...]
    queries: tuple[Query, ...] = ()
    language: str | None = None

    @cached_property
    def system_positions(self) -> tuple[int, ...]:
        """Where the system messages are (they go first in every prompt)."""
        return tuple(p for p, m in enumerate(self.messages) if m.role == "system")

    @cached_property
    def fingerprint(self) -> str:
        """Identifies the messages as retrieval reads them (computed once per thread object)."""
        h = hashlib.sha256()
        for m in self.messages:
            h.update(f"{m.index}\x00{m.role}\x00{m.name or ''}\x00{m.content}\x00"
                     f"{m.timestamp.isoformat() if m.timestamp else ''}\x00{m.tool_call_id or ''}\x00"
                     f"{m.tool_calls or ''}\x01".encode())
        return h.hexdigest()

    def ground_truth(self, request: str) -> Query | None:
        """The benchmark query whose text is this request, if the file carries one."""
        wanted = request.strip()
        return next((q for q in self.queries if q.text.strip() == wanted), None)


@dataclass(frozen=True)
class Block:
    """A run of consecutive non-system messages that is retrieved as a unit."""

    id: int
    message_ids: tuple[int, ...]
    start_time: datetime | None
    end_time: datetime | None
    tokens: int
    parts: tuple[int, ...] = (0,)  # offsets where topic sub-segments start inside the block

    def part_of(self, offset: int) -> tuple[int, ...]:
        """Message positions of the topic sub-segment holding the message at `offset`."""
        starts = [p for p in self.parts if p <= offset]
        lo = starts[-1] if starts else 0
        later = [p for p in self.parts if p > offset]
        return self.message_ids[lo:later[0] if later else len(self.message_ids)]

    @property
    def first(self) -> int:
        return self.message_ids[0]

    @property
    def last(self) -> int:
        return self.message_ids[-1]


def message_text(msg: Message) -> str:
    """What a message is searched as: its text (tool calls by their function names)."""
    if msg.content:
        return msg.content
    names = [str(c.get("function", {}).get("name", "")) for c in msg.tool_calls or ()]
    return " ".join(n for n in names if n)


def embedding_text(msg: Message) -> str:
    """What a message is embedded as. The author's name goes with the text because requests
    name people ("what did Caroline research?"); measured on LoCoMo it lifts recall."""
    text = message_text(msg)
    return f"{msg.name}: {text}" if msg.name else text
