"""What the HTTP API takes and returns (the OpenAPI document is generated from these)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr

from semhist.kernel.ids import MAX_KEY, THREAD_ID

from semhist import STRATEGIES

THREAD_ID_PATTERN = THREAD_ID.pattern  # the store's own rule, so the API cannot drift from it


class ChatMessage(BaseModel):
    """An OpenAI chat message; `id` is the caller's idempotency key (e.g. a Teams activity id)."""

    model_config = ConfigDict(extra="ignore")

    role: str = Field(description="system, developer, user, assistant or tool (the legacy function role is "
                                  "refused with the fix named)")
    content: str | list[dict[str, Any]] | None = Field(default=None, description="text, or content parts "
                                                       "(kept as sent; text parts are searched)")
    name: str | None = None
    id: str | None = Field(default=None, min_length=1, max_length=MAX_KEY)
    timestamp: StrictStr | StrictInt | StrictFloat | None = Field(
        default=None, description="ISO 8601, or epoch seconds or milliseconds; default: now")
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    function_call: dict[str, Any] | None = Field(default=None, description="legacy: refused, use tool_calls")


class AddMessages(BaseModel):
    messages: list[ChatMessage] = Field(min_length=1)
    tenant: str | None = Field(default=None, min_length=1, max_length=256,
                               description="the tenant the thread belongs to (set once)")
    channel: str | None = Field(default=None, min_length=1, max_length=256,
                                description="the channel the thread belongs to (set once): threads of one tenant "
                                            "and channel reach each other with scope \"channel\"")


class Added(BaseModel):
    ids: list[int] = Field(description="the stored id of each message posted, in order")
    added: int = Field(description="how many were new (the others were stored before under the same id)")
    quoted: list[int] = Field(default_factory=list, description=(
        "positions of system or developer messages stored as quoted history, not as operator instructions: "
        "only the operator's token writes those (SEMHIST_OPERATOR_WRITERS widens it)"))


class ContextRequest(BaseModel):
    request: str = Field(min_length=1, description="the user's new request")
    strategy: Literal[tuple(STRATEGIES)] = "blocks"  # type: ignore[valid-type]
    budget: int | str | None = Field(default=None, description="tokens (2000), a share of the history (\"10%\") "
                                                              "or billed tokens (\"1000b\")")
    system_prompt: str | None = Field(default=None, description="put first in the prompt and counted in the budget")
    scope: Literal["thread", "channel", "auto"] = Field(
        default="thread", description="\"channel\": also search the other threads of the thread's channel that "
                                      "the token may read; \"auto\": when the request names the channel or other "
                                      "threads")


class Context(BaseModel):
    messages: list[dict[str, Any]] = Field(description="send these to any chat-completions API unchanged")
    prompt_tokens: int
    full_tokens: int = Field(description="tokens the whole history would have cost")
    budget_tokens: int | None
    cached_tokens: int | None = Field(default=None, description="of prompt_tokens, those that repeat the start of "
                                      "the thread's previous prompt: what a provider's prompt cache holds if warm")
    strategy: str
    keyword: dict[str, Any] | None = Field(description="what was searched for, and where it came from")
    retrieved: list[dict[str, Any]] = Field(description="the stretches of history retrieved, best first")
    elsewhere: list[dict[str, Any]] = Field(default_factory=list, description="stretches of the channel's other "
                                            "threads in the prompt (scope \"channel\" or \"auto\")")
    recent_message_ids: list[int]
    llm_calls: int
    notes: list[str]


class ThreadSummary(BaseModel):
    thread: str
    messages: int
    first: str | None
    last: str | None
    retention_days: float | None


class Forgotten(BaseModel):
    thread: str
    forgotten: int = Field(description="messages forgotten, with their vectors, summaries, statements and log")


class Health(BaseModel):
    status: Literal["ok"]
    threads: int | None = None  # the counts: for the operator's token only
    messages: int | None = None


class ErrorBody(BaseModel):
    type: str
    message: str
    index: int | None = None
    field: str | None = None


class Error(BaseModel):
    error: ErrorBody
