"""How the API's routes run and what they take: plain functions in the app's thread pools, and
a thread id from the path only if the request's token may reach it."""

from __future__ import annotations

import asyncio
import functools
from typing import Annotated

from fastapi import Depends, Path, Request

from semhist import History
from .schemas import THREAD_ID_PATTERN

ThreadId = Annotated[str, Path(pattern=THREAD_ID_PATTERN, max_length=256, description="e.g. a Teams conversation.id")]


def run_on(pool_name: str):
    """A route's plain function, run in one of the app's pools (FastAPI sees the same parameters)."""

    def decorate(handler):
        @functools.wraps(handler)
        async def run(*args, **kwargs):
            pool = getattr(kwargs["request"].app.state, pool_name)
            return await asyncio.get_running_loop().run_in_executor(pool, functools.partial(handler, *args, **kwargs))

        return run

    return decorate


in_pool = run_on("pool")


def scoped_thread(thread_id: ThreadId, request: Request) -> str:
    """A thread id from the path, if the request's token may reach it (403 otherwise)."""
    return request.state.grant.check(thread_id)


# every route with a thread in its path takes it through here
ScopedThread = Annotated[str, Depends(scoped_thread)]


def history_of(request: Request) -> History:
    return request.app.state.history
