"""Answers that outlast Teams' patience: streamed in 1:1 chats, sent proactively elsewhere.

Teams expects the reply to its POST within about 15 s; the packaged model on two cores takes
30-90 s. In a personal (1:1) chat the SDK's `streaming_response` shows an informative update at
once, then the text as the model produces it (Teams takes a chunk about every second), and the
final message at `end_stream`. Only that final message is a `message` activity, so the thread
stores the answer once (ThreadMemory keeps message activities). Teams streams only in 1:1 chats:
in group chats and channels the agent shows typing, and an answer not ready within `ACK_AFTER`
seconds is acknowledged in the turn and sent later as a proactive message (stored then).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from semhist.kernel.errors import SemhistError

from .host import _sdk
from .memory import NO_STORE

log = logging.getLogger("semhist.agent")

INFORMATIVE = "Reading this conversation's history…"
ACK_AFTER = 5.0  # seconds: Teams wants the turn's reply within about 15
ACK = "Working on it: I will answer here in a moment."
_END = object()
_LATER: set[asyncio.Task] = set()  # answers being written after their turn ended (kept from the GC)


def streams(activity: Any) -> bool:
    """A Teams 1:1 chat whose replies go through the connector (not collected by the caller)."""
    channel = getattr(activity.channel_id, "channel", activity.channel_id)
    conversation = activity.conversation
    return (str(channel) == "msteams" and conversation is not None
            and getattr(conversation, "conversation_type", None) == "personal"
            and activity.delivery_mode not in ("expectReplies", "stream"))


async def stream_reply(agent: Any, context: Any, thread: str, text: str) -> None:
    """Stream the answer to `text`; an apology (not stored) when there is none."""
    response = context.streaming_response
    response.queue_informative_update(INFORMATIVE)
    start = time.monotonic()
    # a framework agent's run is answered whole (its tool loop decides when the text starts)
    prompt = None if agent.framework is not None else await agent.prompt(thread, text)
    llm = agent.history.parts.llm
    if prompt is None or isinstance(prompt, str) or not hasattr(llm, "stream"):
        answer, answered = (prompt, False) if isinstance(prompt, str) else await agent.reply(thread, text)
        context.turn_state[NO_STORE] = not answered
        response.queue_text_chunk(answer)
        await response.end_stream()
        return
    said, failure = await _relay(llm, prompt, agent, response, agent.timeout - (time.monotonic() - start))
    if failure is not None or not said.strip():
        context.turn_state[NO_STORE] = True  # a cut-off or missing answer is not history
        response.queue_text_chunk(("\n\n" if said else "") + (agent.no_answer(failure) if failure else
                                                             "Sorry, the language model returned an empty answer."))
    await response.end_stream()


async def _relay(llm: Any, prompt: Any, agent: Any, response: Any, remaining: float) -> tuple[str, BaseException | None]:
    """The model's text, chunk by chunk into the stream, within `remaining` seconds."""
    loop, queue = asyncio.get_running_loop(), asyncio.Queue()

    def produce() -> None:
        try:
            for delta in llm.stream(list(prompt.messages), max_tokens=agent.answer_tokens, timeout=max(1.0, remaining)):
                loop.call_soon_threadsafe(queue.put_nowait, delta)
        except SemhistError as exc:
            loop.call_soon_threadsafe(queue.put_nowait, exc)
        finally:
            loop.call_soon_threadsafe(queue.put_nowait, _END)

    worker = asyncio.ensure_future(asyncio.to_thread(produce))
    said, deadline = "", time.monotonic() + max(1.0, remaining)
    try:
        while True:
            item = await asyncio.wait_for(queue.get(), max(0.1, deadline - time.monotonic()))
            if item is _END:
                return said, None
            if isinstance(item, BaseException):
                return said, item
            said += item
            response.queue_text_chunk(item)
    except asyncio.TimeoutError as exc:
        worker.cancel()  # the thread ends with its HTTP call's own timeout
        return said, exc


def replies_later(activity: Any) -> bool:
    """Replies go through the connector (not collected by the caller), so one can come later."""
    return activity.delivery_mode not in ("expectReplies", "stream") and bool(activity.service_url)


async def reply_in_time(agent: Any, context: Any, thread: str, text: str, app_id: str) -> None:
    """Typing at once; the answer in the turn when it is ready within ACK_AFTER seconds, else an
    acknowledgement now and the answer as a proactive message when it is (stored then, once)."""
    await context.send_activity(context.activity.__class__(type="typing"))
    work = asyncio.ensure_future(agent.reply(thread, text))
    done, _ = await asyncio.wait({work}, timeout=ACK_AFTER)
    if done:
        answer, answered = work.result()
        context.turn_state[NO_STORE] = not answered
        await context.send_activity(answer)
        return
    context.turn_state[NO_STORE] = True  # the acknowledgement is about the bot
    await context.send_activity(ACK)
    later = asyncio.ensure_future(_send_later(agent, context.adapter, app_id, context.activity, thread, work))
    _LATER.add(later)
    later.add_done_callback(_LATER.discard)


async def _send_later(agent: Any, adapter: Any, app_id: str, incoming: Any, thread: str, work: asyncio.Future) -> None:
    answer, answered = await work

    async def send(context: Any) -> None:
        context.turn_state[NO_STORE] = True  # stored below, with the key of the message it answers
        await context.send_activity(answer)

    continuation = incoming.get_conversation_reference().get_continuation_activity()
    try:
        if app_id:
            await adapter.continue_conversation(app_id, continuation, send)
        else:  # --anonymous (local development): no registration to get a token for
            await adapter.continue_conversation_with_claims(_sdk()["ClaimsIdentity"](), continuation, send)
    except Exception as exc:  # the SDK's connector errors are its own types; the turn is long over
        log.warning("%s: the answer to message %s could not be sent: %s", thread, incoming.id, exc)
        return
    if answered:
        reply = {"role": "assistant", "content": answer, "name": getattr(incoming.recipient, "name", None),
                 "id": f"{incoming.id}:reply:0" if incoming.id else None}
        try:
            await asyncio.to_thread(agent.history.add_many, thread, [reply])
        except SemhistError as exc:
            log.warning("%s: could not store the answer to message %s: %s", thread, incoming.id, exc)
