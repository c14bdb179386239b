"""What a developer reads to see what the bot saw (the web inspector at /ui calls only these and
the rest of the documented API): a thread's messages with their blocks, the blocks, its memory,
and every strategy's prompt for a request tried out. Behind the same tokens and scopes."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field

from semhist.kernel.errors import InputError, NotFoundError
from semhist.kernel.model import cause_fields
from semhist.kernel.budget import Budget
from semhist.kernel.settings import Settings

from .. import render
from .routing import ScopedThread, history_of, in_pool
from semhist import NEEDS_LLM, STRATEGIES


class SearchRequest(BaseModel):
    query: str = Field(min_length=1, max_length=2000, description="what to look for")
    k: int = Field(default=20, ge=1, le=200, description="how many messages")


class TryRequest(BaseModel):
    request: str = Field(min_length=1, description="the request to build prompts for")
    strategies: list[str] | None = Field(default=None, description="default: every strategy that needs no LLM "
                                                                    "(all of them when one is configured)")
    budget: str | None = Field(default=None, description="tokens (2000), a share (10%) or billed tokens (1000b)")


def _time(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, timezone.utc).isoformat()


def message_dict(m: Any) -> dict[str, Any]:
    out = {"id": m.id, "role": m.role, "name": m.name, "content": m.content, "tokens": m.tokens,
           "timestamp": m.timestamp.isoformat() if m.timestamp else None, "block": m.block_no}
    if m.tool_calls:
        out["tool_calls"] = list(m.tool_calls)
    if m.tool_call_id:
        out["tool_call_id"] = m.tool_call_id
    return out


def inspector_api(settings: Settings) -> APIRouter:
    api = APIRouter(tags=["inspect"])

    @api.get("/v1/threads/{thread_id}/messages")
    @in_pool
    def messages(thread_id: ScopedThread, request: Request, before: Annotated[int | None, Query(ge=1)] = None,
                 limit: Annotated[int, Query(ge=1, le=2000)] = 500) -> dict[str, Any]:
        """The thread's messages, newest `limit` (or those before message `before`), oldest first,
        each with its block (`null`: the open tail not yet closed into a block)."""
        store = history_of(request).store
        if not store.has_thread(thread_id):
            raise NotFoundError(f"no stored thread {thread_id!r}")
        if before is None:
            page = store.messages(thread_id, last=limit + 1)
        else:
            anchor = store.messages(thread_id, ids=[before])
            if not anchor:
                raise NotFoundError(f"thread {thread_id!r} holds no message {before}")
            page = store.earlier(thread_id, anchor[0].key, limit + 1)
        more = len(page) > limit
        return {"thread": thread_id, "messages": [message_dict(m) for m in page[-limit:]], "earlier": more}

    @api.get("/v1/threads/{thread_id}/blocks")
    @in_pool
    def blocks(thread_id: ScopedThread, request: Request) -> list[dict[str, Any]]:
        """The thread's closed blocks (time gaps, topic sub-segments within them by size), in
        order, each with why it starts and why the one after it does (`starts`, `ends`:
        model.cause_fields; the last block's `ends` is why the open tail starts)."""
        store = history_of(request).store
        if not store.has_thread(thread_id):
            raise NotFoundError(f"no stored thread {thread_id!r}")
        out, before = [], None
        for b in store.blocks(thread_id):
            starts = cause_fields(before.cut) if before and before.cut else (
                {"kind": "start"} if b.block_no == 0 else {"kind": "unknown"})
            if b.message_ids:
                out.append({"block": b.block_no, "first": b.message_ids[0], "last": b.message_ids[-1],
                            "messages": len(b.message_ids), "tokens": b.tokens, "parts": list(b.parts),
                            "starts": starts, "ends": cause_fields(b.cut) if b.cut else {"kind": "unknown"}})
            before = b
        return out

    @api.get("/v1/threads/{thread_id}/forgotten")
    @in_pool
    def forgotten(thread_id: ScopedThread, request: Request) -> list[dict[str, Any]]:
        """What was forgotten of the thread, oldest first: when, how many messages, the time
        they spanned and why (`forget`: by id, a Teams delete; `edit`: an earlier version;
        `before`: a date cut such as retention). Never what they said."""
        store = history_of(request).store
        if not store.has_thread(thread_id):
            raise NotFoundError(f"no stored thread {thread_id!r}")
        return [{"at": _time(r["at"]), "from": _time(r["first_ts"]), "to": _time(r["last_ts"]),
                 "messages": r["messages"], "reason": r["reason"]} for r in store.forgotten(thread_id)]

    @api.get("/v1/threads/{thread_id}/memory")
    @in_pool
    def memory(thread_id: ScopedThread, request: Request) -> dict[str, Any]:
        """The rolling summary (with the range it covers) and every statement kept, superseded
        ones included (`superseded_by`)."""
        store = history_of(request).store
        if not store.has_thread(thread_id):
            raise NotFoundError(f"no stored thread {thread_id!r}")
        s = store.summary(thread_id)
        summary = None if s is None else {"text": s.text, "from": _time(s.first_ts), "to": _time(s.upto_ts),
                                          "covered_tokens": s.covered_tokens, "model": s.model,
                                          "created_at": s.created_at}
        return {"summary": summary, "statements": [
            {"id": n.id, "kind": n.kind, "text": n.text, "quote": n.quote, "message": n.source_id,
             "at": _time(n.source_ts), "superseded_by": n.superseded_by}
            for n in store.notes(thread_id, active_only=False)]}

    @api.get("/v1/threads/{thread_id}/stats")
    @in_pool
    def thread_stats(thread_id: ScopedThread, request: Request) -> dict[str, Any]:
        """The thread's figures from its turn log (`semhist stats --thread`): asks, tokens sent
        against the whole history, prefix reuse, cached tokens, billed input, compactions."""
        from ..stats import stats

        store = history_of(request).store
        if not store.has_thread(thread_id):
            raise NotFoundError(f"no stored thread {thread_id!r}")
        report = stats(store, thread_id, settings.price_model)
        marker = store.marker(thread_id)
        return {"thread": thread_id, "tokens": marker.tokens if marker else None, **report["overall"]}

    @api.post("/v1/threads/{thread_id}/search")
    @in_pool
    def search(thread_id: ScopedThread, body: SearchRequest, request: Request) -> dict[str, Any]:
        """The thread's own hybrid search for `query`, best first: each message with its cosine
        (`dense`), its BM25 score (`lexical`, 0 when no term matched) and their fusion. Threads
        above `view_limit` messages are searched through candidate views, not here (422)."""
        from ..searching import hybrid_search

        history = history_of(request)
        if not history.store.has_thread(thread_id):
            raise NotFoundError(f"no stored thread {thread_id!r}")
        hits = hybrid_search(history, thread_id, body.query, body.k)
        return {"thread": thread_id, "query": body.query, "hits": [
            {**message_dict(h.message), "dense": h.dense, "lexical": h.lexical, "fused": h.fused} for h in hits]}

    @api.post("/v1/threads/{thread_id}/try")
    @in_pool
    def try_request(thread_id: ScopedThread, body: TryRequest, request: Request) -> dict[str, Any]:
        """What each strategy would send for `request`, side by side (`semhist compare`): the
        messages, tokens, billed input at a warm cache under the price model, and the ground
        truth kept when the thread carries it. Nothing is stored or logged."""
        history = history_of(request)
        if not history.store.has_thread(thread_id):
            raise NotFoundError(f"no stored thread {thread_id!r}")
        wanted = body.strategies or [s for s in STRATEGIES if history.parts.llm is not None or s not in NEEDS_LLM]
        unknown = [s for s in wanted if s not in STRATEGIES]
        if unknown:
            raise InputError(f"unknown strategies {unknown}; the strategies are {', '.join(STRATEGIES)}",
                             field="strategies")
        budget = Budget.parse(body.budget) if body.budget else None
        results = history.compare(thread_id, body.request, wanted, budget=budget, log_turn=False)
        rows = render.compare_rows(results, settings.price_model, settings.layout_for(budget))
        for row, result in zip(rows, results):
            row["messages"] = list(result.prompt.messages)
            row["retrieved"] = render.ask_dict(result)["retrieved"]
        return {"thread": thread_id, "request": body.request, "price_model": settings.price_model,
                "full_history_tokens": results[0].full_tokens if results else None, "strategies": rows,
                "skipped": [s for s in wanted if s not in {r.strategy for r in results}]}

    return api


class _Pages(StaticFiles):
    """The inspector's files, shipped in the package (no CDN): scripts only from here, so even
    a stored text that got into the page as markup could not run."""

    async def get_response(self, path: str, scope: Any) -> Any:
        response = await super().get_response(path, scope)
        response.headers["Content-Security-Policy"] = ("default-src 'self'; script-src 'self'; style-src 'self'; "
                                                       "img-src 'self' data:; frame-ancestors 'none'")
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        return response


def inspector_pages() -> StaticFiles:
    return _Pages(directory=Path(__file__).parent / "ui", html=True)
