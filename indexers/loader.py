"""Load histories: JSON list, {"messages": [...]}, JSON Lines, benchmark threads (each message
validated by `validate`), plain or compressed (`.gz`, `.xz`: a benchmark file ships that way).

Strict by default: the first problem raises an InputError naming the message index and
field. In lenient mode each bad message is skipped and reported, never silently changed.
"""

from __future__ import annotations

import gzip
import json
import lzma
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone, tzinfo
from pathlib import Path
from typing import Any

from semhist.kernel.errors import InputError, TooLargeError
from semhist.kernel.model import MAX_MESSAGE_CHARS, Message, Query, Thread
from semhist.kernel.validate import MAX_DEPTH, BadField, TooLargeField, check_request, content_size, message, parse_timestamp, resolve_zone

__all__ = ["LoadResult", "Problem", "build_thread", "check_request", "content_size", "load", "loads", "open_text",
           "parse_timestamp", "resolve_zone"]

# Compressed files are read by their suffix, never sniffed: a plain file is read as it always was.
_OPENERS = {".gz": gzip.open, ".xz": lzma.open}


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
            msg = message(raw, i, zone, max_chars)
            if msg.timestamp and last_time and msg.timestamp < last_time:
                raise BadField("timestamp", f"time goes backwards ({msg.timestamp.isoformat()} "
                                        f"is before {last_time.isoformat()})")
        except BadField as bad:
            problem = Problem(thread_id, i, bad.field, bad.reason)
            if not lenient:
                error = TooLargeError if isinstance(bad, TooLargeField) else InputError
                raise error(str(problem) + hint, index=i, field=bad.field) from None
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
        gold = q.get("answer")
        out.append(Query(q["query"], tuple(rel), q.get("category"), bool(q.get("answerable", True)),
                         str(gold) if gold is not None and str(gold).strip() else None))
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
        with open_text(path) as f:
            text = f.read()
    except (lzma.LZMAError, gzip.BadGzipFile, EOFError) as exc:  # EOFError: a truncated stream
        raise InputError(f"{path}: not a readable {path.suffix} file ({exc or 'it ends too soon'})") from None
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


def open_text(path: str | Path):
    """A history or benchmark file opened as UTF-8 text (a BOM dropped), through gzip or xz when
    its name ends in `.gz` or `.xz`."""
    path = Path(path)
    opener = _OPENERS.get(path.suffix.lower())
    if opener is None:
        return path.open(encoding="utf-8-sig")
    return opener(path, "rt", encoding="utf-8-sig")


def _parse_json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError:
        raise InputError(f"{where}: JSON nested too deep to parse (semhist takes at most {MAX_DEPTH} levels)") from None


def loads(text: str, *, source: str = "<input>", zone: tzinfo = timezone.utc,
          lenient: bool = False, max_chars: int = MAX_MESSAGE_CHARS) -> LoadResult:
    """A history from text in any format `load` reads; `source` names it in error messages."""
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
    name = Path(source)
    default_id = (name.with_suffix("") if name.suffix.lower() in _OPENERS else name).stem or "thread"
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
