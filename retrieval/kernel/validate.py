"""Validation of one chat message (and of a request): the rules every entry point shares,
whether the message comes from a file, `History.add_many`, the service or the agent.

A bad field raises `BadField(field, reason)`; the loader turns it into an InputError naming
the message index, or skips it in lenient mode.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import datetime, timezone, tzinfo
from typing import Any

from .errors import InputError, TooLargeError
from .model import MAX_MESSAGE_CHARS, ROLE_ALIASES, ROLES, Message


def shown(value: Any, limit: int = 60) -> str:
    """A value as an error message quotes it: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


class BadField(ValueError):
    def __init__(self, field_name: str, reason: str):
        super().__init__(reason)
        self.field = field_name
        self.reason = reason


class TooLargeField(BadField):
    """A field past the size limit: the loader raises TooLargeError for it."""


# Nesting deeper than any chat message needs. A file nested deeper than Python's recursion
# limit (about 1,000) fails to parse at all; one between the two is refused message by message,
# before anything that walks it again (storing, token counting) could hit that limit.
MAX_DEPTH = 64


def _too_deep(value: Any, depth: int = 0) -> bool:
    if depth > MAX_DEPTH:
        return True
    if isinstance(value, Mapping):
        return any(_too_deep(v, depth + 1) for v in value.values())
    if isinstance(value, list):
        return any(_too_deep(v, depth + 1) for v in value)
    return False


def parse_timestamp(value: Any, zone: tzinfo) -> datetime:
    """A datetime, ISO 8601 text (with or without zone), '2025-07-29 09:00', or epoch seconds
    or milliseconds -> aware datetime; a time without a zone is on `zone`."""
    if isinstance(value, bool):
        raise ValueError("a boolean is not a time")
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, (int, float)):
        return _from_epoch(value)
    elif not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a datetime, ISO 8601 text or epoch seconds, got {shown(value)}")
    else:
        parsed = _parsed_text(value)
    parsed = parsed if parsed.tzinfo else parsed.replace(tzinfo=zone)
    try:
        parsed.astimezone(timezone.utc)  # stored as UTC: 9999-12-31T23:59-01:00 is year 10000 there
    except (OverflowError, ValueError):
        raise ValueError(f"time {shown(value)} is out of range (years 1-9999 in UTC)") from None
    return parsed


def _parsed_text(value: str) -> datetime:
    from dateutil import parser as dparser

    text = value.strip()
    try:
        if text.replace(".", "", 1).isdigit():
            return _from_epoch(float(text))
        return dparser.isoparse(text)
    except (ValueError, OverflowError):
        try:
            return dparser.parse(text)
        except (ValueError, OverflowError) as exc:
            raise ValueError(f"cannot parse time {shown(value)}") from exc


def time_argument(value: Any, argument: str, zone: tzinfo) -> datetime | None:
    """A time given to a public call (`History.add`'s `timestamp`, `forget`'s `before`): what a
    message's "timestamp" takes, read by the same rules, so no call takes a form another refuses.
    Anything else is an InputError naming the argument; None stays None."""
    if value is None:
        return None
    try:
        return parse_timestamp(value, zone)
    except ValueError as exc:
        raise InputError(f"{argument}: {exc}", field=argument) from None


# Epoch seconds reach year 5138 at 1e11; JavaScript and Teams clients send milliseconds
# (1.7e12 today), so anything from 1e11 to 1e14 is read as milliseconds.
_MS_FROM, _MS_TO = 1e11, 1e14


def _from_epoch(number: float) -> datetime:
    try:
        number = float(number)  # a JSON integer can be too big for a float
    except OverflowError:
        number = math.inf
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


def text_problem(text: str) -> str | None:
    """Why a text can be neither stored nor sent, or None. JSON can carry lone surrogates
    ("\\ud800") that no UTF-8 store or tokenizer accepts, and NUL, which PostgreSQL refuses."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"not valid UTF-8 (a lone surrogate {text[exc.start]!r} at character {exc.start})"
    if "\x00" in text:
        return f"not storable text (a NUL character (U+0000) at character {text.index(chr(0))}; remove it)"
    return None


def _unicode(value: str, field_name: str) -> str:
    problem = text_problem(value)
    if problem:
        raise BadField(field_name, problem)
    return value


# The content parts the chat-completions API takes in each role's messages.
PART_TYPES = {"user": ("text", "image_url", "input_audio", "file"), "assistant": ("text", "refusal"),
              "system": ("text",), "tool": ("text",)}


def _content(raw: Any, role: str, tool_calls: Any) -> tuple[str, dict[str, Any] | None]:
    """The message's text, and its content parts kept as given when some are not text."""
    content = raw.get("content")
    if isinstance(content, list):  # OpenAI content parts
        if not content:
            raise BadField("content", 'an empty list of content parts (send "" for a message without text)')
        parts = []
        for n, part in enumerate(content):
            kind = part.get("type") if isinstance(part, Mapping) else None
            if not isinstance(kind, str):
                raise BadField(f"content[{n}]", "a content part must be an object with a 'type'")
            if kind not in PART_TYPES[role]:
                raise BadField(f"content[{n}].type", f"a {shown(raw.get('role'))} message cannot carry a {shown(kind)} part "
                                                 f"(it can: {', '.join(PART_TYPES[role])})")
            if kind in ("text", "refusal") and not isinstance(part.get(kind), str):
                raise BadField(f"content[{n}].{kind}", f"a {kind} part needs its '{kind}' string")
            parts.append(dict(part))
        text = "\n".join(_unicode(p[p["type"]], "content") for p in parts if p["type"] in ("text", "refusal"))
        others = any(p["type"] not in ("text", "refusal") for p in parts)
        if others:
            _unicode(json.dumps(parts, ensure_ascii=False, default=str), "content")
        return text, ({"content": parts} if others else None)
    if content is None and tool_calls:
        return "", None
    if not isinstance(content, str):
        raise BadField("content", f"expected a string or a list of content parts, got {type(content).__name__}")
    return _unicode(content, "content"), None


