"""Load and validate histories: JSON list, {"messages": [...]}, JSON Lines, benchmark threads.

Strict by default: the first problem raises an InputError naming the message index and
field. In lenient mode each bad message is skipped and reported, never silently changed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone, tzinfo
from pathlib import Path
from typing import Any

from .errors import InputError
from .model import ROLES, Message, Query, Thread


@dataclass(frozen=True)
class Problem:
    """One message left out in lenient mode, and why."""

    thread: str
    index: int
    field: str
    reason: str

    def __str__(self) -> str:
        return f"thread {self.thread}, message {self.index}, field '{self.field}': {self.reason}"


@dataclass(frozen=True)
class LoadResult:
    threads: tuple[Thread, ...]
    problems: tuple[Problem, ...] = field(default=())

    def only(self, thread_id: str | None = None) -> Thread:
        """The one thread a command works on: the named one, or the file's single thread."""
        if thread_id is not None:
            for t in self.threads:
                if t.id == thread_id:
                    return t
            raise InputError(
                f"no thread {thread_id!r} in the file; it has: {', '.join(t.id for t in self.threads)}"
            )
        if len(self.threads) != 1:
            ids = ", ".join(t.id for t in self.threads[:10])
            raise InputError(f"the file holds {len(self.threads)} threads ({ids}...); choose one with --thread")
        return self.threads[0]


def resolve_zone(name: str) -> tzinfo:
    from dateutil import tz

    zone = timezone.utc if name.upper() == "UTC" else tz.gettz(name)
    if zone is None:
        raise InputError(f"unknown time zone {name!r} (use an IANA name such as Asia/Tokyo)")
    return zone


def parse_timestamp(value: Any, zone: tzinfo) -> datetime:
    """ISO 8601 (with or without zone), '2025-07-29 09:00', or epoch seconds -> aware datetime."""
    from dateutil import parser as dparser

    if isinstance(value, bool):
        raise ValueError("a boolean is not a time")
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not a time")
        return _from_epoch(value)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected an ISO 8601 string or epoch seconds, got {value!r}")
    text = value.strip()
    try:
        if text.replace(".", "", 1).isdigit():
            return _from_epoch(float(text))
        parsed = dparser.isoparse(text)
    except (ValueError, OverflowError):
        try:
            parsed = dparser.parse(text)
        except (ValueError, OverflowError) as exc:
            raise ValueError(f"cannot parse time {value!r}") from exc
    parsed = parsed if parsed.tzinfo else parsed.replace(tzinfo=zone)
    try:
        parsed.astimezone(timezone.utc)  # stored as UTC: 9999-12-31T23:59-01:00 is year 10000 there
    except (OverflowError, ValueError):
        raise ValueError(f"time {value!r} is out of range (years 1-9999 in UTC)") from None
    return parsed


