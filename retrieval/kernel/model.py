"""The data that flows between stages: messages, threads, blocks."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .errors import InputError
from .quoting import neutral, plain_name, reserved, visible

if TYPE_CHECKING:
    import numpy as np

ROLES = ("system", "user", "assistant", "tool")
# Roles that mean one of ours: OpenAI's `developer` is the operator's instruction (a system
# message) for every placement and budget rule; the given name comes back in the prompt.
ROLE_ALIASES = {"developer": "system"}
# The longest message text (characters) accepted by default: a quarter-million tokens, more
# than any model reads at once; it bounds what one write may cost.
MAX_MESSAGE_CHARS = 1_000_000


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
    # What semhist keeps but does not interpret, returned as given: the content parts of a
    # message sent as parts ({"content": [...]}) and the role it was sent with ({"role": "developer"}).
    verbatim: dict[str, Any] | None = field(default=None, compare=False)
    # What a prompt shows instead of an old tool result (retrieval/pipeline/toolresults.py);
    # its text stays what search and the retrieved context read.
    cleared: str | None = field(default=None, compare=False)
    # Who stored an operator message (a system one): kernel/writers.py. Never sent.
    writer: str | None = field(default=None, compare=False)

    def __post_init__(self):
        # A Message carries no time zone to read text on: a time as text would fail far from
        # here (the first isoformat()). load, build_thread and History.add read ISO text.
        if self.timestamp is not None and not isinstance(self.timestamp, datetime):
            raise InputError(f"Message: timestamp must be a datetime or None, got {type(self.timestamp).__name__} "
                             "(build_thread, load and History.add read ISO 8601 text)", field="timestamp")

    def to_openai(self) -> dict[str, Any]:
        """This message as an OpenAI chat `messages` entry (tool calls and parts as given),
        its text with chat-template control tokens neutralised (kernel/quoting.py)."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        name = api_name(self.name) if self.name and self.role in ("user", "assistant") else None
        if name:
            out["name"] = name
        if self.tool_calls:
            out["tool_calls"] = [dict(c) for c in self.tool_calls]
        if self.tool_call_id:
            out["tool_call_id"] = self.tool_call_id
        if self.verbatim:
            out.update(self.verbatim)
        if self.cleared is not None:
            out["content"] = self.cleared
        return _neutralised(out)


def _neutralised(message: dict[str, Any]) -> dict[str, Any]:
    """A chat message with no control token in its text, parts or tool-call arguments: stored
    text must not become a template's `<|im_start|>system` when a server renders it."""
    content = message.get("content")
    if isinstance(content, str):
        message["content"] = neutral(content)
    elif isinstance(content, list):
        message["content"] = [{**p, "text": neutral(p["text"])}
                              if isinstance(p, dict) and isinstance(p.get("text"), str) else p for p in content]
    if message.get("tool_calls"):
        message["tool_calls"] = [_neutral_call(c) for c in message["tool_calls"]]
    return message


def _neutral_call(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("arguments"), str):
        return call
    return {**call, "function": {**function, "arguments": neutral(function["arguments"])}}


# The chat-completions API refuses a `name` with whitespace or any of < | \ / > (its pattern is
# ^[^\s<|\\/>]+$), and Teams display names have spaces: "Taro Yamada" goes out as "Taro_Yamada".
# A template may print the name into the prompt, so it keeps what a line's label keeps plainly
# (kernel/quoting.py): letters, digits and marks that read as no bracket or colon, and _ - . '.
_NAME_KEPT = frozenset("_-.'")
_NAME_CUT = re.compile("\x00+")


def api_name(name: str) -> str | None:
    """A speaker's name as the API accepts it (at most 64 characters; anything else as "_"), None
    when nothing is left or when it reads as a role ("system"): the message's role is what it is."""
    return _api_name(name[:1024])  # the cache keeps no more of a name than could reach the 64


@lru_cache(maxsize=4096)
def _api_name(name: str) -> str | None:
    kept = "".join(c if c in _NAME_KEPT or (unicodedata.category(c)[0] in "LNM" and plain_name(c)) else "\x00"
                   for c in visible(name))
    clean = _NAME_CUT.sub("_", kept).strip("_")[:64]
    return clean if clean and not reserved(clean) else None


