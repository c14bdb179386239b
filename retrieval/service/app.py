"""The HTTP API over stored threads (`semhist serve`): the same `History` a Python bot uses,
so a request takes the same path whether it came over HTTP or from a library call.

Handlers are plain functions run in a fixed pool of threads (`in_pool`): the work they do
(an embedding, SQL, FAISS) must not hold the event loop, the pool bounds the store
connections a worker opens, and its threads never retire, so their store connection and
tokenizer are made once (anyio's pool retires idle threads: at a slow pace every request paid
for a new PostgreSQL connection and a new tokenizer).
"""

from __future__ import annotations

import asyncio
import gc
import logging
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, FastAPI, Path, Query, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from semhist.kernel.errors import BackendError, ConfigError, InputError, NotFoundError
from semhist.kernel.budget import Budget
from semhist.kernel.settings import Settings

from .. import render
from semhist import History
from semhist.kernel.ids import MAX_KEY
from semhist.kernel.writers import scoped_key
from . import errors
from .access import Access, Grant
from .errors import Forbidden, TooLarge, Unauthorized
from .metrics import Timing, metrics
from .proxy import chat_api
from .inspector import inspector_api, inspector_pages
from .responses import responses_api
from .routing import ScopedThread, history_of, in_pool, run_on
from .schemas import (AddMessages, Added, Context, ContextRequest, Error, Forgotten, Health,
                      ThreadSummary)

log = logging.getLogger("semhist.service")

WORKER_THREADS = 8  # requests in progress per worker; each holds one store connection
ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": Error} for code in (400, 401, 403, 404, 409, 413, 422, 503)}


# Health and metrics on a thread of their own: requests stuck on a slow LLM must not make a
# liveness probe time out and get a healthy worker restarted.
in_ops_pool = run_on("ops_pool")


def create_app(settings: Settings | None = None, history: History | None = None) -> FastAPI:
    """The service's ASGI app. `history` lets a caller share one it already has (tests, an
    embedding app); otherwise one is made from `settings` and closed at shutdown."""
    settings = settings or Settings.load()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.pool = ThreadPoolExecutor(WORKER_THREADS, thread_name_prefix="semhist-request")
        app.state.ops_pool = ThreadPoolExecutor(1, thread_name_prefix="semhist-ops")
        app.state.history = history or History(settings)
        app.state.http, app.state.upstream_timeout = None, settings.upstream_timeout  # made on first use
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(app.state.pool, _warm, app.state.history)
        # else read from the store on first need: a worker (re)started while the database is down
        # must still start, or uvicorn takes its failed start as a broken app and stops them all
        app.state.secret = settings.secret.encode() if settings.secret else None
        try:
            yield
        finally:
            if history is None:
                await loop.run_in_executor(app.state.pool, app.state.history.close)
            if app.state.http is not None:
                await app.state.http.aclose()
            app.state.pool.shutdown(wait=True)
            app.state.ops_pool.shutdown(wait=True)

    access = Access.from_settings(settings)  # a bad tokens file stops the start, not a request
    # with tokens, the API's description is for their holders: /openapi.json behind the token,
    # the HTML pages (which cannot send one) off
    docs = {} if access.open else {"openapi_url": None, "docs_url": None, "redoc_url": None}
    app = FastAPI(title="semhist", version=_version(), lifespan=lifespan, **docs,
                  description="Semantic history for chat threads that never end: append messages, ask for the "
                              "prompt of the next turn within a token budget, or put semhist in front of "
                              "any OpenAI-compatible model (POST /v1/chat/completions).")
    errors.install(app)
    app.add_middleware(errors.BodyLimit, max_bytes=settings.max_body_kb * 1024)
    # outside the body's reader: a request without a valid token is refused before its body is read
    app.add_middleware(errors.TokenGate, valid=None if access.open else (lambda token: access.grant(token) is not None))
    app.add_middleware(Timing, sink=metrics())
    app.state.access = access
    auth = Depends(_bearer)
    app.include_router(_threads_api(settings), dependencies=[auth], responses=ERRORS)
    app.include_router(chat_api(settings), dependencies=[auth])
    app.include_router(responses_api(settings), dependencies=[auth])
    app.include_router(inspector_api(settings), dependencies=[auth], responses=ERRORS)
    app.mount("/ui", inspector_pages(), name="ui")  # the page only: what it shows comes from the API above

    @app.get("/healthz", response_model=Health, response_model_exclude_none=True,
             responses={503: {"model": Error}}, tags=["operations"])
    @in_ops_pool
    def healthz(request: Request) -> Health:
        """Alive, with the store answering; its counts only for the operator's token (or a
        server without tokens): a liveness probe carries none, and needs none."""
        threads, messages = history_of(request).store.totals()
        grant = request.app.state.access.grant(_token_of(request))
        if grant is None or not grant.everything:
            return Health(status="ok")
        return Health(status="ok", threads=threads, messages=messages)

    @app.get("/metrics", dependencies=[auth], response_class=Response, tags=["operations"],
             responses={200: {"content": {"text/plain": {}}}, 401: {"model": Error}, 403: {"model": Error}})
    @in_ops_pool
    def prometheus(request: Request) -> Response:
        """Prometheus text: requests and latency per route, messages, tokens sent vs full history
        (every thread's figures: the operator's token only)."""
        _everything(request)
        body, kind = metrics().exposition(history_of(request).store.totals)
        return Response(body, media_type=kind)

    if not access.open:
        @app.get("/openapi.json", dependencies=[auth], include_in_schema=False)
        def openapi() -> dict[str, Any]:
            return app.openapi()

    return app


