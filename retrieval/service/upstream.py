"""The model behind `POST /v1/chat/completions`: where it is, how to reach it, and the reply it
gave (read from a JSON body or assembled from a stream of server-sent events).

semhist forwards bytes and returns them unchanged; it only reads the reply to store it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any
import hashlib
from urllib.parse import quote, urlsplit, urlunsplit

from semhist.kernel.errors import ConfigError
from semhist.kernel.settings import Settings

OPENAI_URL = "https://api.openai.com/v1"


@dataclass(frozen=True)
class Upstream:
    url: str  # the chat-completions URL itself
    headers: dict[str, str] = field(repr=False)
    model: str | None  # when the client names none
    uses_client_key: bool  # no key of our own: the client's bearer token goes on
    cache_key: bool = True  # it takes OpenAI's prompt_cache_key (Azure's API refuses fields it does not know)

    def beside(self, path: str) -> str | None:
        """Another route of the same API (`/models`, `/responses`); None for an Azure
        deployment URL, which has only its own."""
        url = urlsplit(self.url)
        if not url.path.endswith("/chat/completions") or "/openai/deployments/" in url.path:
            return None
        return urlunsplit(url._replace(path=url.path.removesuffix("/chat/completions") + path))

    @property
    def models_url(self) -> str | None:
        """Its `GET /models` (None for an Azure deployment, which lists none of its own)."""
        found = self.beside("/models")
        return urlunsplit(urlsplit(found)._replace(query="")) if found else None


def upstream_of(settings: Settings) -> Upstream:
    """`--upstream URL` (with SEMHIST_UPSTREAM_API_KEY, if any), else the LLM endpoint the
    OpenAI/Azure variables describe, with their key."""
    if settings.upstream:
        key = settings.upstream_api_key
        return Upstream(_completions(settings.upstream), _bearer(key), None, key is None,
                        _takes_cache_key(settings, settings.upstream))
    llm = settings.llm
    if llm is None:
        raise ConfigError("no upstream model for /v1/chat/completions: start semhist serve with --upstream URL "
                          "(e.g. http://127.0.0.1:8080/v1 for semhist llm-server), or set OPENAI_BASE_URL / "
                          "OPENAI_API_KEY or AZURE_OPENAI_ENDPOINT")
    key = llm.api_key if llm.api_key not in (None, "not-needed") else None
    if llm.provider == "azure":
        url = (f"{llm.base_url.rstrip('/')}/openai/deployments/{quote(llm.model, safe='')}/chat/completions"
               f"?api-version={quote(llm.api_version or '', safe='')}")
        return Upstream(url, {"api-key": key} if key else {}, llm.model, key is None, settings.cache_key == "on")
    base = llm.base_url or OPENAI_URL
    return Upstream(_completions(base), _bearer(key), llm.model, key is None, _takes_cache_key(settings, base))


def _takes_cache_key(settings: Settings, url: str) -> bool:
    if settings.cache_key != "auto":
        return settings.cache_key == "on"
    return not (urlsplit(url).hostname or "").endswith((".azure.com", ".azure-api.net"))


def cached_of(body: bytes) -> int | None:
    """The prompt tokens a chat completion says were read from the provider's cache
    (`usage.prompt_tokens_details.cached_tokens`), when it says."""
    try:
        value = json.loads(body)["usage"]["prompt_tokens_details"]["cached_tokens"]
    except (ValueError, KeyError, TypeError):
        return None
    return value if isinstance(value, int) and value >= 0 else None


def _completions(base: str) -> str:
    url = urlsplit(base)
    path = url.path.rstrip("/")
    if not path.endswith("/chat/completions"):
        path += "/chat/completions"
    return urlunsplit(url._replace(path=path))


def _bearer(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def reply_of(body: bytes) -> dict[str, Any] | None:
    """The assistant message of a chat completion body (the first choice), or None when the
    body is not one: semhist stores what the model said, never a guess."""
    try:
        data = json.loads(body)
        message = data["choices"][0]["message"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    if not isinstance(message, dict):
        return None
    return assistant_message(message.get("content"), message.get("tool_calls"), data.get("id"))


def assistant_message(content: Any, tool_calls: Any, response_id: Any) -> dict[str, Any] | None:
    if not isinstance(content, str):
        content = None
    calls = [c for c in tool_calls or () if isinstance(c, dict)] if isinstance(tool_calls, list) else []
    if not content and not calls:
        return None
    out: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        out["tool_calls"] = calls
    if isinstance(response_id, str) and response_id:
        # a redelivered completion is stored once; the digest because some servers reuse ids
        # (a counter, a small random number), and two answers must not pass for one
        said = json.dumps([content, calls], sort_keys=True, ensure_ascii=False)
        out["id"] = f"{response_id[:200]}:{hashlib.sha256(said.encode('utf-8', 'surrogatepass')).hexdigest()[:16]}"
    return out


def response_id_of(reply: dict[str, Any]) -> str | None:
    """The upstream's response id in a stored reply's key (`assistant_message`)."""
    key = reply.get("id")
    return key.rsplit(":", 1)[0] if isinstance(key, str) and ":" in key else None


@dataclass(frozen=True)
class Wire:
    """One API the proxy speaks: where its upstream route is, and how a reply (whole, or as
    a stream passes) and the provider's cached-token count are read from it."""

    route: str  # beside the upstream's chat completions: "/chat/completions", "/responses"
    reply_of: Callable[[bytes], dict[str, Any] | None]
    cached_of: Callable[[bytes], int | None]
    reader: Callable[[], Any]  # a fresh stream reader: feed(chunk) -> ended, message(), cached
    # the reply's response id is recorded with its thread (`previous_response_id` finds it)
    notes_responses: bool = False

    def url(self, upstream: Upstream) -> str | None:
        return upstream.url if self.route == "/chat/completions" else upstream.beside(self.route)


