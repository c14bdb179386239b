"""OpenAI Responses API items and chat messages, one into the other: what the proxy's
`/v1/responses` and the OpenAI Agents SDK session store (as chat messages, like every other
front end) and hand back (as input items)."""

from __future__ import annotations

import json
from typing import Any

from .errors import InputError


def as_chat(body: dict[str, Any], strict: bool = True) -> list[dict[str, Any]]:
    """The request's instructions and input items as chat messages. Items that refer to state
    the provider keeps (`item_reference`, `reasoning`) carry nothing to store: left out; so are
    other kinds (a hosted tool's call) unless `strict`, which refuses them."""
    out: list[dict[str, Any]] = []
    if body.get("instructions"):
        out.append({"role": "system", "content": body["instructions"]})
    given = body.get("input")
    items = [{"role": "user", "content": given}] if isinstance(given, str) else given or []
    for i, item in enumerate(items):
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind == "message":
            out.append({"role": item.get("role"), "content": _chat_content(item.get("content"))})
        elif kind == "function_call":
            call = {"id": item.get("call_id"), "type": "function",
                    "function": {"name": item.get("name"), "arguments": item.get("arguments") or ""}}
            if out and out[-1]["role"] == "assistant" and out[-1].get("tool_calls") and not out[-1]["content"]:
                out[-1]["tool_calls"].append(call)  # parallel calls: one assistant turn
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            out.append({"role": "tool", "tool_call_id": item.get("call_id"),
                        "content": output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)})
        elif kind not in ("item_reference", "reasoning") and strict:
            raise InputError(f"input[{i}]: item type {kind!r} is not one semhist can store; send messages, "
                             "function_call and function_call_output items", index=i, field="input")
    return out


def _chat_content(content: Any) -> Any:
    """Responses content (text, or input_text / output_text / input_image parts) as chat content."""
    if not isinstance(content, list):
        return content
    parts = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text"):
            parts.append({"type": "text", "text": part.get("text", "")})
        elif kind == "input_image" and part.get("image_url"):
            parts.append({"type": "image_url", "image_url": {"url": part["image_url"]}})
        else:
            parts.append(part)  # kept as sent: stored verbatim, not searched
    if all(p.get("type") == "text" for p in parts if isinstance(p, dict)):
        return "\n".join(p["text"] for p in parts)
    return parts


def as_input(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """semhist's prompt (chat messages) as Responses input items."""
    items: list[dict[str, Any]] = []
    for m in messages:
        role = m.get("role")
        if role == "tool":
            items.append({"type": "function_call_output", "call_id": m.get("tool_call_id"),
                          "output": m.get("content") if isinstance(m.get("content"), str) else
                          json.dumps(m.get("content"), ensure_ascii=False)})
            continue
        if m.get("content"):
            items.append({"type": "message", "role": role, "content": _input_content(m["content"], role)})
        for call in m.get("tool_calls") or ():
            function = call.get("function") or {}
            items.append({"type": "function_call", "call_id": call.get("id"), "name": function.get("name"),
                          "arguments": function.get("arguments") or ""})
    return items


def _input_content(content: Any, role: str) -> Any:
    if not isinstance(content, list):
        return content
    text = "output_text" if role == "assistant" else "input_text"
    out = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            out.append({"type": text, "text": part.get("text", "")})
        elif kind == "image_url":
            out.append({"type": "input_image", "image_url": (part.get("image_url") or {}).get("url")})
        else:
            out.append(part)
    return out
