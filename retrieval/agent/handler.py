"""The agent's turn: build the prompt from the conversation's stored history, answer it with
the configured LLM, and the two commands a user needs (`/forget`, `/sources`).

`SemhistAgent(history).register(app)` adds these routes to any `AgentApplication`; pair it
with `ThreadMemory` on the adapter, which stores the messages.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timezone
from typing import Any

from semhist.kernel.errors import NotFoundError, SemhistError
from semhist.kernel.budget import Budget

from .. import render
from semhist import History
from semhist import ANSWER_GUIDANCE, answer_reminder
from .streaming import replies_later, reply_in_time, stream_reply, streams
from .memory import FORGET, NO_STORE, SOURCES, ThreadMemory, activity_text, channel_data, said, thread_id_for

log = logging.getLogger("semhist.agent")
WELCOME = ("Hello! I keep this conversation's history and answer from it, however long ago something was said. "
           "Commands: /sources (what my last answer was built from), /forget (forget this conversation).")


def _event_type(activity: Any) -> str | None:
    return channel_data(activity, "eventType") or channel_data(activity, "event_type")


def _from_self(activity: Any) -> bool:
    sender, bot = activity.from_property, activity.recipient
    return sender is not None and bot is not None and sender.id == bot.id



def _stretch(count: int, score: float | None, start: str | None, end: str | None) -> str:
    """A retrieved stretch as a user can find it in the chat: its dates and its length (store
    row ids mean nothing there: "messages 27-27" in a 9-message thread)."""
    first, last = (start or "?")[:16].replace("T", " "), (end or "?")[:16].replace("T", " ")
    when = first if first == last else f"{first} .. {last[11:] if last[:10] == first[:10] else last}"
    why = "in the named time" if score is None else f"score {score:.2f}"
    return f"- {when} ({count} message{'s' if count != 1 else ''}, {why})"


def sources_text(head: str, stretches: list[str]) -> str:
    if not stretches:
        return head + " the recent messages only."
    return "\n".join([head + " these stretches of the conversation:"] + stretches)


class SemhistAgent:
    def __init__(self, history: History, *, strategy: str = "blocks", budget: Budget | None = None,
                 system_prompt: str | None = None, timeout: float | None = None, answer_tokens: int | None = None,
                 app_id: str = "", framework: Any = None):
        """`app_id`: the Azure Bot registration's client id, which proactive answers are sent as
        ("" without one: local development). `framework`: a `FrameworkAnswers` whose agent
        writes the answers instead of the configured LLM (framework.py)."""
        self.history, self.strategy, self.budget, self.app_id = history, strategy, budget, app_id
        self.framework = framework
        self.system_prompt = system_prompt or history.settings.system_prompt or ANSWER_GUIDANCE
        # semhist's guidance comes with its reminder before the request, as in `ask --answer`;
        # an operator's own system prompt is left to stand alone
        self.remind = self.system_prompt == ANSWER_GUIDANCE
        self.timeout = timeout or history.settings.llm_timeout  # for the whole turn's LLM work
        self.answer_tokens = answer_tokens or history.settings.answer_tokens

    def register(self, app: Any) -> None:
        """Add the routes to an `AgentApplication` (commands first; every other message is
        answered), the welcome, and an answer to every invoke (unrouted, the SDK says 501 and
        Teams shows "Something went wrong")."""
        app.message(FORGET)(self.on_forget)
        app.message(SOURCES)(self.on_sources)
        app.message()(self.on_message)
        # by activity type: the SDK's message_update selector reads channel_data["event_type"],
        # while Teams sends channelData.eventType
        app.activity("messageUpdate")(self.on_update)
        app.activity("messageDelete")(self.on_delete)
        app.conversation_update("membersAdded")(self.on_members_added)
        app.conversation_update("membersRemoved")(self.on_members_removed)
        app.activity("invoke")(self.on_invoke)

    async def on_message(self, context: Any, state: Any) -> None:
        activity = context.activity
        if _from_self(activity):
            return  # its own message, echoed back by a channel: stored, never answered
        text = said(activity)
        if not text and getattr(activity, "value", None):
            context.turn_state[NO_STORE] = True
            await context.send_activity("Thanks, noted.")  # a card submission: stored as its values
            return
        if not text:
            context.turn_state[NO_STORE] = True  # what the bot says about itself is not history
            await context.send_activity("I can only read text messages.")
            return
        thread = thread_id_for(activity.conversation.id)
        if streams(activity):  # a Teams 1:1 chat: the answer as the model writes it
            await stream_reply(self, context, thread, text)
            return
        if replies_later(activity):  # a group chat or channel: typing, then the answer or an ack
            await reply_in_time(self, context, thread, text, self.app_id)
            return
        answer, answered = await self.reply(thread, text)
        if not answered:
            context.turn_state[NO_STORE] = True
        await context.send_activity(answer)

    async def on_update(self, context: Any, state: Any) -> None:
        """An edit (or an undelete) replaces the stored message at its place in time: the old
        text is forgotten and never retrieved again. A message never stored (sent before the
        bot joined, or deleted before) is stored now."""
        activity = context.activity
        if _event_type(activity) not in ("editMessage", "undeleteMessage") or not activity.id:
            return
        thread, text = thread_id_for(activity.conversation.id), activity_text(activity)
        try:
            if text and await asyncio.to_thread(self.history.edit, thread, activity.id, text) is None:
                await asyncio.to_thread(self.history.add_many, thread, [ThreadMemory.incoming(
                    activity, activity.timestamp or datetime.now(timezone.utc))])
        except SemhistError as exc:
            log.warning("%s: could not apply the edit of message %s: %s", thread, activity.id, exc)

    async def on_delete(self, context: Any, state: Any) -> None:
        """A deleted message is forgotten at once (text, vectors, blocks, statements quoting it)."""
        activity = context.activity
        thread = thread_id_for(activity.conversation.id)
        try:
            gone = await asyncio.to_thread(self.history.store.id_of, thread, activity.id)
            await asyncio.to_thread(self.history.forget, thread, ids=[gone])
        except NotFoundError:
            return  # never stored, or forgotten already
        except SemhistError as exc:
            log.warning("%s: could not forget deleted message %s: %s", thread, activity.id, exc)

    async def on_members_added(self, context: Any, state: Any) -> None:
        bot = context.activity.recipient
        if any(m.id == bot.id for m in context.activity.members_added or () if bot is not None):
            context.turn_state[NO_STORE] = True
            await context.send_activity(WELCOME)

    async def on_members_removed(self, context: Any, state: Any) -> None:
        """The bot removed from a conversation: its stored thread stays (retention and `forget`
        decide when it goes), so that adding the bot again finds the conversation it knew."""
        bot = context.activity.recipient
        if any(m.id == bot.id for m in context.activity.members_removed or () if bot is not None):
            log.info("removed from conversation %s: its thread is kept", thread_id_for(context.activity.conversation.id))

    async def on_invoke(self, context: Any, state: Any) -> None:
        """Any invoke (a card's Action.Execute, a message extension): 200, nothing to say."""
        from .host import _sdk

        sdk = _sdk()
        await context.send_activity(sdk["Activity"](type="invokeResponse", value=sdk["InvokeResponse"](status=200)))

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
        context.turn_state[NO_STORE] = True  # about the bot, not the conversation
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
            [_stretch(b.get("messages") or b["block_messages"][1] - b["block_messages"][0] + 1, b["score"],
                      b.get("start"), b.get("end")) for b in turn["retrieved"]]))

    async def reply(self, thread: str, text: str) -> tuple[str, bool]:
        """The answer to `text` (and True), or an apology saying what failed (and False: not
        history); never raises, never waits much past `timeout`."""
        if self.framework is not None:
            try:
                answer = await asyncio.wait_for(self.framework.answer(thread, text), self.timeout)
            except (SemhistError, asyncio.TimeoutError) as exc:
                return self.no_answer(exc), False
            return (answer.strip(), True) if answer.strip() else (EMPTY_ANSWER, False)
        start = time.monotonic()
        prompt = await self.prompt(thread, text)
        if isinstance(prompt, str):
            return prompt, False
        remaining = max(1.0, self.timeout - (time.monotonic() - start))
        try:
            answer = await asyncio.wait_for(asyncio.to_thread(self.history.parts.llm.chat, list(prompt.messages),
                                                              max_tokens=self.answer_tokens), remaining)
        except (SemhistError, asyncio.TimeoutError) as exc:
            return self.no_answer(exc), False
        return (answer.strip(), True) if answer.strip() else (EMPTY_ANSWER, False)

    async def prompt(self, thread: str, text: str) -> Any:
        """The prompt for `text` (semhist's `Prompt`), or an apology (a str) saying why there is
        none: the history could not be read in time, or no language model is configured."""
        try:
            # the request's own LLM work (keyword, compaction) counts against the turn's deadline
            result = await asyncio.wait_for(asyncio.to_thread(
                self.history.ask, thread, text, strategy=self.strategy, budget=self.budget,
                system_prompt=self.system_prompt, closing=answer_reminder(text) if self.remind else None,
                scope="auto"),  # a channel's reply chain reaches its channel's others when asked to
                self.timeout * 2)
        except SemhistError as exc:
            return f"Sorry, I could not read this conversation's history: {exc}"
        except asyncio.TimeoutError:
            return f"Sorry, reading this conversation's history took longer than {self.timeout * 2:g} s."
        if self.history.parts.llm is None:
            found = sources_text("The answer would be built from", [
                _stretch(len(b["message_indices"]), b["score"], b["start"], b["end"])
                for b in render.ask_dict(result)["retrieved"]])
            return ("I cannot answer: no language model is configured (set OPENAI_BASE_URL and SEMHIST_LLM_MODEL, "
                    "or the AZURE_OPENAI_* variables).\n" + found)
        return result.prompt

    def no_answer(self, exc: BaseException) -> str:
        reason = str(exc) or f"no answer within {self.timeout:g} s"
        return f"Sorry, the language model did not answer ({reason}). Please try again in a moment."


EMPTY_ANSWER = "Sorry, the language model returned an empty answer."
