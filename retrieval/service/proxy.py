"""The route of `POST /v1/chat/completions` (what it does: `chat`), and the forwarding: one
HTTP client per worker, the upstream's status and body returned as they came, streams
relayed chunk by chunk."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Annotated, Any

from fastapi import APIRouter, Header, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from semhist.kernel.errors import ConfigError, SemhistError, missing_extra
from semhist.kernel.settings import Settings

try:  # at import, so a server without it refuses to start instead of failing every chat request
    import httpx
except ImportError as exc:  # pragma: no cover - depends on the install
    raise missing_extra("httpx", "service") from exc

from semhist import History
from . import chat
from .errors import UpstreamError, UpstreamTimeout
from .metrics import metrics
from .schemas import THREAD_ID_PATTERN, Error
from .upstream import CHAT, Upstream, Wire, response_id_of, upstream_of

log = logging.getLogger("semhist.service")

RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "the upstream model's chat completion, unchanged (server-sent events when streaming)",
          "content": {"application/json": {}, "text/event-stream": {}}},
    **{code: {"model": Error} for code in (400, 401, 404, 413, 422, 502, 503, 504)}}


# response headers an OpenAI client acts on (backoff, tracing); x-ratelimit-* too
RELAYED = ("retry-after", "retry-after-ms", "x-should-retry", "x-request-id", "openai-processing-ms")
PASSED_ON = ("openai-organization", "openai-project", "openai-beta")  # request headers for the upstream


# the headers a proxied request may carry (chat completions and responses alike)
ThreadHeader = Annotated[str | None, Header(pattern=THREAD_ID_PATTERN, max_length=256,
                                            description="the thread (else `user`)")]
BudgetHeader = Annotated[str | None, Header(max_length=32, description="tokens, a share (\"10%\") or billed "
                                                                     "tokens (\"1000b\"); default: the server's")]
StrategyHeader = Annotated[str | None, Header(max_length=32)]


class ChatCompletionRequest(BaseModel):
    """An OpenAI chat-completions request; every field is forwarded, `messages` replaced by
    semhist's prompt. A message may carry semhist's `id` (idempotency key) and `timestamp`."""

    model_config = ConfigDict(extra="allow")

    messages: list[dict[str, Any]] = Field(min_length=1)
    model: str | None = Field(default=None, description="default: the upstream's configured model")
    stream: bool | None = None
    user: str | None = Field(default=None, description="names the thread when X-Semhist-Thread is not given")


def chat_api(settings: Settings) -> APIRouter:
    api = APIRouter(tags=["chat"])

    @api.post("/v1/chat/completions", response_class=Response, responses=RESPONSES)
    async def chat_completions(body: ChatCompletionRequest, request: Request, x_semhist_thread: ThreadHeader = None,
                               x_semhist_budget: BudgetHeader = None,
                               x_semhist_strategy: StrategyHeader = None) -> Response:
        """OpenAI-compatible chat completions with semhist's memory: send the new turn (or the
        whole history), get the upstream model's answer; the prompt it saw is semhist's."""
        return await relay(request, settings, body.model_dump(exclude_unset=True), x_semhist_budget,
                           x_semhist_strategy)

    @api.get("/v1/models", response_class=Response, responses=RESPONSES)
    async def models(request: Request) -> Response:
        """The upstream's models, relayed as it lists them (clients such as Open WebUI and
        LiteLLM ask this first); an Azure deployment lists itself."""
        upstream = upstream_of(settings)
        if upstream.models_url is None:
            return JSONResponse({"object": "list", "data": [
                {"id": upstream.model, "object": "model", "created": 0, "owned_by": "azure"}]})
        async with _errors(upstream):
            answer = await _client(request).get(upstream.models_url,
                                                headers=_upstream_headers(request, upstream, settings))
        relayed = {k: v for k, v in answer.headers.items() if k.lower() in RELAYED}
        return Response(answer.content, status_code=answer.status_code, headers=relayed,
                        media_type=answer.headers.get("content-type", "application/json"))

    return api


async def relay(request: Request, settings: Settings, data: dict[str, Any], budget: str | None,
                strategy: str | None, wire: Wire = CHAT,
                reshape: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
                continues: str | None = None) -> Response:
    """One proxied turn: the thread named, the new messages stored, semhist's prompt built
    (`data` in chat-completions form), then `reshape`d into the wire's body and forwarded.
    `continues`: a response id whose thread this is, when nothing else names one."""
    upstream = upstream_of(settings)  # before anything is stored
    if wire.url(upstream) is None:
        raise ConfigError(f"the upstream ({upstream.url.split('?')[0]}) has no {wire.route} route (an Azure "
                          "deployment URL): use POST /v1/chat/completions")
    if continues is not None and not chat.names_thread(request.headers, data):
        thread = chat.continued(continues, await _in_pool(request, functools.partial(
            request.app.state.history.store.response_thread, continues[:200])), request.state.grant)
    else:
        thread = chat.thread_of(request.headers, data, request.state.grant, await _secret(request))
    history: History = request.app.state.history
    prepare = functools.partial(chat.prepare, history, settings, thread, data, writer=request.state.grant.writer("proxy"),
                                model=upstream.model,
                                budget=chat.budget_of(budget), strategy=strategy or "blocks",
                                cache_key=upstream.cache_key)
    turn = await _in_pool(request, prepare)
    if reshape is not None:
        turn = replace(turn, body=reshape(turn.body))
    metrics().added.inc(turn.added)
    metrics().prompt_tokens.inc(turn.prompt_tokens)
    metrics().full_tokens.inc(turn.full_tokens)
    metrics().cached_tokens.inc(turn.cached_tokens or 0)
    ours = {"X-Semhist-Thread": thread, "X-Semhist-Prompt-Tokens": str(turn.prompt_tokens),
            "X-Semhist-Stored": str(turn.added), **chat.notes_header(turn.notes)}
    if turn.cached_tokens is not None:  # semhist's estimate; the upstream's own count is in its usage
        ours["X-Semhist-Cached-Tokens"] = str(turn.cached_tokens)
    forward = Forward(request, upstream, turn, ours, _upstream_headers(request, upstream, settings), wire)
    return await (forward.stream() if turn.body.get("stream") else forward.whole())


async def _secret(request: Request) -> bytes:
    """What `user`-derived thread ids are keyed with (SEMHIST_SECRET, else the store's own)."""
    state = request.app.state
    if state.secret is None:
        state.secret = await _in_pool(request, state.history.store.secret)
    return state.secret


class Forward:
    """One request to the upstream, its answer relayed and its reply stored."""

    def __init__(self, request: Request, upstream: Upstream, turn: chat.Turn, ours: dict[str, str],
                 headers: dict[str, str], wire: Wire = CHAT):
        self.request, self.upstream, self.turn, self.ours, self.headers = request, upstream, turn, ours, headers
        self.wire, self.url = wire, wire.url(upstream)

    async def whole(self) -> Response:
        async with _errors(self.upstream):
            answer = await _client(self.request).post(self.url, json=self.turn.body, headers=self.headers)
        if answer.is_success:
            await self._store(self.wire.reply_of(answer.content))
            cached = self.wire.cached_of(answer.content)
            if cached is not None:
                metrics().upstream_cached.inc(cached)
        return Response(answer.content, status_code=answer.status_code, headers=self._headers(answer),
                        media_type=answer.headers.get("content-type", "application/json"))

    async def stream(self) -> Response:
        client = _client(self.request)
        async with _errors(self.upstream):
            answer = await client.send(client.build_request("POST", self.url, json=self.turn.body,
                                                            headers=self.headers), stream=True)
        if not answer.is_success:
            try:
                async with _errors(self.upstream):
                    content = await answer.aread()
            finally:
                await answer.aclose()
            return Response(content, status_code=answer.status_code, headers=self._headers(answer),
                            media_type=answer.headers.get("content-type", "application/json"))
        headers = {**self._headers(answer), "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return StreamingResponse(self._relay(answer), status_code=answer.status_code, headers=headers,
                                 media_type=answer.headers.get("content-type", "text/event-stream"))

    async def _relay(self, answer):
        """The upstream's bytes as they come. The reply is stored when the end is seen, before
        the client gets it: its next turn finds the reply. An upstream that breaks off mid-stream
        ends the client's stream with an error event, not as if the answer were complete."""
        reader, stored = self.wire.reader(), False
        try:
            async for chunk in answer.aiter_bytes():
                try:
                    ended = reader.feed(chunk)
                except Exception as exc:  # reading for the store must never stop the relay
                    log.warning("%s: a stream chunk could not be read: %s", self.turn.thread_id, exc)
                    ended = False
                if ended and not stored:
                    stored = True
                    await self._store(reader.message())
                yield chunk
            if not stored:
                await self._store(reader.message())
            if reader.cached is not None:
                metrics().upstream_cached.inc(reader.cached)
        except Exception as exc:  # the client's SDK raises on an error event instead of ending quietly
            log.warning("%s: the upstream stream broke off: %s: %s", self.turn.thread_id, type(exc).__name__, exc)
            event = {"error": {"type": "upstream_unavailable", "message": f"the upstream stream broke off: "
                                                                          f"{type(exc).__name__}"}}
            yield b"\n\ndata: " + json.dumps(event).encode() + b"\n\n"
        finally:
            await answer.aclose()

    def _headers(self, answer) -> dict[str, str]:
        """Ours, and the upstream's that a client acts on (rate limits, retry hints, request id)."""
        theirs = {k: v for k, v in answer.headers.items() if k.lower() in RELAYED or k.lower().startswith(
            "x-ratelimit-")}
        return {**theirs, **self.ours}

    async def _store(self, reply: dict[str, Any] | None) -> None:
        if reply is None:
            return
        try:
            added = await _in_pool(self.request, functools.partial(self._keep, reply))
            metrics().added.inc(added.added)
        except SemhistError as exc:  # the answer still reaches the client
            log.warning("%s: could not store the reply: %s", self.turn.thread_id, exc)


    def _keep(self, reply: dict[str, Any]) -> Any:
        history: History = self.request.app.state.history
        added = history.add_many(self.turn.thread_id, [reply])
        response = response_id_of(reply) if self.wire.notes_responses else None
        if response:
            history.store.note_response(response, self.turn.thread_id)
        return added


class _errors:
    """httpx failures as semhist's: 504 for a timeout, 502 for the rest."""

    def __init__(self, upstream: Upstream):
        self.upstream = upstream

    async def __aenter__(self):
        return self

    async def __aexit__(self, kind, exc, tb) -> bool:
        if isinstance(exc, httpx.TimeoutException):
            raise UpstreamTimeout(f"the upstream model did not answer in time ({type(exc).__name__}; "
                                  "SEMHIST_UPSTREAM_TIMEOUT)") from exc
        if isinstance(exc, httpx.HTTPError):
            raise UpstreamError(f"the upstream model could not be reached: {type(exc).__name__}: {exc}") from exc
        return False


def _upstream_headers(request: Request, upstream: Upstream, settings: Settings) -> dict[str, str]:
    """Our key for the upstream; without one, the client's own bearer token goes on, unless
    it is semhist's token (a server with SEMHIST_API_TOKEN keeps that to itself)."""
    headers = dict(upstream.headers)
    headers.update({k: v for k, v in request.headers.items() if k.lower() in PASSED_ON})
    given = request.headers.get("authorization")
    if upstream.uses_client_key and given and settings.api_token is None:
        headers["Authorization"] = given
    return headers


def _client(request: Request):
    state = request.app.state
    if getattr(state, "http", None) is None:
        timeout = httpx.Timeout(state.upstream_timeout, connect=10.0)
        state.http = httpx.AsyncClient(timeout=timeout, limits=httpx.Limits(max_connections=64))
    return state.http


async def _in_pool(request: Request, work):
    return await asyncio.get_running_loop().run_in_executor(request.app.state.pool, work)
