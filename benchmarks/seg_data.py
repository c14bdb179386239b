"""The threads with human topic boundaries that seg_train.py fits on and segmentation.py
scores: read from our JSON Lines sets and from the two public test sets as their authors
publish them (not shipped here; docs/guides/evaluation.md says where to get them).

- `tiage`: TIAGE train and dev (MIT), in ../shared/data/tiage.jsonl. Its test split is
  `anno_test.json` of github.com/HuiyuanXie/tiage (`data/personachat/anno/test/`), read by
  `tiage_anno`: each utterance with "1" where the topic shifts at it.
- `jmultiwoz`: JMultiWOZ threads (CC BY-SA 4.0); the first `TUNE_THREADS` are the tune half, as
  everywhere in benchmarks/ (ltr_model.TUNE), the rest held.
- DialSeg711 (Xu et al., AAAI 2021; English MultiWOZ and KVRET dialogues joined): `dialseg_711.json`
  of github.com/lxing532/Dialogue-Topic-Segmenter (`data/eval/`), read by `dialseg711`; its 704
  dialogues marked "test" (the other 7 were that repository's dev set).

Both public files carry no roles and no times: speakers alternate, user first, and every
message is one second after the one before (a chat without pauses).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

from semhist.indexers.loader import load
from semhist.kernel.errors import InputError
from semhist.kernel.model import Message
from semhist.segscore import gold_starts

TUNE_THREADS = 36  # JMultiWOZ's tune half (ltr_model.TUNE)
START = datetime(2024, 1, 1, 9, 0, 0)


@dataclass(frozen=True)
class Labelled:
    """A thread and where its human topic segments start (positions in `messages`)."""

    id: str
    messages: tuple[Message, ...]
    starts: tuple[int, ...]


def from_jsonl(path: Path, split: str | None = None) -> list[Labelled]:
    """Threads of one of our sets with `topic_segments`; `split` keeps TIAGE's `train` or `dev`."""
    gold = gold_starts(path)
    splits = {}
    if split:
        with path.open(encoding="utf-8") as f:
            splits = {row["id"]: row.get("split") for row in map(json.loads, f)}
    return [Labelled(t.id, t.messages, _positions(t.messages, gold[t.id])) for t in load(path).threads
            if t.id in gold and (split is None or splits.get(t.id) == split)]


def _positions(messages: tuple[Message, ...], starts: list[int]) -> tuple[int, ...]:
    """File positions of segment starts as positions in `messages` (the loader leaves out a
    message it cannot keep, such as an empty one: a segment starts at its next message)."""
    where = [m.index for m in messages]
    return tuple(sorted({next((p for p, i in enumerate(where) if i >= s), len(where)) for s in starts} - {len(where)}))


def _chat(id_: str, texts: list[str], starts: list[int]) -> Labelled:
    messages = tuple(Message(i, "user" if i % 2 == 0 else "assistant", text, START + timedelta(seconds=i))
                     for i, text in enumerate(texts))
    return Labelled(id_, messages, tuple(sorted({0, *starts})))


def tiage_anno(path: Path) -> list[Labelled]:
    """TIAGE's own annotation file: {id: [[utterance, label], ...]}, label "1" where a topic starts."""
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
        return [_chat(f"tiage_{split_id}", [u for u, _ in turns], [i for i, (_, label) in enumerate(turns) if label == "1"])
                for split_id, turns in rows.items()]
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        raise InputError(f"{path}: not TIAGE's anno_*.json ({{id: [[utterance, label], ...]}}): {exc}") from None


def dialseg711(path: Path) -> list[Labelled]:
    """DialSeg711 as lxing532/Dialogue-Topic-Segmenter publishes it: a list of
    {dial_id, utterances, segments (lengths), set}; its `test` dialogues."""
    try:
        out = []
        for row in json.loads(path.read_text(encoding="utf-8")):
            if row.get("set", "test") != "test":
                continue
            starts, at = [], 0
            for length in row["segments"]:
                starts.append(at)
                at += int(length)
            out.append(_chat(f"dialseg_{row['dial_id']}", list(row["utterances"]), starts))
        return out
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise InputError(f"{path}: not DialSeg711's dialseg_711.json ([{{utterances, segments}}, ...]): {exc}") from None


def squeeze(messages: tuple[Message, ...]) -> tuple[Message, ...]:
    """The same messages one second apart from the first one's time (no pauses), in its zone."""
    first = next((m.timestamp for m in messages if m.timestamp), START.replace(tzinfo=timezone.utc))
    return tuple(replace(m, timestamp=first + timedelta(seconds=i)) for i, m in enumerate(messages))


def squeezed(item: Labelled) -> Labelled:
    """The same thread with every message one second after the one before: no pauses."""
    return replace(item, messages=squeeze(item.messages))
