"""Segmentation: group consecutive messages into blocks that are retrieved as a unit."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from .errors import ConfigError
from .model import Block, Message
from .tokens import count_message


class Segmenter(Protocol):
    """Splits a thread's messages into blocks (message ids are positions in `messages`)."""

    def segment(self, messages: Sequence[Message]) -> list[Block]: ...


class TimeGapSegmenter:
    """A pause longer than `gap_seconds` starts a block; so does exceeding `max_block_tokens`.

    System messages are never put in a block (the system prompt is never retrieved), and a
    size cut never separates a tool result from the call before it. Messages without a
    timestamp are grouped by size alone.
    """

    def __init__(self, gap_seconds: float = 300.0, max_block_tokens: int = 400):
        self.gap_seconds = gap_seconds
        self.max_block_tokens = max_block_tokens

    def segment(self, messages: Sequence[Message]) -> list[Block]:
        groups: list[list[int]] = []
        sizes: list[int] = []
        current: list[int] = []
        size = 0
        previous: Message | None = None
        for pos, msg in enumerate(messages):
            if msg.role == "system":
                continue
            tokens = count_message(msg.to_openai())
            if current and self._starts_block(previous, msg, size + tokens):
                groups.append(current)
                sizes.append(size)
                current, size = [], 0
            current.append(pos)
            size += tokens
            previous = msg
        if current:
            groups.append(current)
            sizes.append(size)
        return [
            Block(i, tuple(ids), messages[ids[0]].timestamp, messages[ids[-1]].timestamp, sizes[i])
            for i, ids in enumerate(groups)
        ]

    def _starts_block(self, previous: Message | None, msg: Message, size_with_msg: int) -> bool:
        if msg.role == "tool":  # a result stays with its call
            return False
        if previous and previous.timestamp and msg.timestamp:
            if (msg.timestamp - previous.timestamp).total_seconds() > self.gap_seconds:
                return True
        return size_with_msg > self.max_block_tokens


SEGMENTERS: dict[str, Callable[..., Segmenter]] = {"time-gap": TimeGapSegmenter}


def get_segmenter(name: str, *, gap_seconds: float, max_block_tokens: int) -> Segmenter:
    try:
        factory = SEGMENTERS[name]
    except KeyError:
        raise ConfigError(f"unknown segmenter {name!r}; valid: {', '.join(sorted(SEGMENTERS))}") from None
    return factory(gap_seconds=gap_seconds, max_block_tokens=max_block_tokens)
