"""semhist as LangChain 1.x agent middleware (extra `semhist[langchain]`).

`langchain.agents.create_agent` replaces LangGraph's `create_react_agent` and its
`pre_model_hook`/`post_model_hook`; its memory goes in as middleware:

    agent = create_agent(model, tools, system_prompt="...", middleware=[SemhistMiddleware(history, budget=2000)])
    agent.invoke({"messages": [...]}, {"configurable": {"thread_id": "team-1"}})

Around each model call it stores the state's messages not stored yet and hands the model
semhist's prompt for the last human message instead of all of them (the agent's system prompt
first, counted in the budget; in a tool loop the current turn ends the prompt whole); after the
call it stores the reply. The graph state keeps every message, as with the hooks.
"""

from __future__ import annotations

import asyncio
from typing import Any

from semhist.kernel.errors import missing_extra

try:
    from langchain.agents.middleware import AgentMiddleware, ModelRequest
    from langgraph.config import get_config
except ImportError as exc:
    raise missing_extra("langchain", "langchain") from exc

from semhist import History
from . import _shared
from ._shared import BudgetLike
from .langchain import from_openai, log, store_state

__all__ = ["SemhistMiddleware"]


class SemhistMiddleware(AgentMiddleware):
    """Memory for `create_agent`: the thread is `config["configurable"][thread_id_key]`."""

    def __init__(self, history: History, *, thread_id_key: str = "thread_id", strategy: str = "blocks",
                 budget: BudgetLike = None, system_prompt: str | None = None):
        super().__init__()
        self.history, self.key, self.strategy = history, thread_id_key, strategy
        self.budget, self.system_prompt = _shared.as_budget(budget), system_prompt

    def _prompt(self, request: ModelRequest, config: Any) -> ModelRequest:
        thread_id, dicts = store_state(self.history, request.state, config, self.key)
        asked, turn = _shared.request_and_turn(dicts)
        system = self.system_prompt if self.system_prompt is not None else request.system_prompt
        prompt = _shared.prompt(self.history, thread_id, asked, turn=turn, strategy=self.strategy,
                                budget=self.budget, system_prompt=system, log=log)
        return request.override(messages=from_openai(prompt), system_message=None)  # the system prompt is in it

    def wrap_model_call(self, request: ModelRequest, handler):
        return handler(self._prompt(request, get_config()))

    async def awrap_model_call(self, request: ModelRequest, handler):
        return await handler(await asyncio.to_thread(self._prompt, request, get_config()))

    def after_model(self, state: Any, runtime: Any) -> None:
        store_state(self.history, state, get_config(), self.key)  # the reply, stored at once
        return None

    async def aafter_model(self, state: Any, runtime: Any) -> None:
        await asyncio.to_thread(store_state, self.history, state, get_config(), self.key)
        return None
