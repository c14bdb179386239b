"""The route of `POST /v1/chat/completions` (what it does: `chat`), and the forwarding: one
HTTP client per worker, the upstream's status and body returned as they came, streams
relayed chunk by chunk."""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Annotated, Any

from fastapi import APIRouter, Header, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from indexers.errors import InputError, SemhistError
from indexers.settings import Settings

from ..history import History
from . import chat
from .errors import UpstreamError, UpstreamTimeout
from .metrics import metrics
from .schemas import THREAD_ID_PATTERN, Error
from .upstream import StreamReply, Upstream, reply_of, upstream_of

log = logging.getLogger("semhist.service")

RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "the upstream model's chat completion, unchanged (server-sent events when streaming)",
          "content": {"application/json": {}, "text/event-stream": {}}},
    **{code: {"model": Error} for code in (400, 401, 404, 413, 422, 502, 503, 504)}}


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
    async def chat_completions(
            body: ChatCompletionRequest, request: Request,
            x_semhist_thread: Annotated[str | None, Header(pattern=THREAD_ID_PATTERN, max_length=256,
                                                           description="the thread (else `user`)")] = None,
            x_semhist_budget: Annotated[str | None, Header(max_length=32, description="tokens or a share "
                                                           "(\"10%\"); default: the server's")] = None,
            x_semhist_strategy: Annotated[str | None, Header(max_length=32)] = None) -> Response:
        """OpenAI-compatible chat completions with semhist's memory: send the new turn (or the
        whole history), get the upstream model's answer; the prompt it saw is semhist's."""
        upstream = upstream_of(settings)  # before anything is stored
        data = body.model_dump(exclude_unset=True)
        thread = chat.thread_of(request.headers, data)
        history: History = request.app.state.history
        prepare = functools.partial(chat.prepare, history, settings, thread, data,
                                    budget=chat.budget_of(x_semhist_budget), strategy=x_semhist_strategy or "blocks")
        turn = await _in_pool(request, prepare)
        metrics().added.inc(turn.added)
        metrics().prompt_tokens.inc(turn.prompt_tokens)
        metrics().full_tokens.inc(turn.full_tokens)
        if not turn.body.get("model"):
            if not upstream.model:
                raise InputError("model: name the model (the upstream has no default: set SEMHIST_LLM_MODEL)",
                                 field="model")
            turn.body["model"] = upstream.model
        ours = {"X-Semhist-Thread": thread, "X-Semhist-Prompt-Tokens": str(turn.prompt_tokens),
                "X-Semhist-Stored": str(turn.added)}
        forward = Forward(request, upstream, turn, ours, _upstream_headers(request, upstream, settings))
        return await (forward.stream() if turn.body.get("stream") else forward.whole())

    return api


class Forward:
    """One request to the upstream, its answer relayed and its reply stored."""

    def __init__(self, request: Request, upstream: Upstream, turn: chat.Turn, ours: dict[str, str],
                 headers: dict[str, str]):
        self.request, self.upstream, self.turn, self.ours, self.headers = request, upstream, turn, ours, headers

    async def whole(self) -> Response:
        async with _errors(self.upstream):
            answer = await _client(self.request).post(self.upstream.url, json=self.turn.body, headers=self.headers)
        if answer.is_success:
            await self._store(reply_of(answer.content))
        return Response(answer.content, status_code=answer.status_code, headers=self.ours,
                        media_type=answer.headers.get("content-type", "application/json"))

    async def stream(self) -> Response:
        client = _client(self.request)
        async with _errors(self.upstream):
            answer = await client.send(client.build_request("POST", self.upstream.url, json=self.turn.body,
                                                            headers=self.headers), stream=True)
        if not answer.is_success:
            async with _errors(self.upstream):
                content = await answer.aread()
            await answer.aclose()
            return Response(content, status_code=answer.status_code, headers=self.ours,
                            media_type=answer.headers.get("content-type", "application/json"))

        async def relay():
            reader, stored = StreamReply(), False
            try:
                async for chunk in answer.aiter_bytes():
                    if reader.feed(chunk) and not stored:
                        stored = True  # before the client sees the end: its next turn finds the reply
                        await self._store(reader.message())
                    yield chunk
                if not stored:
                    await self._store(reader.message())
            except Exception as exc:  # the upstream went away mid-stream: the client sees the stream end
                log.warning("%s: the upstream stream broke off: %s", self.turn.thread_id, exc)
            finally:
                await answer.aclose()

        return StreamingResponse(relay(), status_code=answer.status_code, headers=self.ours,
                                 media_type=answer.headers.get("content-type", "text/event-stream"))

    async def _store(self, reply: dict[str, Any] | None) -> None:
        if reply is None:
            return
        try:
            added = await _in_pool(self.request, functools.partial(
                self.request.app.state.history.add_many, self.turn.thread_id, [reply]))
            metrics().added.inc(added.added)
        except SemhistError as exc:  # the answer still reaches the client
            log.warning("%s: could not store the reply: %s", self.turn.thread_id, exc)


class _errors:
    """httpx failures as semhist's: 504 for a timeout, 502 for the rest."""

    def __init__(self, upstream: Upstream):
        self.upstream = upstream

    async def __aenter__(self):
        return self

    async def __aexit__(self, kind, exc, tb) -> bool:
        import httpx

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
    given = request.headers.get("authorization")
    if upstream.uses_client_key and given and settings.api_token is None:
        headers["Authorization"] = given
    return headers


def _client(request: Request):
    state = request.app.state
    if getattr(state, "http", None) is None:
        import httpx

        timeout = httpx.Timeout(state.upstream_timeout, connect=10.0)
        state.http = httpx.AsyncClient(timeout=timeout, limits=httpx.Limits(max_connections=64))
    return state.http


async def _in_pool(request: Request, work):
    return await asyncio.get_running_loop().run_in_executor(request.app.state.pool, work)