def sse_data(pending: bytes, chunk: bytes) -> tuple[bytes, list[bytes]]:
    """The `data:` payloads of server-sent events complete in `pending + chunk`, and the
    bytes left over for the next chunk (a line cut in two)."""
    *lines, rest = (pending + chunk).split(b"\n")
    return rest, [line.strip()[5:].strip() for line in lines if line.strip().startswith(b"data:")]


class StreamReply:
    """Reads a stream of chat-completion chunks as it passes: the reply's text and tool calls
    (whose ids, names and argument pieces arrive spread over chunks, by index)."""

    def __init__(self) -> None:
        self._pending = b""
        self._text: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self.response_id: str | None = None
        self.done = False  # the stream said [DONE] or gave a finish_reason
        # what the provider read from its prompt cache: in the usage chunk a stream ends with
        # when the client asked for it (stream_options.include_usage)
        self.cached: int | None = None

    def feed(self, chunk: bytes) -> bool:
        """Take the next bytes; True when they hold the end of the stream (data: [DONE])."""
        self._pending, events = sse_data(self._pending, chunk)
        ended = False
        for data in events:
            if data == b"[DONE]":
                self.done = ended = True
            else:
                self._event(data)
        return ended

    def _event(self, data: bytes) -> None:
        try:
            event = json.loads(data)
            choice = event["choices"][0] if event.get("choices") else None
        except (ValueError, KeyError, TypeError, AttributeError):
            return
        if isinstance(event.get("id"), str):
            self.response_id = event["id"]
        if isinstance(event.get("usage"), dict):
            self.cached = cached_of(json.dumps({"usage": event["usage"]}).encode())
        if not isinstance(choice, dict) or choice.get("index", 0) != 0:
            return
        delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
        if isinstance(delta.get("content"), str):
            self._text.append(delta["content"])
        pieces = delta.get("tool_calls")
        for piece in pieces if isinstance(pieces, list) else ():
            if isinstance(piece, dict):
                self._call_piece(piece)
        if choice.get("finish_reason"):
            self.done = True

    def _call_piece(self, piece: dict[str, Any]) -> None:
        index = piece.get("index") if isinstance(piece.get("index"), int) else 0
        call = self._calls.setdefault(index,
                                      {"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
        if isinstance(piece.get("id"), str) and piece["id"]:
            call["id"] = piece["id"]
        function = piece.get("function") if isinstance(piece.get("function"), dict) else {}
        for part in ("name", "arguments"):
            if isinstance(function.get(part), str):
                call["function"][part] += function[part]

    def message(self) -> dict[str, Any] | None:
        calls = [self._calls[i] for i in sorted(self._calls) if self._calls[i]["id"]]
        return assistant_message("".join(self._text), calls, self.response_id) if self.done else None


CHAT = Wire("/chat/completions", reply_of, cached_of, StreamReply)
