"""Compaction: the rolling summary and the structured list of user statements, read from the
store and written back to it, keyed by message ids.

The summary is incremental: the previous summary plus the turns that aged out of the recent
window since, never the whole history again. The structured list reads each user message
once, ever, in order; its progress is stored with the statement it found, so a replica or a
later ask continues where the last one stopped. Both spend at most a given number of LLM
calls per ask: a backlog (a long thread switched to `structured`) is caught up over asks.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence

from semhist.kernel.errors import BackendError
from semhist.kernel.model import head_and_tail
from semhist.indexers.store import Key, NoteRecord, SQLStore, StoredMessage, SummaryRecord
from semhist.indexers.store.rows import now_iso
from semhist.kernel.tokens import count_text

from ..llm import LLMClient
from ..pipeline.select import MemoryResult, message_line

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
PAGE = 256  # messages read from the store at a time


# A pasted document would fill the summarizer's context and, quoted whole, every prompt after it.
LINE_CHARS = 4_000
QUOTE_CHARS = 1_000


# A request is no statement: the packaged model filed 「おすすめのラーメン屋を教えてください。」 as
# a decision. Sentences that ask without a question mark, by their ending (ja) or opening (en).
_ASK_JA = re.compile(r"(ください|下さい|くださいませ|教えて|おしえて|ませんか|でしょうか|ですか|ますか|かな|かしら|"
                     r"お願いします|お願い|お願いいたします|まとめて|調べて|探して|見せて|選んで|考えて|頼みます)"
                     r"[ね。．.!！\s]*$")
_ASK_EN = re.compile(r"^(please\s+)?(can|could|would|will)\s+you\b|^(please\s+)?(tell|show|give|help|remind)\s+me\b|"
                     r"^please\s+(recommend|suggest|find|list|summari[sz]e|explain|let\s+me\s+know)\b|"
                     r"^(recommend|suggest|summari[sz]e|explain|list)\b(?!\s+of\b)", re.I)


# ...unless it says something on the way: 「予算は5000円なので、…教えてください。」 states the budget.
_STATES_TOO = re.compile(r"[、，,:：;；]|ので|から|けど|けれど")


# A greeting or thanks states nothing, and an interjection before a request is no clause of its
# own: the model filed "Morning! Can you help me plan the infrastructure…?" as a decision.
_SOCIAL = re.compile(r"^(hi|hello|hey|morning|good (morning|afternoon|evening)|thanks|thank you|ok|okay|great|"
                     r"cool|sure|こんにちは|こんばんは|おはよう(ございます)?|ありがとう(ございます)?|どうも|はい|了解)"
                     r"(\s+(there|all|again|so much))?[\s!！.。,、~〜]*$", re.I)
_INTERJECTION = re.compile(r"^(ねえ|ねぇ|あの|あのさ|えっと|じゃあ|hey|so|ok|okay|well|hi|hello)[、,]\s*", re.I)


def _asks(sentence: str) -> bool:
    if sentence.endswith(("?", "？")):
        return True
    sentence = _INTERJECTION.sub("", sentence)
    return bool(_ASK_JA.search(sentence) or _ASK_EN.search(sentence)) and not _STATES_TOO.search(sentence)


def only_questions(text: str) -> bool:
    """True when every sentence of the message asks (a question or a request) or greets:
    nothing stated to remember. ("Our servers are in Frankfurt. How do I read the logs?"
    still states something.)"""
    sentences = [s.strip() for s in _SENTENCE.findall(text) if s.strip()]
    return bool(sentences) and all(_SOCIAL.match(s) or _asks(s) for s in sentences)


class Compactor:
    def __init__(self, llm: LLMClient, store: SQLStore, chunk_tokens: int = 1200):
        self.llm = llm
        self.store = store
        self.chunk_tokens = chunk_tokens

    def _call(self, result: MemoryResult, messages: list[dict], **kwargs) -> str:
        began = time.perf_counter()
        try:
            return self.llm.chat(messages, **kwargs)
        finally:
            ms = (time.perf_counter() - began) * 1000
            result.llm_calls += 1
            result.llm_ms += ms
            result.call_ms.append(ms)

    def summarize_through(self, thread_id: str, upto: Key, result: MemoryResult, *, max_tokens: int = 400,
                          calls: int = 16) -> SummaryRecord | None:
        """Extend the stored summary towards `upto` (inclusive), chunk by chunk, with at most
        `calls` LLM calls; the summary is kept under `max_tokens` so it fits the budget it
        serves. Operator instructions (system messages) are never handed to the summarizer."""
        current = self.store.summary(thread_id)
        while True:
            page = self.store.between(thread_id, current.upto if current else None, upto, limit=PAGE)
            full = len(page) == PAGE
            chunks = _chunks([m for m in page if m.role != "system"], self.chunk_tokens)
            if full and len(chunks) > 1:
                chunks = chunks[:-1]  # the last one may go on in the next page
            for chunk in chunks:
                if calls <= 0:
                    result.backlog += 1
                    return current
                current = self._summarize(thread_id, current, chunk, result, max_tokens)
                calls -= 1
            if not full or not chunks:
                return current

    def _summarize(self, thread_id: str, current: SummaryRecord | None, chunk: list[StoredMessage],
                   result: MemoryResult, max_tokens: int) -> SummaryRecord:
        lines = "\n".join(head_and_tail(message_line(m), LINE_CHARS) for m in chunk if m.role != "system")
        # A length the model can meet: bullet points, not words (a 1.5B model cannot count
        # Japanese words); room to finish its last one, then cut back to whole lines.
        bullets = max(3, max_tokens // 45)
        prompt = (f"Summary so far:\n{current.text if current else '(none yet)'}\n\nNew turns:\n{lines}\n\n"
                  f"Write the updated summary: at most {bullets} short bullet points, one line each.")
        began = time.perf_counter()
        reply = self._call(result, [{"role": "system", "content": SUMMARY_PROMPT},
                                    {"role": "user", "content": prompt}], max_tokens=max_tokens * 3 // 2 + 32)
        text = whole_lines(reply, max_tokens, limit=max_tokens * 3 // 2 + 32)
        if not text:
            raise BackendError(f"{self.llm.model} returned an empty summary")
        covered = (current.covered_tokens if current else 0) + sum(m.tokens for m in chunk if m.role != "system")
        first = current.first_ts if current else chunk[0].sort_ts
        record = SummaryRecord(chunk[-1].key, text, self.llm.model, covered, now_iso(), first, chunk[-1].sort_ts)
        self.store.put_summary(thread_id, record, (time.perf_counter() - began) * 1000)
        result.compacted = True
        result.summaries += 1
        return record

    def extract_through(self, thread_id: str, upto: Key, result: MemoryResult, *, calls: int = 16) -> None:
        """Read each user message up to `upto` that the list has not read, with at most
        `calls` LLM calls. Questions and empty messages are passed over without a call."""
        written = done = self.store.notes_progress(thread_id)
        while True:
            page = self.store.between(thread_id, done, upto, role="user", limit=PAGE)
            for m in page:
                if m.content.strip() and not only_questions(m.content):
                    if calls <= 0:
                        result.backlog += 1
                        page = []
                        break
                    self._extract(thread_id, m, result)
                    calls -= 1
                    written = m.key
                done = m.key
            if len(page) < PAGE:
                break
        if done is not None and done != written:
            self.store.record_extraction(thread_id, done, None, self.llm.model, 0.0)

    def _extract(self, thread_id: str, m: StoredMessage, result: MemoryResult) -> None:
        known = self.store.notes(thread_id)[-10:]
        reply = self._call(result, [{"role": "system", "content": NOTES_PROMPT},
                                    {"role": "user", "content": _notes_request(head_and_tail(m.content, LINE_CHARS),
                                                                               known)}],
                           json_schema=NOTES_SCHEMA, max_tokens=120)
        note = parse_note(reply, {n.id for n in known})
        row = (m.id, m.sort_ts, note[0], note[1], head_and_tail(m.content, QUOTE_CHARS), note[2]) if note else None
        self.store.record_extraction(thread_id, m.key, row, self.llm.model, result.call_ms[-1])
        result.extracted += 1


_ENDED = re.compile(r"[.!?。！？」）)\]]$")


def whole_lines(text: str, max_tokens: int, limit: int | None = None) -> str:
    """`text` cut back to whole lines within `max_tokens`, never mid-word. The last line of a
    reply that the token `limit` may have stopped (near the limit, or a stub much shorter than
    the other lines, without a sentence end) is dropped: it was 「- 明」 once."""
    lines = [line.rstrip() for line in text.strip().splitlines() if line.strip()]
    if len(lines) > 1 and not _ENDED.search(lines[-1]):
        typical = sorted(len(line) for line in lines[:-1])[(len(lines) - 1) // 2]
        near = limit is not None and count_text("\n".join(lines)) >= limit * 0.9
        if near or len(lines[-1]) < 0.4 * typical:
            lines.pop()
    kept: list[str] = []
    for line in lines:
        if count_text("\n".join(kept + [line])) > max_tokens:
            if not kept:  # one long line: up to its last sentence or clause end that fits
                kept.append(_clip(line, max_tokens))
            break
        kept.append(line)
    return "\n".join(k for k in kept if k).strip()


def _clip(line: str, max_tokens: int) -> str:
    for pattern in (r"[.!?。！？]", r"[、,;；]|\s"):
        ends = [m.end() for m in re.finditer(pattern, line)]
        for end in reversed(ends):
            if count_text(line[:end]) <= max_tokens:
                return line[:end].rstrip(" 、,;；")
    return ""


def _notes_request(text: str, known: Sequence[NoteRecord]) -> str:
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


def _chunks(messages: Sequence[StoredMessage], limit: int) -> list[list[StoredMessage]]:
    chunks: list[list[StoredMessage]] = []
    size = limit + 1
    for m in messages:
        cost = count_text(head_and_tail(message_line(m), LINE_CHARS)) + 1 if m.role != "system" else 0
        if size + cost > limit and (not chunks or chunks[-1]):
            chunks.append([])
            size = 0
        chunks[-1].append(m)
        size += cost
    return [c for c in chunks if c]
