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
from .model import MAX_MESSAGE_CHARS, ROLE_ALIASES, ROLES, Message, Query, Thread


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
    """ISO 8601 (with or without zone), '2025-07-29 09:00', or epoch seconds or milliseconds
    -> aware datetime."""
    from dateutil import parser as dparser

    if isinstance(value, bool):
        raise ValueError("a boolean is not a time")
    if isinstance(value, (int, float)):
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


# Epoch seconds reach year 5138 at 1e11; JavaScript and Teams clients send milliseconds
# (1.7e12 today), so anything from 1e11 to 1e14 is read as milliseconds.
_MS_FROM, _MS_TO = 1e11, 1e14


def _from_epoch(number: float) -> datetime:
    if not math.isfinite(number) or abs(number) >= _MS_TO:
        raise ValueError(f"epoch time {number!r} is out of range: send seconds or milliseconds since 1970 "
                         "(or an ISO 8601 string)")
    seconds = number / 1000 if abs(number) >= _MS_FROM else number
    try:
        return datetime.fromtimestamp(seconds, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        raise ValueError(f"epoch time {number!r} is out of range (years 1-9999)") from None


_LEGACY = {
    "function": ("role", "the legacy 'function' role is not supported: send the result as "
                         "{\"role\": \"tool\", \"tool_call_id\": ..., \"content\": ...}"),
    "function_call": ("function_call", "the legacy 'function_call' is not supported: send it as "
                                       "\"tool_calls\": [{\"id\": ..., \"type\": \"function\", \"function\": {...}}]"),
}


def _unicode(value: str, field_name: str) -> str:
    """JSON can carry lone surrogates ("\\ud800") that no UTF-8 store or tokenizer accepts."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _Bad(field_name, f"not valid Unicode: a lone surrogate {value[exc.start]!r} at character "
                               f"{exc.start} (the sender split an emoji or a character pair)") from None
    if "\x00" in value:
        raise _Bad(field_name, f"a NUL character (U+0000) at character {value.index(chr(0))}: no text store "
                               "keeps it (PostgreSQL refuses it); remove it")
    return value


# The content parts the chat-completions API takes in each role's messages.
PART_TYPES = {"user": ("text", "image_url", "input_audio", "file"), "assistant": ("text", "refusal"),
              "system": ("text",), "tool": ("text",)}


def _content(raw: Any, role: str, tool_calls: Any) -> tuple[str, dict[str, Any] | None]:
    """The message's text, and its content parts kept as given when some are not text."""
    content = raw.get("content")
    if isinstance(content, list):  # OpenAI content parts
        parts = []
        for n, part in enumerate(content):
            kind = part.get("type") if isinstance(part, Mapping) else None
            if not isinstance(kind, str):
                raise _Bad(f"content[{n}]", "a content part must be an object with a 'type'")
            if kind not in PART_TYPES[role]:
                raise _Bad(f"content[{n}].type", f"a {raw.get('role')} message cannot carry a {kind!r} part "
                                                 f"(it can: {', '.join(PART_TYPES[role])})")
            if kind in ("text", "refusal") and not isinstance(part.get(kind), str):
                raise _Bad(f"content[{n}].{kind}", f"a {kind} part needs its '{kind}' string")
            parts.append(dict(part))
        text = "\n".join(_unicode(p[p["type"]], "content") for p in parts if p["type"] in ("text", "refusal"))
        others = any(p["type"] not in ("text", "refusal") for p in parts)
        if others:
            _unicode(json.dumps(parts, ensure_ascii=False, default=str), "content")
        return text, ({"content": parts} if others else None)
    if content is None and tool_calls:
        return "", None
    if not isinstance(content, str):
        raise _Bad("content", f"expected a string or a list of content parts, got {type(content).__name__}")
    return _unicode(content, "content"), None


def _check_calls(tool_calls: list) -> int:
    """Each call as the API has it ({"id", "type": "function", "function": {"name", "arguments"}});
    returns their size."""
    for n, call in enumerate(tool_calls):
        fn = call.get("function")
        if not isinstance(call.get("id"), str) or not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str) \
                or not isinstance(fn.get("arguments", ""), str):
            raise _Bad(f"tool_calls[{n}]", 'a tool call needs "id" and "function": {"name": ..., "arguments": '
                                           '"<JSON text>"} (arguments as a string)')
    text = json.dumps(tool_calls, ensure_ascii=False, default=str)
    _unicode(text, "tool_calls")
    return len(text)


