"""`POST /v1/chat/completions`: semhist as a drop-in memory in front of any OpenAI-compatible
model. A client changes its `base_url` and nothing else:

1. the thread is named by the `X-Semhist-Thread` header, else by the request's `user`;
2. of the messages sent (the new turn alone, or the client's whole history) semhist stores
   those it has not seen: the ones after the point where they line up with the stored
   thread's end (or, with semhist's `id` field on a message, by that key);
3. the history is replaced by the prompt semhist builds within the budget, ending with the
   current turn as the client sent it (a tool-calling turn keeps its calls and results);
4. the request goes to the upstream model; its answer comes back unchanged (streamed when
   asked), and the reply is stored before the client can see the end of it.

Leading system/developer messages are the client's instructions for this request: used as
the prompt's system prompt, not stored as part of the conversation. So are the ones after the
last user message (a format reminder, a guardrail): forwarded once, where the client put them,
never stored, and in a whole-history client's later requests passed over (`for_the_reply`).
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from semhist.kernel.errors import ConfigError, InputError
from semhist import build_thread
from semhist.kernel.validate import check_request, content_size, resolve_zone
from semhist.kernel.model import Message, content_text
from semhist.kernel.budget import Budget
from semhist.kernel.settings import Settings
from semhist.kernel.ids import check_thread_id
from semhist.kernel.tokens import count_messages
from semhist.kernel.writers import Writer, as_written

from semhist import History
from semhist import get_strategy
from semhist.kernel.model import StoredMessage, end_with_turn
from .access import Grant
from .errors import TooLarge

THREAD_HEADER = "x-semhist-thread"
OURS = ("id", "timestamp", "speaker")  # semhist's own message fields: read here, never forwarded
INSTRUCTIONS = ("system", "developer")
REPLIES = 8  # stored replies (and tool turns) a retry may find after the request it repeats


@dataclass(frozen=True)
class Turn:
    """One proxied request, ready to forward."""

    thread_id: str
    body: dict[str, Any]  # what the upstream receives
    added: int  # messages of the request stored now
    prompt_tokens: int
    full_tokens: int
    notes: tuple[str, ...] = ()  # what the prompt left out and why (the X-Semhist-Notes header)
    cached_tokens: int | None = None  # of the prompt, what repeats the thread's previous one's start


def thread_of(headers: Mapping[str, str], body: Mapping[str, Any], grant: Grant, secret: bytes) -> str:
    """The request's thread: the header's id if the token may reach it, else one made from
    `user` (a keyed digest: a `user` is often an e-mail address or a login)."""
    named = headers.get(THREAD_HEADER)
    if named is not None:
        return grant.check(check_thread_id(named))  # the caller chose it: a bad one is refused, not renamed
    user = body.get("user")
    if isinstance(user, str) and user.strip():
        return grant.user_thread(user, secret)
    raise InputError("name the thread: an X-Semhist-Thread header, or the request's `user` field", field="user")


def names_thread(headers: Mapping[str, str], body: Mapping[str, Any]) -> bool:
    """Whether the request names its thread itself (the header, or `user`)."""
    user = body.get("user")
    return headers.get(THREAD_HEADER) is not None or (isinstance(user, str) and bool(user.strip()))


def continued(response_id: str, thread: str | None, grant: Grant) -> str:
    """The thread of `previous_response_id` (as the store recorded it), if the token may reach it.
    Another token's response is answered exactly as one never relayed: a 403 naming its thread
    would tell the thread's id, and that the response id is real."""
    if thread is None or not grant.allows(thread):
        raise InputError(f"previous_response_id {response_id[:80]!r} names no response semhist relayed (or its "
                         "thread was forgotten): name the thread with an X-Semhist-Thread header or `user`",
                         field="previous_response_id")
    return thread


