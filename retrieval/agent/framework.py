"""`semhist agent --framework-agent FILE.py:NAME`: answers written by a Microsoft Agent Framework
agent (its own model client, instructions and tools), with semhist as its memory.

The host keeps the conversation as for every answer (`ThreadMemory` stores each message and
reply under Teams' ids); the agent gets semhist's prompt through the `SemhistContextProvider`
handed to the factory, which stores nothing itself here. The tool calls and results of a run are
stored between the request and the answer, so later turns can find what a tool said.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

from semhist.kernel.errors import BackendError, ConfigError, missing_extra

from semhist import History


def load_factory(spec: str) -> Callable[[Any], Any]:
    """The function `NAME` of `FILE.py:NAME` (or `package.module:NAME`)."""
    where, _, name = spec.rpartition(":")
    if not where or not name.isidentifier():
        raise ConfigError(f"--framework-agent takes FILE.py:NAME or module:NAME, not {spec!r}")
    if where.endswith(".py"):
        path = Path(where)
        if not path.is_file():
            raise ConfigError(f"--framework-agent: no file {where}")
        found = importlib.util.spec_from_file_location(f"semhist_framework_agent_{path.stem}", path)
        module = importlib.util.module_from_spec(found)
        try:
            found.loader.exec_module(module)
        except ImportError as exc:
            raise ConfigError(f"--framework-agent: {where} needs {exc.name or exc} (pip install "
                              "'semhist[teams,agent-framework]')") from exc
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as exc:
            raise ConfigError(f"--framework-agent: cannot import {where}: {exc}") from exc
    factory = getattr(module, name, None)
    if not callable(factory):
        raise ConfigError(f"--framework-agent: {where} has no function {name}")
    return factory


class FrameworkAnswers:
    """An Agent Framework agent made by `factory(memory)`, answering one turn at a time."""

    def __init__(self, history: History, factory: Callable[[Any], Any], *, strategy: str = "blocks",
                 budget: Any = None):
        from semhist.integrations.agent_framework import SemhistContextProvider

        self.history = history
        # the host stores the turn; the provider only reads
        self.memory = SemhistContextProvider(history, budget=budget, strategy=strategy,
                                             store_inputs=False, store_outputs=False)
        self.agent = factory(self.memory)
        if self.memory not in (getattr(self.agent, "context_providers", None) or ()):
            raise ConfigError("--framework-agent: the agent must use the memory it is given: "
                              "Agent(client, ..., context_providers=[memory])")

    async def answer(self, thread: str, text: str) -> str:
        """The agent's answer to `text` on `thread` (stored already); its tool calls and
        results stored. The framework's and its client's errors come back as BackendError."""
        try:
            from agent_framework import AgentSession
        except ImportError as exc:
            raise missing_extra("agent-framework-core", "agent-framework") from exc
        try:
            response = await self.agent.run(text, session=AgentSession(session_id=thread))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the framework's errors and its model client's are their own types
            raise BackendError(f"the agent's run failed: {type(exc).__name__}: {exc}") from exc
        await asyncio.to_thread(self._store_tools, thread, response.messages)
        return response.text or ""

    def _store_tools(self, thread: str, messages: list[Any]) -> None:
        from semhist.integrations import _shared
        from semhist.integrations.agent_framework import to_openai

        tools = [m for m in messages if any(c.type in ("function_call", "function_result") for c in m.contents)]
        keyed = []
        for m in to_openai(tools):
            # a call's id is unique to it: a redelivered turn stores its calls once
            call = m.get("tool_call_id") or (m.get("tool_calls") or [{}])[0].get("id")
            keyed.append({**m, "id": m.get("id") or (f"call:{call}:{m['role']}" if call else None)})
        if keyed:
            _shared.store(self.history, thread, keyed)