def _check_calls(tool_calls: list) -> int:
    """Each call as the API has it ({"id", "type": "function", "function": {"name", "arguments"}});
    returns their size."""
    for n, call in enumerate(tool_calls):
        fn = call.get("function")
        if not isinstance(call.get("id"), str) or call.get("type") != "function" or not isinstance(fn, Mapping) \
                or not isinstance(fn.get("name"), str) or not isinstance(fn.get("arguments"), str):
            raise BadField(f"tool_calls[{n}]", 'a tool call needs "id", "type": "function" and "function": '
                                               '{"name": ..., "arguments": "<JSON text>"} (arguments as a string)')
    text = json.dumps(tool_calls, ensure_ascii=False, default=str)
    _unicode(text, "tool_calls")
    return len(text)


def check_request(request: Any, max_chars: int = MAX_MESSAGE_CHARS, what: str = "request") -> str:
    """A request (or a system prompt) as every entry point takes it: a non-empty, valid
    Unicode string without NUL, not too long."""
    if not isinstance(request, str) or not request.strip():
        raise InputError(f"the {what} is empty", field=what.replace(" ", "_"))
    problem = text_problem(request)
    if problem:
        raise InputError(f"the {what} is {problem}", field=what.replace(" ", "_"))
    if len(request) > max_chars:
        raise TooLargeError(f"the {what} has {len(request):,} characters; the most is {max_chars:,} "
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


def message(raw: Any, index: int, zone: tzinfo, max_chars: int = MAX_MESSAGE_CHARS) -> Message:
    """Validate one raw message; raises BadField(field, reason)."""
    if not isinstance(raw, Mapping):
        raise BadField("message", f"expected an object, got {type(raw).__name__}")
    role = raw.get("role")
    for legacy, (field_name, reason) in _LEGACY.items():
        if role == legacy or (legacy == "function_call" and raw.get(legacy) is not None):
            raise BadField(field_name, reason)
    verbatim: dict[str, Any] = {}
    if isinstance(role, str) and role in ROLE_ALIASES:
        verbatim["role"], role = role, ROLE_ALIASES[role]
    if role not in ROLES:
        raise BadField("role", f"unknown role {shown(role)} (valid: {', '.join((*ROLES, *ROLE_ALIASES))})")
    for field_name in ("tool_calls", "content"):
        if _too_deep(raw.get(field_name)):
            raise BadField(field_name, f"nested more than {MAX_DEPTH} levels deep")
    tool_calls = raw.get("tool_calls")
    if tool_calls is not None and (role != "assistant" or not isinstance(tool_calls, list)
                                   or not all(isinstance(c, Mapping) for c in tool_calls)):
        raise BadField("tool_calls", "must be a list of objects on an assistant message")
    calls_size = _check_calls(tool_calls) if tool_calls else 0
    content, parts = _content(raw, role, tool_calls)
    verbatim.update(parts or {})
    size = content_size(raw.get("content")) + calls_size
    if size > max_chars:
        raise TooLargeField("content", f"{size:,} characters; the most a message may hold is {max_chars:,} "
                              "(raise it with --max-message-chars or SEMHIST_MAX_MESSAGE_CHARS)")
    tool_call_id = raw.get("tool_call_id")
    if role == "tool" and not isinstance(tool_call_id, str):
        raise BadField("tool_call_id", "a tool message needs the id of the call it answers")
    if role != "tool" and tool_call_id is not None:
        raise BadField("tool_call_id", f"only a tool message answers a call; this is a {shown(raw.get('role'))} message")
    name = raw.get("name", raw.get("speaker"))
    if name is not None and not isinstance(name, str):
        raise BadField("name", f"expected a string, got {type(name).__name__}")
    for field_name, value in (("name", name), ("tool_call_id", tool_call_id)):
        if isinstance(value, str):
            _unicode(value, field_name)
    stamp = None
    if raw.get("timestamp") is not None:
        try:
            stamp = parse_timestamp(raw["timestamp"], zone)
        except ValueError as exc:
            raise BadField("timestamp", str(exc)) from exc
    return Message(index, role, content, stamp, name,
                   tuple(dict(c) for c in tool_calls) if tool_calls else None, tool_call_id, verbatim or None)


def resolve_zone(name: str) -> tzinfo:
    from dateutil import tz

    zone = timezone.utc if name.upper() == "UTC" else tz.gettz(name)
    if zone is None:
        raise InputError(f"unknown time zone {name!r} (use an IANA name such as Asia/Tokyo)")
    return zone