def prepare(history: History, settings: Settings, thread_id: str, body: dict[str, Any], *,
            writer: Writer = Writer("proxy"),
            budget: Budget | None = None, strategy: str = "blocks", model: str | None = None,
            cache_key: bool = False) -> Turn:
    """Check everything, store what is new, build the prompt; nothing is forwarded yet.
    `cache_key`: add `prompt_cache_key` (the thread's digest) unless the request has one.
    `writer`: who stores the conversation's messages; a system message after its first turn
    is the client's, stored as quoted history unless the operator trusts the proxy."""
    get_strategy(strategy)  # an unknown name is refused before anything is stored
    if not body.get("model") and not model:
        raise InputError("model: name the model (the upstream has no default)", field="model")
    sent = body.get("messages")
    if not isinstance(sent, list) or not sent or not all(isinstance(m, dict) for m in sent):
        raise InputError("messages: expected a non-empty list of message objects", field="messages")
    for i, m in enumerate(sent):
        if content_size(m.get("content")) > settings.max_message_chars:
            raise TooLarge(f"messages[{i}].content: {content_size(m.get('content'))} characters; at most "
                           f"{settings.max_message_chars}", index=i, field="content")
    lead = next((i for i, m in enumerate(sent) if m.get("role") not in INSTRUCTIONS), len(sent))
    said = [_said_nothing(m) for m in sent]
    users = [i for i in range(lead, len(sent)) if said[i].get("role") == "user"]
    if not users:
        raise InputError("messages: no user message after the system messages", field="messages")
    turn = [_forwarded(m) for m in said[users[-1]:]]  # the current turn, forwarded as the client put it
    positions = [i for i in range(lead, len(sent)) if not for_the_reply(said, i)]
    conversation = [said[i] for i in positions]
    current = positions.index(users[-1])
    # as it will be stored (a later system message quoted), so the next request's copy lines up with it
    parsed = _parsed(settings, thread_id, [as_written(m, writer, settings.trusted_writers)[0] for m in conversation],
                     positions)
    check_request(parsed[current].content, settings.max_message_chars)
    with _lock(thread_id):  # two requests for one thread must not both store its turn
        added = _store_unseen(history, settings, thread_id, conversation, parsed, current, writer)
    result = history.ask(thread_id, parsed[current].content, strategy=strategy, budget=budget,
                         system_prompt=_instructions(sent[:lead]))
    prompt = end_with_turn(list(result.prompt.messages), turn)
    out = {k: v for k, v in body.items() if k != "messages"}
    out["messages"] = prompt
    out["model"] = body.get("model") or model
    if cache_key and "prompt_cache_key" not in out:
        out["prompt_cache_key"] = cache_key_of(thread_id)
    return Turn(thread_id, out, added, count_messages(prompt), result.full_tokens, result.prompt.notes,
                result.cached_tokens)


