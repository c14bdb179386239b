"""Tool calls a small model writes as text. The packaged Qwen2.5-Coder-1.5B, asked with tools,
answers with the call as a ```json block (or bare JSON) instead of its template's
`<tool_call>` tags, so llama.cpp returns it as `content` and no agent with tools can run on it.
`semhist llm-server` reads such a reply back as `tool_calls`: only when the whole reply is
calls (JSON objects with a declared tool's `name` and object `arguments`), never a guess from
prose that mentions JSON."""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Any

_TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_FENCED = re.compile(r"```(?:json)?\s*(.*?)\s*```", re.DOTALL)


def tool_calls_in(content: str, names: set[str]) -> list[dict[str, Any]] | None:
    """The calls `content` consists of, in OpenAI's `tool_calls` form; None when it is anything
    else (an answer, a call of an undeclared tool, JSON that is not a call)."""
    text = content.strip()
    for pattern in (_TAGGED, _FENCED):
        pieces = pattern.findall(text)
        if pieces:
            if pattern.sub("", text).strip():
                return None  # words around the calls: an answer that shows JSON
            break
    else:
        pieces = [text]
    calls = []
    for piece in pieces:
        try:
            found = json.loads(piece)
        except ValueError:
            return None
        for call in found if isinstance(found, list) else [found]:
            made = _call(call, names)
            if made is None:
                return None
            calls.append(made)
    return calls or None


def _call(call: Any, names: set[str]) -> dict[str, Any] | None:
    if not isinstance(call, dict) or call.get("name") not in names:
        return None
    arguments = call.get("arguments", call.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": call["name"], "arguments": json.dumps(arguments, ensure_ascii=False)}}


def with_tool_calls(reply: dict[str, Any], tools: list[Any]) -> dict[str, Any]:
    """A chat completion with a first choice whose text is only tool calls turned into them."""
    names = {t.get("function", {}).get("name") for t in tools if isinstance(t, dict)}
    try:
        choice = reply["choices"][0]
        message = choice["message"]
    except (KeyError, IndexError, TypeError):
        return reply
    if message.get("tool_calls") or not isinstance(message.get("content"), str):
        return reply
    calls = tool_calls_in(message["content"], names)
    if calls is None:
        return reply
    choice = {**choice, "message": {**message, "content": None, "tool_calls": calls}, "finish_reason": "tool_calls"}
    return {**reply, "choices": [choice, *reply["choices"][1:]]}


def as_events(reply: dict[str, Any]) -> list[bytes]:
    """A whole chat completion as the server-sent events of a stream (for a client that asked
    for one: the reply had to be read whole to find its calls)."""
    base = {"id": reply.get("id", "chatcmpl-semhist"), "object": "chat.completion.chunk",
            "created": reply.get("created", int(time.time())), "model": reply.get("model", "")}
    events = []
    for choice in reply.get("choices", []):
        message = choice.get("message", {})
        delta: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
        if message.get("tool_calls"):
            delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(message["tool_calls"])]
        events.append({**base, "choices": [{"index": choice.get("index", 0), "delta": delta, "finish_reason": None}]})
        events.append({**base, "choices": [{"index": choice.get("index", 0), "delta": {},
                                            "finish_reason": choice.get("finish_reason")}]})
    if reply.get("usage"):
        events.append({**base, "choices": [], "usage": reply["usage"]})
    return [b"data: " + json.dumps(e, ensure_ascii=False).encode() + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]
