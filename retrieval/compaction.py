"""Compaction: the rolling summary and the structured list of user statements.

The summary is incremental: the previous summary plus the turns that aged out of the recent
window since, never the whole history again. It runs only when the prompt would pass a share
(default 75%) of its budget, and then summarizes everything older than the recent turns at
once, so compaction happens in large steps and the prompt prefix stays stable in between.

The structured list is extracted separately (JSON-schema answer) from the user's own
messages and kept verbatim; the summarizer never rewrites it.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from indexers.errors import BackendError
from indexers.memory import MemoryStore, Note, Summary, _now
from indexers.model import Thread
from indexers.tokens import count_text

from .llm import LLMClient
from .select import context_line

SUMMARY_PROMPT = (
    "You maintain the running summary of a long chat so that it can continue without the old "
    "turns. Update the summary with the new turns. Keep the user's goals, preferences and "
    "constraints, decisions, open questions, and every number, date, place and name exactly as "
    "said. Add nothing that was not said; no advice, no commentary. Write in the language of the "
    "conversation, as short factual bullet points."
)
NOTES_PROMPT = (
    "Classify the user's message for a memory of what the user said. kind: constraint (a limit, "
    "budget, allergy, something to avoid or a rule for the answers), preference (likes, dislikes), "
    "decision (a choice made), fact (about the user or their setup: place, name, number, date, "
    "device, schedule), or none (greetings, questions, small talk). text: the thing to remember, "
    "short. replaces: the id of a Known item this message changes or contradicts, else null. "
    "Answer JSON only."
)
# One message per call: a 1.5B model given a batch listed only some of them (2 of 6 probe
# batches complete); one at a time it found 23 of 23 probe statements (benchmarks/probes.md).
NOTES_SCHEMA = {
    "type": "object",
    "properties": {
        "kind": {"type": "string", "enum": ["constraint", "preference", "decision", "fact", "none"]},
        "text": {"type": "string", "maxLength": 100},
        "replaces": {"type": ["integer", "null"]},
    },
    "required": ["kind", "text", "replaces"],
}
_SENTENCE = re.compile(r"[^.!?。！？]+[.!?。！？]*")


def only_questions(text: str) -> bool:
    """True when every sentence of the message is a question: nothing stated to remember.
    ("Our servers are in Frankfurt. How do I read the logs?" still states something.)"""
    sentences = [s.strip() for s in _SENTENCE.findall(text) if s.strip()]
    return bool(sentences) and all(s.endswith(("?", "？")) for s in sentences)


@dataclass
class MemoryResult:
    """What compaction gives a strategy, and what it cost."""

    summary: Summary | None = None
    notes: tuple[Note, ...] = ()
    llm_calls: int = 0
    llm_ms: float = 0.0
    compacted: bool = False
    problems: list[str] = field(default_factory=list)


class Compactor:
    def __init__(self, llm: LLMClient, store: MemoryStore, chunk_tokens: int = 1200):
        self.llm = llm
        self.store = store
        self.chunk_tokens = chunk_tokens

    def summarize_through(self, thread: Thread, upto: int, result: MemoryResult,
                          max_tokens: int = 400) -> Summary | None:
        """Extend the stored summary to cover messages[0..upto], chunk by chunk; the summary
        is kept under `max_tokens` so that it fits the budget it serves."""
        current = self.store.summary(thread)
        start = current.upto + 1 if current else 0
        positions = [p for p in range(start, upto + 1) if thread.messages[p].role != "system"]
        for chunk in _chunks(thread, positions, self.chunk_tokens):
            lines = "\n".join(context_line(thread, p) for p in chunk)
            prompt = (f"Summary so far:\n{current.text if current else '(none yet)'}\n\nNew turns:\n{lines}\n\n"
                      f"Write the updated summary in at most {max(20, max_tokens * 2 // 3)} words.")
            began = time.perf_counter()
            text = self.llm.chat([{"role": "system", "content": SUMMARY_PROMPT},
                                  {"role": "user", "content": prompt}], max_tokens=max_tokens).strip()
            ms = (time.perf_counter() - began) * 1000
            result.llm_calls += 1
            result.llm_ms += ms
            if not text:
                raise BackendError(f"{self.llm.model} returned an empty summary")
            current = Summary(chunk[-1], text, self.llm.model, _now())
            self.store.put_summary(thread, current, ms)
            result.compacted = True
        return current

    def extract_through(self, thread: Thread, upto: int, result: MemoryResult) -> None:
        """Classify each user statement the list has not seen, up to position `upto`.

        Questions are skipped without a call; progress is stored after every message, so an
        interrupted extraction resumes where it stopped.
        """
        done = self.store.notes_upto(thread)
        for p in range(done + 1, upto + 1):
            msg = thread.messages[p]
            if msg.role != "user" or not msg.content.strip() or only_questions(msg.content):
                continue
            known = self.store.notes(thread)[-10:]
            began = time.perf_counter()
            reply = self.llm.chat([{"role": "system", "content": NOTES_PROMPT},
                                   {"role": "user", "content": _notes_request(msg.content, known)}],
                                  json_schema=NOTES_SCHEMA, max_tokens=120)
            ms = (time.perf_counter() - began) * 1000
            result.llm_calls += 1
            result.llm_ms += ms
            note = parse_note(reply, {n.id for n in known})
            self.store.add_notes(thread, p, [(p, *note)] if note else [], self.llm.model, ms, 1)
        if upto > self.store.notes_upto(thread):
            self.store.add_notes(thread, upto, [], self.llm.model, 0.0, 0)


def _notes_request(text: str, known: Sequence[Note]) -> str:
    head = "Known: " + ("; ".join(f"(id {n.id}) {n.kind}: {n.text}" for n in known) if known else "none")
    return f"{head}\n\nUser message: {text}"


def parse_note(reply: str, known_ids: set[int]) -> tuple[str, str, int | None] | None:
    """(kind, text, replaces) from the model's JSON, or None for 'none' or an unusable reply."""
    try:
        data = json.loads(reply[reply.index("{"):reply.rindex("}") + 1])
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("kind") not in ("constraint", "preference", "decision", "fact"):
        return None
    replaces = data.get("replaces") if data.get("replaces") in known_ids else None
    return data["kind"], str(data.get("text") or "").strip()[:200], replaces


def _chunks(thread: Thread, positions: Sequence[int], limit: int) -> list[list[int]]:
    chunks: list[list[int]] = []
    size = limit + 1
    for p in positions:
        cost = count_text(context_line(thread, p)) + 1
        if size + cost > limit and (not chunks or chunks[-1]):
            chunks.append([])
            size = 0
        chunks[-1].append(p)
        size += cost
    return [c for c in chunks if c]