@dataclass(frozen=True)
class Query:
    """A benchmark question with the message indices that answer it."""

    text: str
    relevant: tuple[int, ...] = ()
    category: str | None = None
    answerable: bool = True
    answer: str | None = None  # the gold answer, where the benchmark has one (LoCoMo)

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
    # positions whose message does not follow the one before it directly (a long thread's
    # view holds some of its messages: retrieved neighbours there are not always neighbours)
    gaps: frozenset[int] = frozenset()

    @classmethod
    def indexed(cls, thread_id: str, messages: tuple[Message, ...], system_positions: tuple[int, ...],
                gaps: frozenset[int] = frozenset()) -> Thread:
        """A thread whose system positions are already known (an index keeps them as messages
        arrive): finding them again would walk every message on every change."""
        thread = cls(thread_id, messages, gaps=gaps)
        thread.__dict__["system_positions"] = system_positions  # the cached_property's own slot
        return thread

    def with_messages(self, messages: tuple[Message, ...]) -> Thread:
        """The same thread with some messages shown otherwise (same roles at the same places)."""
        thread = Thread(self.id, messages, self.queries, self.language, self.gaps)
        thread.__dict__["system_positions"] = self.system_positions
        return thread

    @cached_property
    def system_positions(self) -> tuple[int, ...]:
        """Where the system messages are (they go first in every prompt)."""
        return tuple(p for p, m in enumerate(self.messages) if m.role == "system")

    @property
    def last_time(self) -> datetime | None:
        """The time of the newest timed message: relative dates ("last week") count from it."""
        return next((m.timestamp for m in reversed(self.messages) if m.timestamp), None)

    @cached_property
    def fingerprint(self) -> str:
        """Identifies the messages as retrieval reads them (computed once per thread object)."""
        h = hashlib.sha256()
        for m in self.messages:
            h.update(f"{m.index}\x00{m.role}\x00{m.name or ''}\x00{m.content}\x00"
                     f"{m.timestamp.isoformat() if m.timestamp else ''}\x00{m.tool_call_id or ''}\x00"
                     f"{m.tool_calls or ''}{m.verbatim or ''}\x01".encode())
        return h.hexdigest()

    def ground_truth(self, request: str) -> Query | None:
        """The benchmark query whose text is this request, if the file carries one."""
        wanted = request.strip()
        return next((q for q in self.queries if q.text.strip() == wanted), None)


def cause_fields(cause: str | None) -> dict[str, Any]:
    """A block's start cause (Block.cause) as fields: {"kind": "pause", "seconds": 5400},
    {"kind": "topic", "score": 0.83} (also "drift" and "depth", the drift rules' values),
    {"kind": "size"}, {"kind": "closing"}; {"kind": "start"} for "" (a thread's first block)."""
    if not cause:
        return {"kind": "start"}
    kind, _, value = cause.partition(":")
    if not value:
        return {"kind": kind}
    try:
        number = float(value)
    except ValueError:
        return {"kind": kind}
    return {"kind": kind, "seconds" if kind == "pause" else "score": int(number) if kind == "pause" else number}


@dataclass(frozen=True)
class Block:
    """A run of consecutive non-system messages that is retrieved as a unit."""

    id: int
    message_ids: tuple[int, ...]
    start_time: datetime | None
    end_time: datetime | None
    tokens: int
    parts: tuple[int, ...] = (0,)  # offsets where topic sub-segments start inside the block
    # Why the block starts (the segmenter's decision, for the inspector and the turn log):
    # "pause:SECONDS", "closing" (a user's thanks where messages carry no time), "size",
    # "topic:P" (the learned scorer's probability), "drift:D" / "depth:D" (the drift rules);
    # "" for a thread's first block.
    cause: str = ""

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
    def why(self) -> dict[str, Any]:
        """`cause` as the inspector and the turn log show it (a later block without one was
        stored before causes were kept)."""
        return cause_fields(self.cause) if self.cause or self.id == 0 else {"kind": "unknown"}

    @property
    def last(self) -> int:
        return self.message_ids[-1]