def _threads_api(settings: Settings) -> APIRouter:
    api = APIRouter(tags=["threads"])

    @api.post("/v1/threads/{thread_id}/messages", status_code=201, response_model=Added)
    @in_pool
    def add_messages(thread_id: ScopedThread, body: AddMessages, request: Request) -> Added:
        """Store messages (OpenAI chat shape). Each may carry `id`, the caller's key (e.g. a
        Teams activity id): posting it again adds nothing. A bad message stores none of the batch."""
        if len(body.messages) > settings.max_batch:
            raise TooLarge(f"{len(body.messages)} messages in one request; at most {settings.max_batch}")
        # each message's size is checked once, by History with the rest of it (413 too)
        history, placed = history_of(request), body.tenant is not None or body.channel is not None
        # a thread the batch would make is placed after it is stored: a refused batch leaves no
        # empty thread behind; a stored thread is placed first, so a conflicting place stores nothing
        fresh = placed and not history.store.has_thread(thread_id)
        if placed:  # refused (personal data in an id) before anything is stored
            history.place(thread_id, tenant=body.tenant, channel=body.channel, check_only=fresh)
        result = history.add_many(thread_id, [m.model_dump(exclude_none=True) for m in body.messages],
                                  writer=request.state.grant.writer())
        if fresh:
            history.place(thread_id, tenant=body.tenant, channel=body.channel)
        _freeze_loaded(request)
        metrics().added.inc(result.added)
        return Added(ids=list(result.every_id), added=result.added, quoted=list(result.quoted))

    @api.post("/v1/threads/{thread_id}/context", response_model=Context)
    @in_pool
    def context(thread_id: ScopedThread, body: ContextRequest, request: Request) -> dict[str, Any]:
        """The prompt for the next turn: send `messages` to any chat-completions API."""
        result = history_of(request).ask(  # History checks the request once (too long: 413)
            thread_id, body.request, strategy=body.strategy, budget=_budget(body.budget),
            system_prompt=body.system_prompt, scope=body.scope, readable=request.state.grant.allows)
        _freeze_loaded(request)
        data = render.ask_dict(result)
        metrics().prompt_tokens.inc(data["prompt_tokens"])
        metrics().full_tokens.inc(data["full_history_tokens"])
        metrics().cached_tokens.inc(data["cached_tokens"] or 0)
        return {"messages": data["messages"], "prompt_tokens": data["prompt_tokens"],
                "full_tokens": data["full_history_tokens"], "budget_tokens": data["budget_tokens"],
                "cached_tokens": data["cached_tokens"],
                "strategy": data["strategy"], "keyword": data["keyword"], "retrieved": data["retrieved"],
                "recent_message_ids": data["recent_message_indices"], "llm_calls": data["llm_calls"],
                "notes": data["notes"], "elsewhere": data.get("elsewhere", [])}

    @api.get("/v1/threads", response_model=list[ThreadSummary])
    @in_pool
    def threads(request: Request) -> list[dict[str, Any]]:
        """Every stored thread the token may see, with its message count and time span."""
        grant = request.state.grant
        return [render.thread_dict(i) for i in history_of(request).threads() if grant.allows(i.thread_id)]

    @api.get("/v1/threads/{thread_id}/log")
    @in_pool
    def turn_log(thread_id: ScopedThread, request: Request,
                 limit: Annotated[int | None, Query(ge=1, le=10_000)] = None) -> list[dict[str, Any]]:
        """What each context request sent: keyword, retrieved stretches, scores, tokens, timings."""
        return history_of(request).log(thread_id, limit)

    @api.delete("/v1/threads/{thread_id}", response_model=Forgotten)
    @in_pool
    def forget_thread(thread_id: ScopedThread, request: Request) -> Forgotten:
        """Forget the thread: texts, vectors, summaries, statements and the log."""
        history = history_of(request)
        if not history.store.has_thread(thread_id):
            raise NotFoundError(f"no stored thread {thread_id!r}")
        return Forgotten(thread=thread_id, forgotten=history.forget(thread_id))

    @api.delete("/v1/threads/{thread_id}/messages/{message_id}", response_model=Forgotten)
    @in_pool
    def forget_message(thread_id: ScopedThread, message_id: Annotated[str, Path(max_length=MAX_KEY)], request: Request,
                       by: Literal["id", "key"] = "id") -> Forgotten:
        """Forget one message, by the id the POST returned or (`?by=key`) by the caller's own id."""
        history = history_of(request)
        mid = history.store.id_of(thread_id, scoped_key(message_id, request.state.grant.writer())) if by == "key" \
            else _int_id(message_id)
        if not history.store.messages(thread_id, ids=[mid]):
            raise NotFoundError(f"thread {thread_id!r} holds no message {mid}")
        return Forgotten(thread=thread_id, forgotten=history.forget(thread_id, ids=[mid]))

    return api


