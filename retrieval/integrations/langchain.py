"""LangChain and LangGraph memory backed by semhist (extra `semhist[langchain]`).

- `SemhistChatMessageHistory`: a `BaseChatMessageHistory` over one stored thread, for
  `RunnableWithMessageHistory(chain, history_factory(history))`.
- `pre_model_hook(history)`: a LangGraph node (`create_react_agent(pre_model_hook=...)`) that
  stores the graph's messages and hands the model semhist's prompt instead of all of them;
  `post_model_hook(history)` stores the model's reply right away.
- `semhist_prompt(history, thread_id, request)`: that prompt, as LangChain messages.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from semhist.kernel.errors import InputError, missing_extra
from semhist.kernel.ids import check_thread_id

try:
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
    from langchain_core.messages.utils import convert_to_openai_messages
    from langchain_core.runnables import RunnableConfig
except ImportError as exc:
    raise missing_extra("langchain-core", "langchain") from exc


from semhist import History
from . import _shared
from ._shared import BudgetLike

# Where a prompt that left out the last exchanges is reported (LangChain and LangGraph log
# through Python's logging; with none configured, warnings reach stderr).
log = logging.getLogger("semhist.langchain")

__all__ = ["SemhistChatMessageHistory", "from_openai", "history_factory", "post_model_hook", "pre_model_hook",
           "semhist_prompt", "to_openai"]

_TYPES: dict[str, type[BaseMessage]] = {"user": HumanMessage, "assistant": AIMessage, "system": SystemMessage,
                                        "developer": SystemMessage, "tool": ToolMessage}


class SemhistChatMessageHistory(BaseChatMessageHistory):
    """One semhist thread as a LangChain chat history. `last` limits what `messages` reads
    to the newest messages (a weeks-long thread is not meant to be sent whole)."""

    def __init__(self, history: History, thread_id: str, *, last: int | None = None):
        super().__init__()
        if last is not None and (isinstance(last, bool) or not isinstance(last, int) or last < 1):
            raise InputError(f"last must be a positive number of messages, got {last!r}", field="last")
        self.history, self.thread_id, self.last = history, check_thread_id(thread_id), last

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The stored thread, oldest first; each message's id is `semhist:<store id>`."""
        return from_openai(_shared.stored(self.history, self.thread_id, self.last))

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Store a batch in one write; a message whose id is stored already is skipped."""
        if messages:
            _shared.store(self.history, self.thread_id, to_openai(messages))

    def clear(self) -> None:
        """Forget the thread (nothing happens when it is not stored)."""
        self.history.forget(self.thread_id)


def history_factory(history: History, *, last: int | None = None) -> Callable[[str], SemhistChatMessageHistory]:
    """`get_session_history` for `RunnableWithMessageHistory`: the session id is the thread id."""

    def get_session_history(session_id: str) -> SemhistChatMessageHistory:
        return SemhistChatMessageHistory(history, session_id, last=last)

    return get_session_history


def semhist_prompt(history: History, thread_id: str, request: str, *, strategy: str = "blocks",
                   budget: BudgetLike = None, system_prompt: str | None = None) -> list[BaseMessage]:
    """semhist's prompt for `request` over the stored thread, ending with the request."""
    return from_openai(_shared.prompt(history, thread_id, request, strategy=strategy, budget=budget,
                                      system_prompt=system_prompt, log=log))


PreModelHook = Callable[[Any, RunnableConfig], dict[str, list[BaseMessage]]]


def pre_model_hook(history: History, *, thread_id_key: str = "thread_id", strategy: str = "blocks",
                   budget: BudgetLike = None, system_prompt: str | None = None) -> PreModelHook:
    """A LangGraph node: stores the state's messages not stored yet in the thread named by
    `config["configurable"][thread_id_key]` and returns `{"llm_input_messages": prompt}`,
    semhist's prompt for the last human message. The state keeps every message."""
    _shared.as_budget(budget)  # a bad budget fails where the graph is built, not on its first turn

    def semhist_pre_model_hook(state: Any, config: RunnableConfig) -> dict[str, list[BaseMessage]]:
        thread_id, dicts = store_state(history, state, config, thread_id_key)
        request, turn = _shared.request_and_turn(dicts)
        prompt = _shared.prompt(history, thread_id, request, turn=turn, strategy=strategy,
                                budget=budget, system_prompt=system_prompt, log=log)
        return {"llm_input_messages": from_openai(prompt)}

    return semhist_pre_model_hook


def post_model_hook(history: History, *, thread_id_key: str = "thread_id") -> Callable[[Any, RunnableConfig], dict]:
    """A LangGraph node that stores the state's messages not stored yet (the model's reply,
    which the pre-model hook would store only on the next turn); it changes no state."""

    def semhist_post_model_hook(state: Any, config: RunnableConfig) -> dict:
        store_state(history, state, config, thread_id_key)
        return {}

    return semhist_post_model_hook


