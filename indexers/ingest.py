"""Build time against the store: mask, tokenize, embed and append messages; close blocks.

An append costs one embedding plus O(1) work: the store hands back only the open tail
(the block still growing), the segmenter closes what it can there with the thread's drift
history, and closed blocks are never read, re-segmented or re-embedded again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from datetime import datetime, timedelta

import numpy as np

from .embed import PASSAGE, Embedder, embed_or_fail
from .lexical import tokenize
from semhist.kernel.errors import InputError
from semhist.kernel.model import Message, embedding_text, message_text
from .pii import RULES, Masker, identifiers, mask_message, masker_from_setting
from .segment import Segmenter, drift_history
from .store import AppendResult, ClosedBlock, NewMessage, SQLStore, StaleRules, StoredMessage
from semhist.kernel.tokens import count_message


@dataclass(frozen=True)
class IngestResult:
    added: int
    skipped: int  # already stored (same source key)
    ids: tuple[int, ...] = ()  # of the messages added
    writes: tuple[AppendResult, ...] = field(default=(), repr=False)
    every_id: tuple[int, ...] = field(default=(), repr=False)  # of each input message, stored before or now
    quoted: tuple[int, ...] = ()  # positions whose operator role was stored as quoted history (kernel/writers.py)


def source_key(position: int, msg: Message) -> str:
    """Identifies a message of an input file, so ingesting the file again adds nothing; a
    file that grew adds only its new messages."""
    stamp = msg.timestamp.isoformat() if msg.timestamp else ""
    parts = f"\x00{json.dumps(msg.verbatim, sort_keys=True, ensure_ascii=False)}" if msg.verbatim else ""
    return hashlib.sha256(f"{position}\x00{msg.role}\x00{msg.name or ''}\x00{stamp}\x00{msg.content}{parts}"
                          .encode()).hexdigest()


def _message(stored: StoredMessage, index: int) -> Message:
    return Message(index, stored.role, stored.content, stored.timestamp, stored.name, stored.tool_calls,
                   stored.tool_call_id, stored.verbatim, writer=stored.writer)


def message_terms(m: Message) -> tuple[str, ...]:
    """What the lexical index holds of a message: none for system messages, never retrieved."""
    return tuple(tokenize(message_text(m))) if m.role != "system" else ()


def pii_rules(value: str | None) -> tuple[str, ...]:
    """The rule names a `pii` setting (or a thread's stored choice) stands for."""
    masker = masker_from_setting(value)
    return tuple(rule.name for rule in masker.rules) if masker else ()


@lru_cache(maxsize=16)  # a handful of rule sets ever: not one Masker per ask
def masker_of(rules: tuple[str, ...]) -> Masker | None:
    return Masker(rules) if rules else None


def check_identifiers(thread_id: str, keys: Sequence[str | None], masker: Masker,
                      messages: Sequence[Message] = (), **more: str | None) -> None:
    """With masking on, an identifier holding personal data is refused: the thread id, a
    caller's message key, the identifiers the messages carry (`pii.identifiers`: tool-call ids,
    the call a tool result answers, file ids) and any other identifier stored with a thread
    (`more`: its tenant, its channel). Identifiers are stored, listed, logged, matched and
    echoed as they are, so they cannot be masked (the proxy makes its ids from an OpenAI `user`
    as keyed digests instead). One rule for every identifier: a field added later passes
    through here. The refusal quotes the value masked, never as sent."""
    named = [("thread_id", None, thread_id), *(("id", i, k) for i, k in enumerate(keys)),
             *((field_name, m.index, value) for m in messages for field_name, value in identifiers(m)),
             *((name, None, value) for name, value in more.items())]
    for field_name, index, value in named:
        if value and masker(value) != value:
            where = f"message {index}, field {field_name!r}:" if index is not None else field_name.replace("_", " ")
            raise InputError(f"{where} {masker(value)!r} holds personal data, which this thread's masking (--pii) "
                             "keeps out of the store: name it without (e.g. a digest)", index=index, field=field_name)


class Ingestor:
    """Writes messages to the store. Masking belongs to the thread: the rules a thread was
    written with are stored on it, and every later write (whatever this process's `pii`
    setting) masks with them and any this process adds."""

    def __init__(self, store: SQLStore, embedder: Embedder, segmenter: Segmenter,
                 pii: str | None = None, batch_size: int = 256):
        self.store = store
        self.embedder = embedder
        self.segmenter = segmenter
        self.rules = pii_rules(pii)
        self.batch_size = batch_size

    def thread_rules(self, stored: str | None) -> tuple[str, ...]:
        """This process's rules and a thread's stored ones (`Marker.pii`), in the built-in order."""
        wanted = set(self.rules) | set(pii_rules(stored))
        return tuple(name for name in RULES if name in wanted)  # registration order: cards first

    def masker(self, stored: str | None) -> Masker | None:
        return masker_of(self.thread_rules(stored))

    def segment_tail(self, tail: list[StoredMessage], history: tuple[float, ...]
                     ) -> tuple[list[ClosedBlock], tuple[float, ...]]:
        """Segment the open tail; every block but the last is closed for good, and the drift
        history moves past them."""
        if not tail:
            return [], history
        msgs = [_message(m, i) for i, m in enumerate(tail)]
        dim = next((len(m.vector) for m in tail if m.vector is not None), 0)
        vectors = None
        if dim:
            vectors = np.zeros((len(tail), dim), dtype=np.float32)
            for i, m in enumerate(tail):
                if m.vector is not None:
                    vectors[i] = m.vector
        found = self.segmenter.segment(msgs, vectors, history)
        blocks = found[:-1]
        history = drift_history(history, vectors, [b.message_ids for b in blocks], self.segmenter.drift_window)
        return [ClosedBlock(tuple(tail[p].id for p in b.message_ids), b.tokens, b.parts, b.cause, after.cause)
                for b, after in zip(blocks, found[1:])], history

    def prepare(self, messages: Sequence[Message], keys: Sequence[str | None],
                masker: Masker | None = None) -> list[NewMessage]:
        """Masked, tokenized and embedded, ready to store. System messages are not embedded:
        they are never retrieved (they stay in every prompt)."""
        masked = [mask_message(m, masker) for m in messages] if masker else list(messages)
        searchable = [i for i, m in enumerate(masked) if m.role != "system"]
        vectors = embed_or_fail(self.embedder, [embedding_text(masked[i]) for i in searchable], PASSAGE) \
            if searchable else []
        by_pos = dict(zip(searchable, vectors))
        return [NewMessage(m.role, m.content, m.timestamp, m.name, m.tool_calls, m.tool_call_id, key,
                           message_terms(m), by_pos.get(i),
                           count_message(m.to_openai()), m.verbatim, m.writer)
                for i, (m, key) in enumerate(zip(masked, keys))]

    def append(self, thread_id: str, messages: Sequence[Message], keys: Sequence[str | None] | None = None,
               progress: Callable[[int], None] | None = None, manifest: dict | None = None) -> IngestResult:
        """Store messages in batches (each batch is one transaction: a crash loses at most the
        batch in flight, and running again completes the rest). `manifest` is written with
        the first batch, so a write that fails leaves no empty thread behind."""
        keys = list(keys) if keys is not None else [None] * len(messages)
        masker = self.masker(self.store.pii(thread_id)) if len(messages) > self.batch_size else None
        if masker:  # each batch checks its own too; this keeps a refusal in a later one from leaving the first stored
            check_identifiers(thread_id, keys, masker, messages)
        ids: list[int] = []
        every: list[int] = []
        writes: list[AppendResult] = []
        for start in range(0, len(messages), self.batch_size):
            batch, batch_keys = messages[start:start + self.batch_size], keys[start:start + self.batch_size]
            known = self.store.existing_keys(thread_id, [k for k in batch_keys if k])
            todo = [(m, k) for m, k in zip(batch, batch_keys) if not k or k not in known]
            added: tuple[int, ...] = ()
            if todo:
                write = self._store(thread_id, todo, manifest)
                manifest = None
                writes.append(write)
                added = write.ids
                ids.extend(added)
            every.extend(self._every_id(thread_id, batch_keys, known, todo, added))
            if progress:
                progress(len(batch))
        return IngestResult(len(ids), len(messages) - len(ids), tuple(ids), tuple(writes), tuple(every))

    def _store(self, thread_id: str, todo: list, manifest: dict | None) -> AppendResult:
        try:
            return self._store_with(self.thread_rules(self.store.pii(thread_id)), thread_id, todo, manifest)
        except StaleRules:  # another writer turned masking on meanwhile: mask with its rules too
            return self._store_with(self.thread_rules(self.store.pii(thread_id)), thread_id, todo, manifest)

    def _store_with(self, rules: tuple[str, ...], thread_id: str, todo: list, manifest: dict | None) -> AppendResult:
        masker = masker_of(rules)
        if masker:
            check_identifiers(thread_id, [k for _, k in todo], masker, [m for m, _ in todo])
        rows = self.prepare([m for m, _ in todo], [k for _, k in todo], masker)
        return self.store.append(thread_id, rows, self.embedder.id, self.segment_tail,
                                 manifest=manifest, pii=",".join(rules) or None)

    def _every_id(self, thread_id: str, keys: Sequence[str | None], known: dict[str, int],
                  todo: list, added: tuple[int, ...]) -> list[int]:
        """The id of each message of a batch, in order: stored before (by key) or just now."""
        if len(added) != len(todo):
            # another writer stored some of these keys between our check and our insert
            known = self.store.existing_keys(thread_id, [k for k in keys if k])
            taken = set(known.values())
            added = tuple(i for i in added if i not in taken)
        fresh = iter(added)
        return [known[k] if k and k in known else next(fresh) for k in keys]

    def reembed(self, thread_id: str, progress: Callable[[int], None] | None = None) -> int:
        """Embed and tokenize every stored message again with this ingestor's embedder and
        today's tokenizer (after a model change, or new tokenizer rules), then segment the
        thread again with the new vectors; its blocks' terms are indexed anew as they close."""
        stored = [m for m in self.store.messages(thread_id) if m.role != "system"]
        for start in range(0, len(stored), self.batch_size):
            batch = stored[start:start + self.batch_size]
            messages = [_message(m, 0) for m in batch]
            vectors = embed_or_fail(self.embedder, [embedding_text(m) for m in messages], PASSAGE)
            self.store.set_derived(thread_id, [(s.id, v, message_terms(m))
                                               for s, m, v in zip(batch, messages, vectors)], self.embedder.id)
            if progress:
                progress(len(batch))
        self.store.resegment(thread_id, self.segment_tail)
        return len(stored)


def cutoff(days: float, now: datetime) -> datetime:
    return now - timedelta(days=days)
