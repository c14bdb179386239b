"""The Microsoft Agent Framework's own memory for benchmarks/peers.py (a module of that script,
not a script): `InMemoryHistoryProvider` holds the thread, a run's `compaction_strategy` cuts it
to the budget, and a chat client of the framework's own kind records what the model is sent;
`run_af` scores both variants as peers.py scores every method.

- af-window: `SlidingWindowStrategy(keep_last_groups=k)`, k the number of the thread's groups
  (the framework makes a text message a group of its own) that fit the budget on average: a
  window sized once, as it is configured, so some prompts overflow the budget.
- af-budget: `TokenBudgetComposedStrategy(token_budget=budget, strategies=[SlidingWindowStrategy])`:
  the same window, then the oldest groups left out until the prompt fits.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import agent_framework
from agent_framework._compaction import group_messages  # how its strategies count groups
from agent_framework import (Agent, AgentSession, BaseChatClient, ChatResponse, FunctionInvocationLayer,
                             InMemoryHistoryProvider, Message, SlidingWindowStrategy, TokenBudgetComposedStrategy)

from semhist.kernel.model import Thread, message_text
from semhist.kernel.tokens import count_message

from peers_scoring import Tallies, ask_all, costs, prompt_tokens, request_cost, timed

VERSION = agent_framework.__version__
METHODS = ("af-window", "af-budget")


class Counter:
    """semhist's count of one message, as the framework serializes it for a tokenizer."""

    def count_tokens(self, text: str) -> int:
        data = json.loads(text)
        said = "".join(c.get("text") or "" for c in data.get("contents") or ())
        return count_message({"role": data.get("role"), "content": said})


class Recording(FunctionInvocationLayer, BaseChatClient):
    """Answers "ok" and keeps the message ids it was sent (the thread's positions)."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[Message] = []

    def _inner_get_response(self, *, messages, stream, options, **kwargs):
        self.sent = list(messages)

        async def whole():
            return ChatResponse(messages=[Message("assistant", ["ok"])])
        return whole()


class AFMemory:
    """One thread in the framework's memory: `write` adds a message, `ask` gives the positions
    of the thread a run's prompt holds and the prompt's messages."""

    def __init__(self) -> None:
        self.client, self.counter = Recording(), Counter()
        # stores nothing of the runs: each request is asked of the same history
        self.agent = Agent(self.client, context_providers=[InMemoryHistoryProvider(store_inputs=False,
                                                                                   store_outputs=False)])
        self.session = AgentSession(session_id="peers")
        self.provider = self.agent.context_providers[0]
        self.state = self.session.state.setdefault(self.provider.source_id, {})
        self.loop = asyncio.new_event_loop()
        self.n = 0

    def write(self, thread: Thread, i: int) -> None:
        m = thread.messages[i]
        message = Message("assistant" if m.role == "assistant" else "user", [message_text(m)],
                          author_name=m.name, message_id=str(i))
        self.loop.run_until_complete(self.provider.save_messages("peers", [message], state=self.state))
        self.n += 1

    def ask(self, request: str, limit: int, window: int, budgeted: bool) -> tuple[set[int], list[dict[str, Any]]]:
        strategy = SlidingWindowStrategy(keep_last_groups=window)
        if budgeted:
            strategy = TokenBudgetComposedStrategy(token_budget=limit, tokenizer=self.counter, strategies=[strategy])
        self.loop.run_until_complete(self.agent.run(request, session=self.session, compaction_strategy=strategy,
                                                    tokenizer=self.counter))
        kept = {int(m.message_id) for m in self.client.sent if m.message_id and m.message_id.isdigit()}
        return kept, [{"role": m.role, "content": m.text} for m in self.client.sent]

    def close(self) -> None:
        self.loop.close()


def window_for(memory: AFMemory, costs: list[int], limit: int, request_cost: int) -> int:
    """The framework's turn groups (a text message is a group of its own, a tool call one with
    its results: `group_messages`) that fit the budget, on the thread's mean group."""
    groups = max(1, len(group_messages(memory.state["messages"])))
    return max(1, int((limit - request_cost) // max(1.0, sum(costs) / groups)))


def run_af(thread: Thread, t: Tallies) -> None:
    memory, cost = AFMemory(), costs(thread)
    for i in range(len(thread.messages)):
        _, ms = timed(memory.write, thread, i)
        for method in ("af-window", "af-budget"):
            t.writes[method, None].append(ms)
    for method in ("af-window", "af-budget"):
        ask_all(thread, t, [method], lambda request, limit: memory.ask(
            request, limit, window_for(memory, cost, limit, request_cost(request)), method == "af-budget"),
            lambda answer, request: (answer[0], prompt_tokens(answer[1])))
    memory.close()
