"""Adapter middleware that stores every message of a conversation in semhist.

Teams gives a bot no API to read its past messages: the bot keeps them itself. Add
`ThreadMemory(history)` to any Agents SDK adapter (`adapter.use(...)`): each incoming message
activity is stored before the agent's handlers run (thread = conversation.id, speaker =
from.name, time = activity.timestamp, key = activity.id, so a redelivered activity is stored
once), and each message the agent sends in that turn is stored as the assistant's.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from semhist.kernel.errors import SemhistError
from semhist.kernel.ids import thread_id_for
from semhist.kernel.model import Place

from semhist import History

log = logging.getLogger("semhist.agent")

# the agent's commands: to the bot, not part of the conversation (not stored)
FORGET = re.compile(r"\s*/forget\s*", re.IGNORECASE)
SOURCES = re.compile(r"\s*/sources\s*", re.IGNORECASE)
NO_STORE = "semhist.no_store"  # a handler sets this in turn_state: the replies of this turn are not kept
SENT = "semhist.sent"  # replies stored so far in this turn


_AT = re.compile(r"<at\b[^>]*>(.*?)</at>", re.IGNORECASE | re.DOTALL)
ADAPTIVE_CARD = "application/vnd.microsoft.card.adaptive"
FILE_INFO = "application/vnd.microsoft.teams.file.download.info"
CARD_TEXT_KEYS = ("title", "subtitle", "text", "label", "placeholder", "fallbackText")
ATTACHMENT_CHARS = 20_000  # of an inline text attachment kept (a long paste stays searchable, bounded)
_TAG = re.compile(r"<[^>]{0,500}>")


def said(activity: Any) -> str:
    """What the user said, as meant: the bot's @mention removed (it addresses the message, it
    is not part of it), other mentions kept as the names they are."""
    text = activity.text or ""
    bot = getattr(getattr(activity, "recipient", None), "id", None)
    for mention in activity.get_mentions() if hasattr(activity, "get_mentions") else ():
        if bot and mention.mentioned is not None and mention.mentioned.id == bot:
            pattern = re.escape(mention.text) if mention.text else rf"<at>{re.escape(mention.mentioned.name or '')}</at>"
            text = re.sub(pattern, " ", text, flags=re.IGNORECASE)
    return re.sub(r" {2,}", " ", _AT.sub(r"\1", text)).strip()


def activity_text(activity: Any) -> str:
    """The message's text, a card submission's values, and a line for each attachment (a
    picture or a file sent without words is still a turn of the conversation). Attachment URLs
    need the bot's token to fetch, so a model could not read them: they are named, not linked;
    an Adaptive Card is kept as its text."""
    lines = [said(activity)]
    value = getattr(activity, "value", None)
    if value and not lines[0]:  # an Action.Submit of a card: what the user filled in or chose
        lines.append(f"[card submitted: {_values(value)}]")
    for att in getattr(activity, "attachments", None) or ():
        kind = getattr(att, "content_type", None) or "file"
        if kind.startswith("text/html") and lines[0]:
            continue  # Teams repeats the text as HTML
        lines.append(_attachment(att, kind))
    return "\n".join(line for line in lines if line)


def _attachment(att: Any, kind: str) -> str:
    name, content = getattr(att, "name", None), getattr(att, "content", None)
    if kind == ADAPTIVE_CARD and isinstance(content, dict):
        text = " / ".join(_card_texts(content))
        return f"[card: {text}]" if text else "[card]"
    if kind == FILE_INFO and isinstance(content, dict):
        return f"[file {name or 'unnamed'} ({content.get('fileType') or 'file'})]"
    if isinstance(content, str) and content.strip() and kind.startswith(("text/", "application/json")):
        # the text came with the activity (inline, not behind a URL): kept, as a file's words
        text = " ".join(_TAG.sub(" ", content).split()) if kind.startswith("text/html") else content.strip()
        return f"[attachment {name or kind}]\n{text[:ATTACHMENT_CHARS]}"
    return f"[attachment {kind}: {name}]" if name else f"[attachment {kind}]"


def _card_texts(node: Any, depth: int = 0) -> list[str]:
    """The words of an Adaptive Card, in order (bounded: a card is user input too)."""
    if depth > 20:
        return []
    if isinstance(node, list):
        return [t for item in node[:200] for t in _card_texts(item, depth + 1)]
    if not isinstance(node, dict):
        return []
    texts = [node[k].strip() for k in CARD_TEXT_KEYS if isinstance(node.get(k), str) and node[k].strip()]
    if node.get("type") == "Fact" and isinstance(node.get("value"), str):
        texts.append(node["value"])
    return texts + [t for k, v in node.items() if isinstance(v, (dict, list)) for t in _card_texts(v, depth + 1)]


def _values(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}: {v}" for k, v in value.items() if k not in ("msteams",))[:2000]
    return str(value)[:2000]


def channel_data(activity: Any, *path: str) -> Any:
    """A value of the activity's channelData (a dict, or an object when the SDK parsed it)."""
    node = activity.channel_data
    for key in path:
        if node is None:
            return None
        node = node.get(key) if isinstance(node, dict) else getattr(node, key, None)
    return node


