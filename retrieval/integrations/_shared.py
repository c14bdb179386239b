"""semhist's side of every adapter, in OpenAI chat dicts: the frameworks' messages are
converted to these and back, so storing, reading and prompting are written once."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Union

from semhist.kernel.errors import InputError
from semhist.kernel.model import as_message, content_text
from semhist.kernel.validate import check_request
from semhist.kernel.model import api_name
from semhist.kernel.budget import Budget
from semhist.kernel.model import StoredMessage

from semhist import History
from semhist.kernel.ids import MAX_KEY
from semhist import AskResult
from semhist.kernel.model import end_with_turn

# Messages handed out carry this prefix and their store id. Handed back (a graph state seeded
# from the stored thread), they are known by it and not stored a second time.
OWN_ID = "semhist:"
# How many stored messages a memory reads back to find the user turn a tool loop answers.
LOOKBACK = 64

BudgetLike = Union[Budget, str, int, None]


def as_budget(value: BudgetLike) -> Budget | None:
    """A budget given as a Budget, a token count (2000) or text ("2000", "10%")."""
    if value is None or isinstance(value, Budget):
        return value
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InputError(f"budget must be a Budget, a token count or text like '10%', got {value!r}",
                         field="budget")
    return Budget.parse(str(value))


def stored(history: History, thread_id: str, last: int | None = None) -> list[dict[str, Any]]:
    """The stored thread (its newest `last` messages) as OpenAI dicts with ids; an unknown
    thread has none."""
    return [as_dict(m) for m in history.store.messages(thread_id, last=last)]


def as_dict(message: StoredMessage) -> dict[str, Any]:
    """A stored message as the OpenAI dict an adapter hands out, its id marking it as ours."""
    out = as_message(message).to_openai()
    if message.name:  # a prompt sends an API-safe name; a memory gives back the name it was given
        out["name"] = message.name
    out["id"] = f"{OWN_ID}{message.id}"
    return out


def request_and_turn(dicts: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """The last user message's text and, when the model's tool calls came after it, the
    turn: it and them."""
    for pos in range(len(dicts) - 1, -1, -1):
        if dicts[pos]["role"] == "user":
            return content_text(dicts[pos].get("content")), dicts[pos:] if pos < len(dicts) - 1 else []
    raise InputError("the conversation holds no user message for semhist to answer", field="messages")


def store(history: History, thread_id: str, messages: Sequence[Mapping[str, Any]]) -> None:
    """Append messages (their "id" is the idempotency key), leaving out the ones this
    thread handed out itself."""
    own = [i for i in map(own_id, messages) if i is not None]
    held = {m.id for m in history.store.messages(thread_id, ids=own)} if own else set()
    fresh = [m for m in messages if own_id(m) is None or own_id(m) not in held]
    # A graph hands over its whole state every step: what is stored already is left out
    # before add_many checks and converts every message again.
    keys = [k for k in (m.get("id") for m in fresh) if isinstance(k, str) and k.isprintable() and len(k) <= MAX_KEY]
    known = history.store.existing_keys(thread_id, keys) if keys else {}
    fresh = [m for m in fresh if m.get("id") not in known]
    if fresh:
        history.add_many(thread_id, fresh)


def own_id(message: Mapping[str, Any]) -> int | None:
    """The store id in an id this package handed out, or None."""
    key = message.get("id")
    if not isinstance(key, str) or not key.startswith(OWN_ID):
        return None
    digits = key[len(OWN_ID):]
    return int(digits) if digits.isascii() and digits.isdigit() and len(digits) < 19 else None


def prompt(history: History, thread_id: str, request: str, *, turn: Sequence[Mapping[str, Any]] = (),
           strategy: str = "blocks", budget: BudgetLike = None, system_prompt: str | None = None,
           log: logging.Logger | None = None) -> list[dict[str, Any]]:
    """semhist's prompt for `request`. `turn`: when tool calls or results follow the stored
    request, the request's message and everything after it; it ends the prompt whole. `log`:
    the adapter's logger, told when the budget left out the last exchanges."""
    if not history.store.count(thread_id):
        return bare(history, request, system_prompt)
    result = history.ask(thread_id, request, strategy=strategy, budget=as_budget(budget),
                         system_prompt=system_prompt)
    warn_if_starved(log or logging.getLogger("semhist"), thread_id, result)
    messages = list(result.prompt.messages)
    if turn:
        # semhist appends the request after the tool results, and a tight budget may drop the
        # exchange; a model that does not see its own tool results calls the tools again.
        messages = end_with_turn(messages, [prompt_form(m) for m in turn])
    return messages


def warn_if_starved(log: logging.Logger, thread_id: str, result: AskResult) -> None:
    """A warning when the budget left out some of the last exchanges: the model will not see
    what was just said, and a framework shows nothing else of the prompt's notes."""
    if result.prompt.dropped_recent:
        said = next((n for n in result.prompt.notes if n.startswith("dropped")), "the last exchanges were dropped")
        log.warning("semhist thread %s: %s; give a larger budget", thread_id, said)


def prompt_form(message: Mapping[str, Any]) -> dict[str, Any]:
    """A stored or given message as semhist's prompts send it (no id, an API-safe name)."""
    out = {k: v for k, v in message.items() if k not in ("id", "timestamp", "name")}
    name = api_name(message["name"]) if message.get("name") and message["role"] in ("user", "assistant") else None
    return {**out, "name": name} if name else out


def bare(history: History, request: str, system_prompt: str | None) -> list[dict[str, Any]]:
    """The prompt of a thread with nothing stored yet: the system prompt and the request."""
    check_request(request, history.settings.max_message_chars)
    system = system_prompt if system_prompt is not None else history.settings.system_prompt
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": request}]


def current_turn(history: History, thread_id: str) -> tuple[str | None, list[dict[str, Any]]]:
    """The text of the newest stored user message (within LOOKBACK) and, when other messages
    follow it (a tool loop under way), it and them."""
    tail = history.store.messages(thread_id, last=LOOKBACK)
    for pos in range(len(tail) - 1, -1, -1):
        if tail[pos].role == "user":
            turn = [as_dict(m) for m in tail[pos:]] if pos < len(tail) - 1 else []
            return tail[pos].content, turn
    return None, []
