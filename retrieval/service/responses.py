"""`POST /v1/responses`: the Responses API (what the OpenAI Agents SDK and the newest OpenAI
examples call), taking the same path as chat completions. Its input items become chat
messages (stored, and asked with as a chat turn), semhist's prompt becomes input items again,
and the upstream's `/responses` answers; the reply is read from its output items.

`previous_response_id` names state kept by the provider; semhist's prompt already carries the
thread's history, so it is not forwarded (the provider would add its copy of the history to
ours). It names the thread instead, when nothing else does: each relayed response's id is
recorded with its thread (`store.note_response`), on every replica's shared store. `instructions` are the system prompt, counted in the budget like a chat request's.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from semhist.kernel.items import as_chat, as_input
from semhist.kernel.settings import Settings

from .proxy import RESPONSES, BudgetHeader, StrategyHeader, ThreadHeader, relay
from .upstream import Wire, assistant_message, sse_data

# of the request, what semhist answers for itself instead of forwarding
OURS = ("input", "instructions", "previous_response_id", "messages")


class ResponsesRequest(BaseModel):
    """An OpenAI Responses API request; every field but `input`, `instructions` and
    `previous_response_id` is forwarded, `input` replaced by semhist's prompt."""

    model_config = ConfigDict(extra="allow")

    input: str | list[dict[str, Any]] = Field(description="the new turn: text, or input items (messages, "
                                                          "function calls and their outputs)")
    instructions: str | None = Field(default=None, description="the system prompt, counted in the budget")
    model: str | None = Field(default=None, description="default: the upstream's configured model")
    stream: bool | None = None
    user: str | None = Field(default=None, description="names the thread when X-Semhist-Thread is not given")
    safety_identifier: str | None = Field(default=None, description="names the thread when neither the header "
                                                                    "nor `user` does")
    previous_response_id: str | None = Field(default=None, description="names the thread of that response "
                                                                       "when neither the header nor `user` "
                                                                       "does; not forwarded (the thread's "
                                                                       "history is in semhist's prompt)")


def responses_api(settings: Settings) -> APIRouter:
    api = APIRouter(tags=["chat"])

    @api.post("/v1/responses", response_class=Response, responses=RESPONSES)
    async def responses(body: ResponsesRequest, request: Request, x_semhist_thread: ThreadHeader = None,
                        x_semhist_budget: BudgetHeader = None, x_semhist_strategy: StrategyHeader = None) -> Response:
        """OpenAI Responses API with semhist's memory: send the new turn, get the upstream
        model's response; the input it saw is semhist's prompt."""
        sent = body.model_dump(exclude_unset=True)
        data = {"messages": as_chat(sent), "model": sent.get("model"),
                "user": sent.get("user") or sent.get("safety_identifier")}

        def reshape(prompt: dict[str, Any]) -> dict[str, Any]:
            out = {k: v for k, v in sent.items() if k not in OURS}
            out.update(model=prompt["model"], input=as_input(prompt["messages"]))
            if "prompt_cache_key" in prompt:
                out["prompt_cache_key"] = prompt["prompt_cache_key"]
            return out

        previous = sent.get("previous_response_id")
        return await relay(request, settings, data, x_semhist_budget, x_semhist_strategy, RESPONSES_WIRE, reshape,
                           continues=previous if isinstance(previous, str) and previous else None)

    return api


# -- the reply -------------------------------------------------------------------------------------
def response_reply(body: bytes | dict[str, Any]) -> dict[str, Any] | None:
    """The assistant message of a response (its output text and function calls), or None."""
    try:
        data = json.loads(body) if isinstance(body, (bytes, str)) else body
        output = data["output"]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(output, list):
        return None
    texts, calls = [], []
    for item in output:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "message":
            texts += [p.get("text", "") for p in item.get("content") or () if isinstance(p, dict)
                      and p.get("type") == "output_text"]
        elif item.get("type") == "function_call":
            calls.append({"id": item.get("call_id"), "type": "function",
                          "function": {"name": item.get("name"), "arguments": item.get("arguments") or ""}})
    return assistant_message("".join(texts) or None, calls, data.get("id"))


def response_cached(body: bytes | dict[str, Any]) -> int | None:
    """`usage.input_tokens_details.cached_tokens`, when the response says."""
    try:
        data = json.loads(body) if isinstance(body, (bytes, str)) else body
        cached = data["usage"]["input_tokens_details"]["cached_tokens"]
    except (ValueError, KeyError, TypeError):
        return None
    return cached if isinstance(cached, int) else None


class ResponseStream:
    """Reads a Responses event stream as it passes; the reply is the response the final event
    (`response.completed`, `.incomplete` or `.failed`) carries whole."""

    ENDS = ("response.completed", "response.incomplete", "response.failed")

    def __init__(self) -> None:
        self._pending = b""
        self._final: dict[str, Any] | None = None
        self.cached: int | None = None

    def feed(self, chunk: bytes) -> bool:
        self._pending, events = sse_data(self._pending, chunk)
        ended = False
        for data in events:
            try:
                event = json.loads(data)
            except ValueError:
                continue
            if isinstance(event, dict) and event.get("type") in self.ENDS and isinstance(event.get("response"), dict):
                self._final = event["response"]
                self.cached = response_cached(self._final)
                ended = True
        return ended

    def message(self) -> dict[str, Any] | None:
        return response_reply(self._final) if self._final is not None else None


RESPONSES_WIRE = Wire("/responses", response_reply, response_cached, ResponseStream, notes_responses=True)