def store_state(history: History, state: Any, config: RunnableConfig | None, key: str) -> tuple[str, list[dict]]:
    """Store the graph state's messages not stored yet; the thread and the state as dicts."""
    thread_id = _thread_of(config, key)
    dicts = _keyed(to_openai(_state_messages(state)))
    _shared.store(history, thread_id, dicts)
    return thread_id, dicts


def _thread_of(config: RunnableConfig | None, key: str) -> str:
    thread_id = ((config or {}).get("configurable") or {}).get(key)
    if not isinstance(thread_id, str):
        raise InputError(f"config['configurable'][{key!r}] names the semhist thread; run the graph with "
                         f"config={{'configurable': {{{key!r}: '...'}}}}", field=key)
    return thread_id


def _state_messages(state: Any) -> Sequence[BaseMessage]:
    messages = state.get("messages") if isinstance(state, Mapping) else getattr(state, "messages", None)
    if not messages:
        raise InputError("the graph state has no 'messages' for semhist to store", field="messages")
    return messages


def _keyed(dicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every state message with an idempotency key: its id, or (a state without the
    add_messages reducer gives none) its position and content, stable as the state grows."""
    for pos, d in enumerate(dicts):
        if d.get("id") is None:
            body = json.dumps({k: v for k, v in d.items() if k != "timestamp"}, sort_keys=True, default=str)
            d["id"] = "state:" + hashlib.sha256(f"{pos}\x00{body}".encode()).hexdigest()[:32]
    return dicts


# -- conversion ----------------------------------------------------------------------------
def to_openai(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """LangChain messages as the OpenAI chat dicts semhist stores: "id" from the message id
    and "timestamp" from `additional_kwargs["timestamp"]` when set."""
    out: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        if not isinstance(message, BaseMessage):
            raise InputError(f"message {i}: expected a LangChain message, got {type(message).__name__}",
                             index=i, field="message")
        out.extend(_to_dicts(message, i))
    return out


def _to_dicts(message: BaseMessage, index: int) -> list[dict[str, Any]]:
    try:
        # A message carrying tool results among its blocks becomes several OpenAI messages.
        dicts = convert_to_openai_messages([message], text_format="string")
    except ValueError as exc:  # a content block OpenAI's format has no place for
        raise InputError(f"message {index}: {exc}", index=index, field="content") from exc
    stamp = message.additional_kwargs.get("timestamp")
    for n, d in enumerate(dicts):
        if message.id is not None:
            d["id"] = message.id if n == 0 else f"{message.id}#{n}"
        if stamp is not None:
            d["timestamp"] = stamp
        if message.name and n == 0:
            d.setdefault("name", message.name)
    if isinstance(message, AIMessage) and message.invalid_tool_calls:
        dicts[0]["tool_calls"] = dicts[0].get("tool_calls", []) + _invalid_calls(message)
    return dicts


def _invalid_calls(message: AIMessage) -> list[dict[str, Any]]:
    """Calls whose arguments did not parse, kept as the model sent them (those without an
    id or name cannot be answered and are left out)."""
    return [{"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c.get("args") or ""}}
            for c in message.invalid_tool_calls if isinstance(c.get("id"), str) and isinstance(c.get("name"), str)]


def from_openai(messages: Sequence[Mapping[str, Any]]) -> list[BaseMessage]:
    """OpenAI chat dicts (semhist's prompt or stored messages) as LangChain messages."""
    return [_message(m) for m in messages]


def _message(m: Mapping[str, Any]) -> BaseMessage:
    role = m["role"]
    kwargs: dict[str, Any] = {k: m[k] for k in ("id", "name") if m.get(k)}
    if role == "assistant" and m.get("tool_calls"):
        kwargs.update(_calls(m["tool_calls"]))
    elif role == "tool":
        kwargs["tool_call_id"] = m["tool_call_id"]
    elif role == "developer":  # LangChain's own mark for OpenAI's developer role
        kwargs["additional_kwargs"] = {"__openai_role__": "developer"}
    return _TYPES[role](content=m.get("content") or "", **kwargs)


def _calls(calls: Sequence[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    good, bad = [], []
    for c in calls:
        fn = c["function"]
        try:
            args = json.loads(fn["arguments"])
        except ValueError:
            args = None
        if isinstance(args, dict):
            good.append({"name": fn["name"], "args": args, "id": c["id"], "type": "tool_call"})
        else:
            bad.append({"name": fn["name"], "args": fn["arguments"], "id": c["id"], "type": "invalid_tool_call",
                        "error": "the arguments are not a JSON object"})
    return {"tool_calls": good, "invalid_tool_calls": bad}