def _from_epoch(seconds: float) -> datetime:
    try:
        return datetime.fromtimestamp(seconds, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        raise ValueError(f"epoch seconds {seconds!r} are out of range (years 1-9999)") from None


def _message(raw: Any, index: int, zone: tzinfo) -> Message:
    """Validate one raw message; raises (field, reason) as a ValueError tuple."""
    if not isinstance(raw, Mapping):
        raise _Bad("message", f"expected an object, got {type(raw).__name__}")
    role = raw.get("role")
    if role not in ROLES:
        raise _Bad("role", f"unknown role {role!r} (valid: {', '.join(ROLES)})")
    content = raw.get("content")
    tool_calls = raw.get("tool_calls")
    if tool_calls is not None and (role != "assistant" or not isinstance(tool_calls, list)
                                   or not all(isinstance(c, Mapping) for c in tool_calls)):
        raise _Bad("tool_calls", "must be a list of objects on an assistant message")
    if isinstance(content, list):  # OpenAI content parts: keep the text ones
        if not all(isinstance(p, Mapping) for p in content):
            raise _Bad("content", "content parts must be objects")
        content = "\n".join(str(p.get("text", "")) for p in content if p.get("type") == "text")
    if content is None and tool_calls:
        content = ""
    if not isinstance(content, str):
        raise _Bad("content", f"expected a string, got {type(content).__name__}")
    tool_call_id = raw.get("tool_call_id")
    if role == "tool" and not isinstance(tool_call_id, str):
        raise _Bad("tool_call_id", "a tool message needs the id of the call it answers")
    name = raw.get("name", raw.get("speaker"))
    if name is not None and not isinstance(name, str):
        raise _Bad("name", f"expected a string, got {type(name).__name__}")
    stamp = None
    if raw.get("timestamp") is not None:
        try:
            stamp = parse_timestamp(raw["timestamp"], zone)
        except ValueError as exc:
            raise _Bad("timestamp", str(exc)) from exc
    return Message(index, role, content, stamp, name,
                   tuple(dict(c) for c in tool_calls) if tool_calls else None, tool_call_id)


class _Bad(ValueError):
    def __init__(self, field_name: str, reason: str):
        super().__init__(reason)
        self.field = field_name
        self.reason = reason


def build_thread(thread_id: str, raw_messages: Any, *, zone: tzinfo, lenient: bool,
                 queries: Iterable[Query] = (), language: str | None = None,
                 hint: str = " (use --lenient to skip bad messages)") -> tuple[Thread, list[Problem]]:
    """Validate a list of raw messages into a Thread; indices stay those of the input."""
    if not isinstance(raw_messages, list):
        raise InputError(f"thread {thread_id}: 'messages' must be a list")
    messages: list[Message] = []
    problems: list[Problem] = []
    last_time: datetime | None = None
    for i, raw in enumerate(raw_messages):
        try:
            msg = _message(raw, i, zone)
            if msg.timestamp and last_time and msg.timestamp < last_time:
                raise _Bad("timestamp", f"time goes backwards ({msg.timestamp.isoformat()} "
                                        f"is before {last_time.isoformat()})")
        except _Bad as bad:
            problem = Problem(thread_id, i, bad.field, bad.reason)
            if not lenient:
                raise InputError(str(problem) + hint, index=i, field=bad.field) from None
            problems.append(problem)
            continue
        last_time = msg.timestamp or last_time
        messages.append(msg)
    if not messages:
        raise InputError(f"thread {thread_id}: no usable messages")
    return Thread(thread_id, tuple(messages), tuple(queries), language), problems


def _queries(raw: Any, thread_id: str) -> list[Query]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InputError(f"thread {thread_id}: 'queries' must be a list")
    out = []
    for qi, q in enumerate(raw):
        if not isinstance(q, Mapping) or not isinstance(q.get("query"), str):
            raise InputError(f"thread {thread_id}, query {qi}: needs a 'query' string")
        rel = q.get("relevant_message_indices") or []
        if not isinstance(rel, list) or not all(isinstance(r, int) for r in rel):
            raise InputError(f"thread {thread_id}, query {qi}: 'relevant_message_indices' must be integers")
        out.append(Query(q["query"], tuple(rel), q.get("category"), bool(q.get("answerable", True))))
    return out


def _thread_from_object(obj: Mapping[str, Any], default_id: str, zone: tzinfo, lenient: bool):
    thread_id = str(obj.get("id", default_id))
    return build_thread(thread_id, obj["messages"], zone=zone, lenient=lenient,
                        queries=_queries(obj.get("queries"), thread_id), language=obj.get("language"))


def load(path: str | Path, *, timezone_name: str = "UTC", lenient: bool = False) -> LoadResult:
    """Read a history file in any supported format."""
    path = Path(path)
    zone = resolve_zone(timezone_name)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read it as UTF-8 text: {exc}") from exc
    return loads(text, source=str(path), zone=zone, lenient=lenient)


def loads(text: str, *, source: str = "<input>", zone: tzinfo = timezone.utc,
          lenient: bool = False) -> LoadResult:
    stripped = text.lstrip()
    if not stripped:
        raise InputError(f"{source}: the file is empty")
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
        if not stripped.startswith("{"):
            _raise_json(source, text)
    default_id = Path(source).stem or "thread"
    if isinstance(whole, list):
        thread, problems = build_thread(default_id, whole, zone=zone, lenient=lenient)
        return LoadResult((thread,), tuple(problems))
    if isinstance(whole, Mapping):
        if "messages" not in whole:
            raise InputError(f"{source}: a JSON object needs a 'messages' list")
        thread, problems = _thread_from_object(whole, default_id, zone, lenient)
        return LoadResult((thread,), tuple(problems))
    if whole is not None:
        raise InputError(f"{source}: expected a list of messages or an object, got {type(whole).__name__}")
    return _load_jsonl(text, source, default_id, zone, lenient)


def _load_jsonl(text: str, source: str, default_id: str, zone: tzinfo, lenient: bool) -> LoadResult:
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise InputError(f"{source}, line {lineno}: not valid JSON ({exc.msg})") from None
    if rows and all(isinstance(r, Mapping) and "messages" in r for r in rows):
        threads, problems = [], []
        for n, row in enumerate(rows):
            thread, probs = _thread_from_object(row, f"{default_id}-{n}", zone, lenient)
            threads.append(thread)
            problems.extend(probs)
        return LoadResult(tuple(threads), tuple(problems))
    thread, problems = build_thread(default_id, rows, zone=zone, lenient=lenient)
    return LoadResult((thread,), tuple(problems))


def _raise_json(source: str, text: str) -> None:
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{source}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