_SCHEME = HTTPBearer(auto_error=False, description="SEMHIST_API_TOKEN or a scoped token, when the server has them")


# async: no I/O, so no trip through the thread pool; a default, not Annotated: the annotation
# is a string here and would name a local
async def _bearer(request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(_SCHEME)) -> Grant:
    """The grant of the request's token, kept on the request for the routes' thread checks."""
    grant = request.app.state.access.grant(credentials.credentials if credentials else None)
    if grant is None:
        raise Unauthorized(errors.NO_TOKEN)
    request.state.grant = grant
    return grant


def _token_of(request: Request) -> str | None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _everything(request: Request) -> None:
    if not request.state.grant.everything:
        raise Forbidden("every thread's figures need the operator's token (SEMHIST_API_TOKEN)")


def _freeze_loaded(request: Request) -> None:
    """Move thread states just read from the store out of the cyclic collector's sight.

    A worker holds about ten tracked objects per stored message; with 100k messages a full
    collection took 0.4 s, and it ran every few seconds under load (the p95 of every route).
    That state lives until evicted and holds no reference cycles (freed by reference counts
    when dropped, measured), so the collector has nothing to find in it."""
    loads = history_of(request).parts.states.loads
    before = getattr(request.app.state, "frozen_at", 0)
    if loads != before:
        request.app.state.frozen_at = loads
        metrics().loads.inc(max(0, loads - before))
        gc.freeze()


def _warm(history: History) -> None:
    """Load the embedder and open the store before the first request; a store that is down
    now is reported and retried on each request (answered 503 until it is back)."""
    history.parts.embedder.embed(["warm up"], "query")
    try:
        history.store.totals()
    except BackendError as exc:
        log.warning("the store is not answering yet: %s", exc)


def _budget(value: int | str | None) -> Budget | None:
    if value is None:
        return None
    try:
        return Budget.parse(str(value))
    except ConfigError as exc:
        raise InputError(str(exc), field="budget") from exc


def _int_id(text: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise InputError(f"message id must be the number the POST returned, got {text!r} "
                         "(use ?by=key for your own id)", field="message_id")
    value = int(text)
    if value >= 2**63:
        raise NotFoundError(f"no message {text}")
    return value


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("semhist")
    except PackageNotFoundError:
        return "0"


def app_from_env() -> FastAPI:
    """For `uvicorn --factory` and each worker of `semhist serve --workers N`: settings from
    the SEMHIST_* environment the parent process set."""
    return create_app(Settings.load())