def check_request(request: Any, max_chars: int = MAX_MESSAGE_CHARS, what: str = "request") -> str:
    """A request (or a system prompt) as every entry point takes it: a non-empty, valid
    Unicode string without NUL, not too long."""
    if not isinstance(request, str) or not request.strip():
        raise InputError(f"the {what} is empty", field=what.replace(" ", "_"))
    try:
        request.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(f"the {what} is not valid UTF-8 (character {exc.start}: {request[exc.start]!r}); "
                         "send UTF-8 text, e.g. convert it with iconv", field=what.replace(" ", "_")) from None
    if "\x00" in request:
        raise InputError(f"the {what} holds a NUL character (U+0000); remove it", field=what.replace(" ", "_"))
    if len(request) > max_chars:
        raise InputError(f"the {what} has {len(request):,} characters; the most is {max_chars:,} "
                         "(raise it with --max-message-chars or SEMHIST_MAX_MESSAGE_CHARS)",
                         field=what.replace(" ", "_"))
    return request


def content_size(content: Any) -> int:
    """What a message's content counts against the size limit: its text, and a part that is
    not text by its JSON (a base64 image is as big as it is)."""
    if isinstance(content, str):
        return len(content)
    if not isinstance(content, list):
        return 0
    size = 0
    for part in content:
        kind = part.get("type") if isinstance(part, Mapping) else None
        text = part.get(kind) if kind in ("text", "refusal") else None
        size += len(text) if isinstance(text, str) else len(json.dumps(part, ensure_ascii=False, default=str))
    return size


def _message(raw: Any, index: int, zone: tzinfo, max_chars: int = MAX_MESSAGE_CHARS) -> Message:
    """Validate one raw message; raises _Bad(field, reason)."""
    if not isinstance(raw, Mapping):
        raise _Bad("message", f"expected an object, got {type(raw).__name__}")
    role = raw.get("role")
    for legacy, (field_name, reason) in _LEGACY.items():
        if role == legacy or (legacy == "function_call" and raw.get(legacy) is not None):
            raise _Bad(field_name, reason)
    verbatim: dict[str, Any] = {}
    if isinstance(role, str) and role in ROLE_ALIASES:
        verbatim["role"], role = role, ROLE_ALIASES[role]
    if role not in ROLES:
        raise _Bad("role", f"unknown role {role!r} (valid: {', '.join((*ROLES, *ROLE_ALIASES))})")
    for field_name in ("tool_calls", "content"):
        if _too_deep(raw.get(field_name)):
            raise _Bad(field_name, f"nested more than {MAX_DEPTH} levels deep")
    tool_calls = raw.get("tool_calls")
    if tool_calls is not None and (role != "assistant" or not isinstance(tool_calls, list)
                                   or not all(isinstance(c, Mapping) for c in tool_calls)):
        raise _Bad("tool_calls", "must be a list of objects on an assistant message")
    calls_size = _check_calls(tool_calls) if tool_calls else 0
    content, parts = _content(raw, role, tool_calls)
    verbatim.update(parts or {})
    size = content_size(raw.get("content")) + calls_size
    if size > max_chars:
        raise _Bad("content", f"{size:,} characters; the most a message may hold is {max_chars:,} "
                              "(raise it with --max-message-chars or SEMHIST_MAX_MESSAGE_CHARS)")
    tool_call_id = raw.get("tool_call_id")
    if role == "tool" and not isinstance(tool_call_id, str):
        raise _Bad("tool_call_id", "a tool message needs the id of the call it answers")
    name = raw.get("name", raw.get("speaker"))
    if name is not None and not isinstance(name, str):
        raise _Bad("name", f"expected a string, got {type(name).__name__}")
    for field_name, value in (("name", name), ("tool_call_id", tool_call_id)):
        if isinstance(value, str):
            _unicode(value, field_name)
    stamp = None
    if raw.get("timestamp") is not None:
        try:
            stamp = parse_timestamp(raw["timestamp"], zone)
        except ValueError as exc:
            raise _Bad("timestamp", str(exc)) from exc
    return Message(index, role, content, stamp, name,
                   tuple(dict(c) for c in tool_calls) if tool_calls else None, tool_call_id, verbatim or None)


class _Bad(ValueError):
    def __init__(self, field_name: str, reason: str):
        super().__init__(reason)
        self.field = field_name
        self.reason = reason