def cache_key_of(thread_id: str) -> str:
    """OpenAI's `prompt_cache_key` for a thread: its prompts then meet the same cache. A digest,
    so the thread's name (an e-mail address, a user's id) never leaves for the provider."""
    return "semhist-" + hashlib.sha256(thread_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def notes_header(notes: Sequence[str]) -> dict[str, str]:
    """The prompt's notes as the X-Semhist-Notes response header (none when there are none):
    the answer is the upstream's, so a header is where a proxied client hears that the budget
    left out the last exchanges. One line of ASCII: a note may quote an error's text."""
    if not notes:
        return {}
    text = "; ".join(" ".join(n.split()) for n in notes)
    return {"X-Semhist-Notes": text.encode("ascii", "backslashreplace").decode("ascii")[:2000]}


_locks: weakref.WeakValueDictionary[str, threading.Lock] = weakref.WeakValueDictionary()
_locks_guard = threading.Lock()


def _lock(thread_id: str) -> threading.Lock:
    """The thread's lock in this process, held only while someone uses it (so the map stays
    as small as the requests in flight)."""
    with _locks_guard:
        lock = _locks.get(thread_id)
        if lock is None:
            lock = _locks[thread_id] = threading.Lock()
        return lock


def _said_nothing(m: dict[str, Any]) -> dict[str, Any]:
    """An assistant message without content or calls (a refusal, echoed back by the client)
    as the text it carries, so it is neither refused nor lost."""
    if m.get("role") == "assistant" and m.get("content") is None and not m.get("tool_calls"):
        return {**m, "content": m.get("refusal") if isinstance(m.get("refusal"), str) else ""}
    return m


def for_the_reply(messages: Sequence[Mapping[str, Any]], i: int) -> bool:
    """Whether message `i` is an instruction for the reply that follows it: a system or
    developer message after the conversation's start with no user message after it before
    the next reply (or the request's end). A framework's format reminder or guardrail is
    sent that way, each turn anew; it belongs to that request alone. One before a user
    message ("from now on, answer in French") is part of the conversation (quoted history
    unless the operator trusts the proxy)."""
    if messages[i].get("role") not in INSTRUCTIONS or all(m.get("role") in INSTRUCTIONS for m in messages[:i]):
        return False
    after = next((m.get("role") for m in messages[i + 1:] if m.get("role") not in INSTRUCTIONS), None)
    return after != "user"


def _parsed(settings: Settings, thread_id: str, conversation: list[dict[str, Any]],
            positions: Sequence[int]) -> list[Message]:
    """The messages validated as `add` validates them (a bad one stores none); an error names
    the message by its place in the request (`positions`)."""
    now = datetime.now(timezone.utc).isoformat()
    raw = [{**{k: v for k, v in m.items() if k != "id" and v is not None}, "timestamp": m.get("timestamp") or now}
           for m in conversation]
    try:
        thread, _ = build_thread(thread_id, raw, zone=resolve_zone(settings.timezone), lenient=False, hint="",
                                 max_chars=settings.max_message_chars)
    except InputError as exc:
        index = getattr(exc, "index", None)
        raise InputError(str(exc), index=None if index is None else positions[index],
                         field=getattr(exc, "field", None)) from exc
    return list(thread.messages)


def _store_unseen(history: History, settings: Settings, thread_id: str, conversation: list[dict[str, Any]],
                  parsed: list[Message], current: int, writer: Writer) -> int:
    marker = history.store.marker(thread_id)
    stored = history.store.messages(thread_id, last=len(conversation) + REPLIES) if marker is not None else []
    masker = history.parts.ingestor.masker(marker.pii) if marker is not None else None
    start = first_unseen(stored, parsed, masker)
    if start is None:
        # Nothing lines up with a thread that has messages: the client edited or regenerated
        # turns, or keeps its copy otherwise. Its current turn is what is new; the rest would
        # be its whole history stored a second time.
        start = current if stored else 0
    new = conversation[start:]
    if len(new) > settings.max_batch:
        raise TooLarge(f"{len(new)} new messages in one request; at most {settings.max_batch} (SEMHIST_MAX_BATCH): "
                       "store a long history with POST /v1/threads/{id}/messages first")
    if not new:
        return 0
    return history.add_many(thread_id, [{k: v for k, v in m.items() if k in _STORED} for m in new],
                            writer=writer).added


_STORED = ("role", "content", "name", "speaker", "tool_calls", "tool_call_id", "id", "timestamp")


def first_unseen(stored: Sequence[StoredMessage], sent: Sequence[Message], masker=None) -> int | None:
    """Where the new messages of `sent` start, or None when they line up nowhere. They line
    up with the stored thread where a stretch at their start is the thread's end (a client
    sending its whole history or its last turns), else where it is the thread's end but for
    the replies after it (a retry that never got its answer: two messages at least, since a
    lone "continue" said twice is said twice), else where the whole thread lies within them
    (a client whose history reaches back before semhist saw it)."""
    texts = [masker(m.content) if masker and m.content else m.content for m in sent]

    def same(s: StoredMessage, i: int) -> bool:
        m = sent[i]
        return (s.role == m.role and s.content == texts[i] and s.tool_call_id == m.tool_call_id
                and _call_ids(s.tool_calls) == _call_ids(m.tool_calls))

    def ends_at(e: int, p: int) -> bool:  # sent[:p] == stored[e - p:e]
        return all(same(stored[e - p + i], i) for i in range(p))

    n = len(stored)
    at_end = next((p for p in range(min(len(sent), n), 0, -1) if ends_at(n, p)), None)
    if at_end is not None:
        return at_end
    replies = [e for e in range(n - 1, max(n - REPLIES, 0) - 1, -1) if all(s.role != "user" for s in stored[e:])]
    retried = [p for e in replies for p in range(min(len(sent), e), 1, -1) if ends_at(e, p)]
    if retried:
        return max(retried)
    return next((p for p in range(n + 1, len(sent) + 1)
                 if n and all(same(stored[i], p - n + i) for i in range(n))), None)


def _call_ids(calls) -> tuple:
    return tuple(c.get("id") for c in calls or ())


def _forwarded(m: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in m.items() if k not in OURS}


def _instructions(lead: list[dict[str, Any]]) -> str | None:
    texts = []
    for m in lead:
        content = content_text(m.get("content"))
        if content.strip():
            texts.append(content)
    return "\n\n".join(texts) or None


def budget_of(value: str | None) -> Budget | None:
    if value is None:
        return None
    try:
        return Budget.parse(value)
    except ConfigError as exc:
        raise InputError(str(exc), field="X-Semhist-Budget") from exc