def place_of(activity: Any) -> Place:
    """Where the conversation belongs: its tenant, and for a channel's reply chain the channel
    (`channelData.channel.id` or `teamsChannelId`, else the conversation id without its
    `;messageid=` part). 1:1
    and group chats have no channel: their scope is their own thread."""
    conversation = activity.conversation
    tenant = getattr(conversation, "tenant_id", None) or channel_data(activity, "tenant", "id")
    channel = channel_data(activity, "channel", "id") or channel_data(activity, "teamsChannelId")
    if not channel and getattr(conversation, "conversation_type", None) == "channel":
        channel = conversation.id.split(";messageid=")[0]
    return Place(tenant if isinstance(tenant, str) and tenant else None,
                 channel if isinstance(channel, str) and channel else None)


# Threads whose place this process has recorded: one write per conversation, not per activity
# (bounded: a conversation seen again after it fell out is recorded again, a no-op).
PLACED = 4096


class ThreadMemory:
    """Agents SDK middleware (`on_turn(context, logic)`): keeps the conversation in `history`."""

    def __init__(self, history: History):
        self.history = history
        self._placed: OrderedDict[str, None] = OrderedDict()

    async def _place(self, thread: str, activity: Any) -> None:
        if thread in self._placed:
            self._placed.move_to_end(thread)
            return
        try:
            place = place_of(activity)
            if place.tenant or place.channel:
                await asyncio.to_thread(self.history.place, thread, tenant=place.tenant, channel=place.channel)
        except SemhistError as exc:  # the turn goes on: the thread stays where it was
            log.warning("%s: could not record its tenant and channel: %s", thread, exc)
            return
        self._placed[thread] = None
        if len(self._placed) > PLACED:
            self._placed.popitem(last=False)

    async def on_turn(self, context: Any, logic: Callable[[Any], Awaitable]) -> None:
        activity = context.activity
        if activity.type != "message" or activity.conversation is None:
            await logic(context)
            return
        thread = thread_id_for(activity.conversation.id)
        await self._place(thread, activity)
        stamp = activity.timestamp or datetime.now(timezone.utc)
        if not any(c.fullmatch(said(activity)) for c in (FORGET, SOURCES)):
            await self._store(thread, self.incoming(activity, stamp))

        async def on_send(ctx: Any, activities: list, send_next: Callable[[], Awaitable]):
            sent = await send_next()  # the user first; a reply that could not be sent is not kept as said
            if not ctx.turn_state.get(NO_STORE):
                for reply in (a for a in activities if a.type == "message" and activity_text(a)):
                    n = ctx.turn_state.get(SENT, 0)
                    ctx.turn_state[SENT] = n + 1
                    await self._store(thread, self._outgoing(reply, activity, stamp, n))
            return sent

        context.on_send_activities(on_send)
        await logic(context)

    @staticmethod
    def incoming(activity: Any, stamp: datetime) -> dict[str, Any]:
        """An incoming activity as the message to store."""
        sender, bot = activity.from_property, activity.recipient
        from_bot = sender is not None and bot is not None and sender.id == bot.id
        return {"role": "assistant" if from_bot else "user", "content": activity_text(activity),
                "name": sender.name if sender is not None and sender.name else None,
                "id": activity.id, "timestamp": stamp.isoformat()}

    @staticmethod
    def _outgoing(reply: Any, incoming: Any, stamp: datetime, n: int) -> dict[str, Any]:
        # after the message it answers even when the sender's clock runs ahead of ours
        when = max(datetime.now(timezone.utc), stamp + timedelta(milliseconds=1 + n))
        key = f"{incoming.id}:reply:{n}" if incoming.id else None  # a redelivered turn stores its reply once
        sender = reply.from_property
        return {"role": "assistant", "content": activity_text(reply), "id": key, "timestamp": when.isoformat(),
                "name": sender.name if sender is not None and sender.name else None}

    async def _store(self, thread: str, message: dict[str, Any]) -> None:
        if not message["content"]:
            log.info("%s: message %s is empty (no text, no attachment); not stored", thread, message["id"])
            return
        try:
            await asyncio.to_thread(self.history.add_many, thread, [message])
        except SemhistError as exc:
            # the turn goes on: the handler answers (or apologises) without this message stored
            log.warning("%s: could not store message %s: %s", thread, message["id"], exc)
