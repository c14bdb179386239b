"""The injection corpus (corpus.json) and what every prompt built from it must hold."""

from __future__ import annotations

import json
import re
import unicodedata
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from semhist.kernel.lookalikes import READS_AS
from semhist.kernel.quoting import FORMAT_CHARS, reserved, speaker
from semhist.kernel.writers import Writer, as_written

CORPUS = json.loads((Path(__file__).parent / "corpus.json").read_text())["cases"]
IDS = [c["id"] for c in CORPUS]
REQUEST = "What did we decide about the budget?"
# What a reader takes for < and >: what Unicode's confusables data reads so, and the brackets
# probes found that the data leaves out (angle brackets, ornaments, precedes, arrowheads).
_LESS = READS_AS["<"] + "〈⟨〈❬⧼❰≺˱"
_GREATER = READS_AS[">"] + "〉⟩〉❭⧽❱≻˲"
_CONTROL = re.compile(r"<[|｜]|\[/?INST\]|<</?SYS>>|</?s>|<(?:start|end)_of_turn>|\[/?SYSTEM_PROMPT\]", re.I)
_TAG = re.compile(r"<\s*/?\s*(retrieved_history|channel_history|conversation_summary|user_statements)\b", re.I)
_OPERATOR_LINE = re.compile(r"(system|developer)\b", re.I)


def marker(case: dict) -> str:
    return f"PLANTED-{case['id'].upper()}"


def planted(case: dict) -> list[dict[str, Any]]:
    """The case's message(s), its marker in place, as its writer's message is stored (a case's
    `writer`: kernel/writers.py, the function every front end stores through)."""
    messages = json.loads(json.dumps([case["message"], *([case["after"]] if "after" in case else [])])
                          .replace("MARK", marker(case)))
    writer = Writer(case.get("writer", "operator"))
    return [as_written(m, writer, frozenset({"operator"}))[0] for m in messages]


def thread_rows(case: dict, more: int = 0) -> list[dict[str, Any]]:
    """A Teams-shaped thread: the budget talk with the planted message in it, then five other
    talks on later days (and `more`); speakers named, message ids set."""
    t = datetime(2025, 3, 3, 9, tzinfo=timezone.utc)
    rows = [{"role": "user", "name": "Aiko", "content": "Let's settle the budget for the offsite."},
            {"role": "assistant", "content": "Sure. What range do you have in mind for the budget?"},
            *planted(case),
            {"role": "assistant", "content": "Noted on the budget."},
            {"role": "user", "name": "Aiko", "content": "Keep the budget at 5,000 euros then."},
            {"role": "assistant", "content": "Budget fixed at 5,000 euros."}]
    topics = ["the hotel", "the trains", "the dinner menu", "the weather", "the music"]
    for day, topic in enumerate(topics + [f"work package {k}" for k in range(more)], 1):
        rows += [{"role": "user", "name": "Aiko", "content": f"Next, {topic}: what are the options?"},
                 {"role": "assistant", "content": f"For {topic} there are three options."},
                 {"role": "user", "name": "Aiko", "content": f"Pick the second one for {topic}."},
                 {"role": "assistant", "content": f"Done: the second option for {topic}."}]
    for i, row in enumerate(rows):
        gap = timedelta(days=sum(1 for r in rows[:i] if "options?" in str(r.get("content"))), minutes=i)
        row.update(id=f"m{i}", timestamp=(t + gap).isoformat())
    return rows


_INVISIBLE = re.compile(f"[{FORMAT_CHARS}]")


def _normal(text: str) -> str:
    """What a reader (or a model) takes the text for: width folded, format characters and
    combining marks unseen, look-alikes of < > / as themselves."""
    text = unicodedata.normalize("NFKD", _INVISIBLE.sub("", text))
    text = unicodedata.normalize("NFKC", "".join(c for c in text if not unicodedata.category(c).startswith("M")))
    return text.translate({ord(c): "<" for c in _LESS} | {ord(c): ">" for c in _GREATER}
                          | {ord(c): "/" for c in READS_AS["/"]})


def _texts(message: dict[str, Any]) -> list[str]:
    content = message.get("content")
    texts = [content] if isinstance(content, str) else [p.get("text", "") for p in content or ()
                                                        if isinstance(p, dict)]
    texts += [c.get("function", {}).get("arguments", "") + c.get("function", {}).get("name", "")
              for c in message.get("tool_calls") or ()]
    return [t for t in texts if t]


def planted_thread(cases: list[dict], more: int = 0) -> list[dict[str, Any]]:
    """One thread with every case's message in its budget talk (the service and the proxy);
    `more` talks after it (a thread that fits a budget whole is sent as `full` sends it)."""
    rows = thread_rows(cases[0], more)
    extra = [m for c in cases[1:] for m in [*planted(c), {"role": "assistant", "content": "Noted on the budget."}]]
    rows[3:3] = [{**m, "id": f"p{i}", "timestamp": rows[2]["timestamp"]} for i, m in enumerate(extra)]
    return rows


def check_prompt(messages: list[dict[str, Any]], *cases: dict) -> set[str]:
    """Assert the planted text of `cases` stayed data in `messages`; the ids of the cases whose
    marker the prompt showed."""
    own = {}
    for case in cases:
        first = planted(case)[0]
        own[marker(case)] = speaker(first.get("name"), first["role"])
    shown = set()
    for m in messages:
        assert not (m.get("name") and reserved(m["name"])), m
        for text in _texts(m):
            shown |= {c["id"] for c in cases if marker(c) in text}
            assert not _CONTROL.search(_normal(text)), text
            if m["role"] in ("system", "developer"):
                assert not any(mark in text for mark in own), m
            if "<retrieved_history>" in text:
                _check_block(text, own)
    return shown


def _check_block(text: str, own: dict[str, str]) -> None:
    lines = text.split("\n")
    opened, closed = lines.index("<retrieved_history>"), len(lines) - 1
    assert lines[closed] == "</retrieved_history>", text
    tags = [line for line in lines if _TAG.search(_normal(line))]
    assert tags == ["<retrieved_history>", "</retrieved_history>"], tags
    for line in lines[opened + 1:closed]:
        if line.startswith(("[", "  ")):
            continue
        label = line.split(": ", 1)[0]
        assert label in {"Aiko", "assistant", "tool", *own.values()}, line
        assert not _OPERATOR_LINE.match(_normal(line)), line
        for mark, speaker_label in own.items():
            if mark in line:  # the planted text on its own speaker's line (a tool call's: the tool's)
                assert label in (speaker_label, "tool"), line
