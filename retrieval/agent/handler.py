"""The agent's turn: build the prompt from the conversation's stored history, answer it with
the configured LLM, and the two commands a user needs (`/forget`, `/sources`).

`SemhistAgent(history).register(app)` adds these routes to any `AgentApplication`; pair it
with `ThreadMemory` on the adapter, which stores the messages.
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

from semhist.kernel.errors import SemhistError
from semhist.kernel.settings import Budget

from .. import render
from semhist import History
from semhist import ANSWER_GUIDANCE, answer_reminder
from .memory import NO_STORE, thread_id_for

FORGET = re.compile(r"\s*/forget\s*", re.IGNORECASE)
SOURCES = re.compile(r"\s*/sources\s*", re.IGNORECASE)


def _stretch(first: int, last: int, score: float | None, start: str | None, end: str | None) -> str:
    when = f"{(start or '?')[:16]} .. {(end or '?')[:16]}".replace("T", " ")
    why = "in the named time" if score is None else f"score {score:.2f}"
    return f"- {when} (messages {first}-{last}, {why})"


def sources_text(head: str, stretches: list[str]) -> str:
    if not stretches:
        return head + " the recent messages only."
    return "\n".join([head + " these stretches of the conversation:"] + stretches)


class SemhistAgent:
    def __init__(self, history: History, *, strategy: str = "blocks", budget: Budget | None = None,
                 system_prompt: str | None = None, timeout: float | None = None, answer_tokens: int | None = None):
        self.history, self.strategy, self.budget = history, strategy, budget
        self.system_prompt = system_prompt or history.settings.system_prompt or ANSWER_GUIDANCE
        # semhist's guidance comes with its reminder before the request, as in `ask --answer`;
        # an operator's own system prompt is left to stand alone
        self.remind = self.system_prompt == ANSWER_GUIDANCE
        self.timeout = timeout or history.settings.llm_timeout  # for the whole turn's LLM work
        self.answer_tokens = answer_tokens or history.settings.answer_tokens

    def register(self, app: Any) -> None:
        """Add the routes to an `AgentApplication` (commands first; every other message is answered)."""
        app.message(FORGET)(self.on_forget)
        app.message(SOURCES)(self.on_sources)
        app.message()(self.on_message)

    async def on_message(self, context: Any, state: Any) -> None:
        text = (context.activity.text or "").strip()
        if not text:
            await context.send_activity("I can only read text messages.")
            return
        await context.send_activity(await self.reply(thread_id_for(context.activity.conversation.id), text))

    async def on_forget(self, context: Any, state: Any) -> None:
        thread = thread_id_for(context.activity.conversation.id)
        context.turn_state[NO_STORE] = True  # the confirmation must not start the thread again
        try:
            n = await asyncio.to_thread(self.history.forget, thread)
        except SemhistError as exc:
            await context.send_activity(f"Sorry, I could not forget this conversation: {exc}")
            return
        await context.send_activity(f"Forgotten: this conversation's {n} stored messages, their search index, "
                                    "summaries and log.")

    async def on_sources(self, context: Any, state: Any) -> None:
        thread = thread_id_for(context.activity.conversation.id)
        try:
            turns = await asyncio.to_thread(self.history.log, thread, 1)
        except SemhistError:
            turns = []
        if not turns:
            await context.send_activity("I have not answered anything in this conversation yet.")
            return
        turn = turns[-1]
        await context.send_activity(sources_text(
            f"My last answer (to \"{turn['request'][:80]}\") was built from",
            [_stretch(*b["block_messages"], b["score"], b.get("start"), b.get("end")) for b in turn["retrieved"]]))

    async def reply(self, thread: str, text: str) -> str:
        """The answer to `text`, or an apology saying what failed; never raises, never waits
        much past `timeout`."""
        start = time.monotonic()
        try:
            # the request's own LLM work (keyword, compaction) counts against the turn's deadline
            result = await asyncio.wait_for(asyncio.to_thread(
                self.history.ask, thread, text, strategy=self.strategy, budget=self.budget,
                system_prompt=self.system_prompt, closing=answer_reminder(text) if self.remind else None),
                self.timeout * 2)
        except SemhistError as exc:
            return f"Sorry, I could not read this conversation's history: {exc}"
        except asyncio.TimeoutError:
            return f"Sorry, reading this conversation's history took longer than {self.timeout * 2:g} s."
        llm = self.history.parts.llm
        if llm is None:
            found = sources_text("The answer would be built from", [
                _stretch(b["message_indices"][0], b["message_indices"][-1], b["score"], b["start"], b["end"])
                for b in render.ask_dict(result)["retrieved"]])
            return ("I cannot answer: no language model is configured (set OPENAI_BASE_URL and SEMHIST_LLM_MODEL, "
                    "or the AZURE_OPENAI_* variables).\n" + found)
        remaining = max(1.0, self.timeout - (time.monotonic() - start))
        try:
            answer = await asyncio.wait_for(asyncio.to_thread(llm.chat, list(result.prompt.messages),
                                                              max_tokens=self.answer_tokens), remaining)
        except (SemhistError, asyncio.TimeoutError) as exc:
            reason = str(exc) or f"no answer within {self.timeout:g} s"
            return f"Sorry, the language model did not answer ({reason}). Please try again in a moment."
        return answer.strip() or "Sorry, the language model returned an empty answer."