def build_thread(thread_id: str, raw_messages: Any, *, zone: tzinfo, lenient: bool,
                 queries: Iterable[Query] = (), language: str | None = None,
                 hint: str = " (use --lenient to skip bad messages)",
                 max_chars: int = MAX_MESSAGE_CHARS) -> tuple[Thread, list[Problem]]:
    """Validate a list of raw messages into a Thread; indices stay those of the input."""
    if not isinstance(raw_messages, list):
        raise InputError(f"thread {thread_id}: 'messages' must be a list")
    messages: list[Message] = []
    problems: list[Problem] = []
    last_time: datetime | None = None
    for i, raw in enumerate(raw_messages):
        try:
            msg = _message(raw, i, zone, max_chars)
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


def _thread_from_object(obj: Mapping[str, Any], default_id: str, zone: tzinfo, lenient: bool, max_chars: int):
    thread_id = str(obj.get("id", default_id))
    return build_thread(thread_id, obj["messages"], zone=zone, lenient=lenient, max_chars=max_chars,
                        queries=_queries(obj.get("queries"), thread_id), language=obj.get("language"))


def load(path: str | Path, *, timezone_name: str = "UTC", lenient: bool = False,
         max_chars: int = MAX_MESSAGE_CHARS) -> LoadResult:
    """Read a history file in any supported format (UTF-8, with or without a BOM)."""
    path = Path(path)
    zone = resolve_zone(timezone_name)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, not a history file") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason}); convert it, e.g. "
                         f"iconv -f SHIFT_JIS -t UTF-8") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read it: {exc.strerror or exc}") from exc
    return loads(text, source=str(path), zone=zone, lenient=lenient, max_chars=max_chars)


# Nesting deeper than any chat message needs. A file nested deeper than Python's recursion
# limit (about 1,000) fails to parse at all; one between the two is refused message by message,
# before anything that walks it again (storing, token counting) could hit that limit.
MAX_DEPTH = 64


def _parse_json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError:
        raise InputError(f"{where}: JSON nested more than {MAX_DEPTH} levels deep") from None


def _too_deep(value: Any, depth: int = 0) -> bool:
    if depth > MAX_DEPTH:
        return True
    if isinstance(value, Mapping):
        return any(_too_deep(v, depth + 1) for v in value.values())
    if isinstance(value, list):
        return any(_too_deep(v, depth + 1) for v in value)
    return False


def loads(text: str, *, source: str = "<input>", zone: tzinfo = timezone.utc,
          lenient: bool = False, max_chars: int = MAX_MESSAGE_CHARS) -> LoadResult:
    text = text.removeprefix("\ufeff")
    stripped = text.lstrip()
    if not stripped:
        raise InputError(f"{source}: the file is empty")
    try:
        whole = _parse_json(text, source)
    except json.JSONDecodeError as exc:
        whole = None
        if not stripped.startswith("{"):
            raise InputError(f"{source}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    default_id = Path(source).stem or "thread"
    if isinstance(whole, list):
        thread, problems = build_thread(default_id, whole, zone=zone, lenient=lenient, max_chars=max_chars)
        return LoadResult((thread,), tuple(problems))
    if isinstance(whole, Mapping):
        if "messages" not in whole:
            raise InputError(f"{source}: a JSON object needs a 'messages' list")
        thread, problems = _thread_from_object(whole, default_id, zone, lenient, max_chars)
        return LoadResult((thread,), tuple(problems))
    if whole is not None:
        raise InputError(f"{source}: expected a list of messages or an object, got {type(whole).__name__}")
    return _load_jsonl(text, source, default_id, zone, lenient, max_chars)


def _load_jsonl(text: str, source: str, default_id: str, zone: tzinfo, lenient: bool, max_chars: int) -> LoadResult:
    rows = []
    # only "\n" ends a line: U+2028 and friends are legal inside JSON strings, unescaped
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            rows.append(_parse_json(line, f"{source}, line {lineno}"))
        except json.JSONDecodeError as exc:
            raise InputError(f"{source}, line {lineno}: not valid JSON ({exc.msg})") from None
    if rows and all(isinstance(r, Mapping) and "messages" in r for r in rows):
        threads, problems = [], []
        for n, row in enumerate(rows):
            thread, probs = _thread_from_object(row, f"{default_id}-{n}", zone, lenient, max_chars)
            threads.append(thread)
            problems.extend(probs)
        return LoadResult(tuple(threads), tuple(problems))
    thread, problems = build_thread(default_id, rows, zone=zone, lenient=lenient, max_chars=max_chars)
    return LoadResult((thread,), tuple(problems))