def content_text(content: Any) -> str:
    """The text of an OpenAI message content: a string, or the text parts of a part list
    joined by newlines; "" for anything else (None, a tool call's missing content)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping) and p.get("type") == "text")
    return ""


def message_text(msg: Message) -> str:
    """What a message is searched as: its text (tool calls by their function names, parts
    that are not text by their kind and file name)."""
    if msg.content:
        return msg.content
    names = [str(c.get("function", {}).get("name", "")) for c in msg.tool_calls or ()]
    names += [part_label(p) for p in (msg.verbatim or {}).get("content", ()) if p.get("type") != "text"]
    return " ".join(n for n in names if n)


def head_and_tail(text: str, limit: int) -> str:
    """The text, or its first and last limit/2 characters when it is longer: a long message is
    a pasted document, and its question or its point sits before or after it."""
    if len(text) <= limit:
        return text
    return f"{text[:limit // 2]}\n[...]\n{text[-(limit // 2):]}"


def part_label(part: dict[str, Any]) -> str:
    """A content part that is not text, as a word: "[image]", "[file report.pdf]"."""
    kind = str(part.get("type", "part")).removesuffix("_url").removeprefix("input_")
    name = (part.get("file") or {}).get("filename") if isinstance(part.get("file"), dict) else None
    return f"[{kind} {name}]" if name else f"[{kind}]"


def embedding_text(msg: Message) -> str:
    """What a message is embedded as. The author's name goes with the text because requests
    name people ("what did Caroline research?"); measured on LoCoMo it lifts recall."""
    text = message_text(msg)
    return f"{msg.name}: {text}" if msg.name else text


Key = tuple[float, int]  # (sort_ts, id): a stored message's place in its thread


@dataclass(frozen=True)
class Place:
    """Where a thread belongs: its tenant (a Teams tenant, a customer) and its channel (a Teams
    channel whose reply chains are threads of their own). Asks with `scope="channel"` reach
    the threads of the same tenant and channel, never further; None means none."""

    tenant: str | None = None
    channel: str | None = None

    def __post_init__(self):
        for what in ("tenant", "channel"):
            value = getattr(self, what)
            if value is not None and (not isinstance(value, str) or not value.strip() or len(value) > 256
                                      or not value.isprintable()):
                raise InputError(f"{what}: expected a non-empty string of at most 256 printable characters",
                                 field=what)


@dataclass(frozen=True)
class StoredMessage:
    id: int  # global arrival order
    thread_id: str
    role: str
    content: str
    timestamp: datetime | None
    sort_ts: float
    name: str | None = None
    tool_calls: tuple[dict[str, Any], ...] | None = None
    tool_call_id: str | None = None
    terms: tuple[str, ...] = ()
    block_no: int | None = None
    vector: np.ndarray | None = field(default=None, compare=False)
    tokens: int = 0
    verbatim: dict[str, Any] | None = field(default=None, compare=False)
    writer: str | None = None  # see Message.writer

    @property
    def key(self) -> Key:
        return (self.sort_ts, self.id)


def as_message(stored: StoredMessage) -> Message:
    """A stored message in the pipeline's form: its index is its store id."""
    return Message(stored.id, stored.role, stored.content, stored.timestamp, stored.name, stored.tool_calls,
                   stored.tool_call_id, stored.verbatim, writer=stored.writer)


def said(message: Mapping[str, Any]) -> tuple:
    """What a message said, whatever form it came in: role, text, tool call ids. Tool calls
    and results are known by their ids alone (in a masked thread the stored text differs)."""
    calls = tuple(c.get("id") for c in message.get("tool_calls") or ())
    text = "" if calls or message.get("tool_call_id") else content_text(message.get("content"))
    return message.get("role"), text, message.get("tool_call_id"), calls


def end_with_turn(messages: list[dict[str, Any]], turn: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The prompt with the current turn (the request and the tool calls and results after it)
    whole and as given: where the prompt has the request's stored copy among its last turns,
    there (what was stored after it, another line of a burst or a request in flight, stays
    after it), else at the end. A tight budget may have dropped part of it, and a model that
    does not see its own tool results calls the tools again; the stored copies are taken off,
    so nothing is sent twice."""
    if not turn:
        return list(messages)
    ours = {said(m) for m in turn}
    out = list(messages)
    start = _trailing(out, ours)
    at = next((i for i in range(start, len(out)) if said(out[i]) == said(turn[0])), None)
    if at is None:
        while out and out[-1]["role"] != "system" and said(out[-1]) in ours:
            out.pop()
        return out + [dict(m) for m in turn]
    return (out[:start] + [m for m in out[start:at] if said(m) not in ours] + [dict(m) for m in turn]
            + [m for m in out[at + 1:] if said(m) not in ours])


def _trailing(messages: list[dict[str, Any]], ours: set[tuple]) -> int:
    """Where the prompt's trailing turns start: after the last message of an earlier turn (a
    reply that is not the current turn's); user and system messages are passed over."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m["role"] not in ("user", "system") and said(m) not in ours:
            return i + 1
    return 0
