"""Query time, stage 1 with an LLM: its reading of the request, checked before it is used.

The local plan (keyword.local_plan) is the base; the model may only add to it:
- keywords it names that occur in the request (or share its words' stems) replace the local
  keywords; keywords that do not occur (synonyms, the entity a pronoun stands for) are kept as
  expansions, searched lexically beside the request's own words, never in place of them;
- a time range, only when the request names a time the local parser could not resolve;
- the intent stays the local rules' (the packaged model called almost every question "topic").
What was not used is listed in `rejected`, and `origins` says where each part came from.
Measured in benchmarks/llm_request.py: without these checks the packaged model cost LoCoMo
recall (0.743 -> 0.450 on 25 questions) by confining searches to the thread's last day.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta

from semhist.indexers.lexical import EN_STOP, JA_META, is_cjk

from .timerange import TimeRange, names_time, without_time_words

KEYWORD_PROMPT = (
    "You prepare a search over a long chat history for the user's request. Answer with JSON "
    "only, no explanation: "
    '{"keywords": ["..."], "intent": "topic" or "fact", "time": null or {"start": "YYYY-MM-DD", '
    '"end": "YYYY-MM-DD"}}. keywords: 1 to 3 search keywords, the main topic or entity first, in '
    "the language of the request; never words about the request itself (history, conversation, "
    "summary, topic, talk, 履歴, 会話, 話題, 要約, 内容, まとめ). intent: topic when the user wants "
    "what was said about something recalled or summarized, fact when a specific detail is asked. "
    "time: the inclusive date range the request names (resolve relative dates against the date "
    "of the last message given below), else null."
)
# Words a model offers that are about the question, not its subject.
_ABOUT_QUESTION = frozenset("date time day when year frequency reason details detail info information "
                            "items item question answer request 日付 日時 時間 理由 詳細 情報".split())
_WORD = re.compile(r"[a-z0-9][a-z0-9'\-]*")
_STEM = 4  # "decide"/"decided", "server"/"servers": a shared 4-letter start counts as the same word


def is_meta(word: str) -> bool:
    return word in JA_META or word.lower() in EN_STOP or word.lower() in _ABOUT_QUESTION


def reply_json(reply: str) -> dict:
    match = re.search(r"\{.*\}", reply, re.S)
    if not match:
        raise ValueError(f"no JSON object in the reply {reply[:80]!r}")
    data = json.loads(match.group(0))
    if not isinstance(data, dict):
        raise ValueError("the reply is not a JSON object")
    return data


def parse_keyword_reply(reply: str) -> tuple[str, ...]:
    """Keywords from the LLM's reply; raises ValueError when the reply is unusable."""
    data = reply_json(reply)
    raw = data.get("keywords", data.get("keyword"))
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        raise ValueError("the reply has no 'keywords' list")
    words = [str(w).strip() for w in raw if isinstance(w, (str, int, float)) and str(w).strip()]
    words = [w for w in words if not is_meta(w)]
    if not words:
        raise ValueError("the reply's keywords were all meta-words or empty")
    return tuple(dict.fromkeys(words))[:3]


def llm_time(data: dict, anchor: datetime | None) -> TimeRange | None:
    raw = data.get("time")
    if not isinstance(raw, dict) or anchor is None:
        return None
    try:
        first = datetime.fromisoformat(str(raw["start"])[:10]).date()
        last = datetime.fromisoformat(str(raw.get("end") or raw["start"])[:10]).date()
    except (KeyError, ValueError):
        return None
    if last < first:
        return None
    if last.year >= 9999:  # the day after it does not exist
        return None
    start = datetime.combine(first, datetime.min.time(), tzinfo=anchor.tzinfo)
    end = datetime.combine(last + timedelta(days=1), datetime.min.time(), tzinfo=anchor.tzinfo)
    if start > anchor:  # a range after the last message holds no history: the model misread it
        return None
    return TimeRange(start, end, "(from the LLM)", relative=True)  # what the local rules could not read


_YEAR = re.compile(r"(?<!\d)((?:19|20)\d{2})(?!\d)")
_MONTH_EN = {m: i for i, m in enumerate(("january", "february", "march", "april", "may", "june", "july", "august",
                                         "september", "october", "november", "december"), start=1)}
# "may" is a month only beside a day or after in/of/during ("What may Mel have painted?")
_MONTH = re.compile(r"(?<!\d)(\d{1,2})\s*月|\b(" + "|".join(m for m in _MONTH_EN if m != "may") + r")\b|"
                    r"(?:\b(?:in|of|during|since|until|early|late|mid)\s+|\d(?:st|nd|rd|th)?\s+)(may)\b|\b(may)\s+\d", re.I)


def time_problem(proposed: TimeRange, request: str, anchor: datetime) -> str | None:
    """Why the model's range cannot be the time the request names, or None. The packaged model
    puts the day of the last message in almost every reply ("in June", "in 2022" included);
    today's date the local parser reads itself, so that day from the model is its default."""
    last = proposed.end - timedelta(days=1)
    if proposed.start.date() == anchor.date() and last.date() == anchor.date():
        return "the day of the last message, the model's default"
    text = unicodedata.normalize("NFKC", request)
    years = {int(y) for y in _YEAR.findall(text)}
    if years and not any(proposed.start.year <= y <= last.year for y in years):
        return f"outside the year the request names ({', '.join(map(str, sorted(years)))})"
    months = {int(a) if a else _MONTH_EN[(b or c or d).lower()] for a, b, c, d in _MONTH.findall(text)}
    months = {m for m in months if 1 <= m <= 12}
    covered = {(proposed.start + timedelta(days=d)).month for d in range(min((last - proposed.start).days + 1, 366))}
    if months and not months & covered:
        return "outside the month the request names"
    return None


def _norm(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def grounded(keyword: str, request: str) -> bool:
    """Does the keyword occur in the request: verbatim, by its words' stems (English), or by
    most of its character pairs (Chinese, Japanese, Korean: inflection, okurigana and
    particles vary)?"""
    kw, req = _norm(keyword), _norm(request)
    if kw in req:
        return True
    if is_cjk(kw):
        pairs = {kw[i:i + 2] for i in range(len(kw) - 1)} or {kw}
        return sum(p in req for p in pairs) / len(pairs) >= 0.6
    words = [w for w in _WORD.findall(kw) if w not in EN_STOP]
    stems = {w[:_STEM] for w in _WORD.findall(req)}
    return bool(words) and all(w[:_STEM] in stems for w in words)


def _is_time_words(keyword: str) -> bool:
    """「4月21日」, "May 8", "last week": a time, searched as a range, never as a topic."""
    return names_time(keyword) and not re.sub(r"[\W\d_]+", "", without_time_words(keyword))


def checked(local, reply: str, request: str, anchor: datetime | None, model: str,
            has_content: Callable[[str], bool] = lambda word: True):
    """The local plan `local` (a KeywordResult) with what survives of the model's `reply`;
    `has_content` tells a keyword with a topic in it from one about the request (「どうなった」,
    「話をしました」: in the request, but searching for them lost the evidence). Raises
    ValueError when the reply is unusable as a whole."""
    data = reply_json(reply)
    offered = parse_keyword_reply(reply)
    rejected: list[str] = []
    kept, expansions = [], []
    for word in offered:
        if _is_time_words(word):
            rejected.append(f"keyword {word!r}: a time, not a topic")
        elif not has_content(word):
            rejected.append(f"keyword {word!r}: about the request, not its topic")
        elif grounded(word, request):
            kept.append(word)
        else:
            expansions.append(word)
    time_range, time_from = local.time_range, "local" if local.time_range else None
    proposed = llm_time(data, anchor)
    if proposed and not time_range:
        why = "the request names no time" if not names_time(request) else time_problem(proposed, request, anchor)
        if why is None:
            time_range, time_from = proposed, "llm"
        else:
            rejected.append(f"time {proposed.start:%Y-%m-%d}..{proposed.end - timedelta(days=1):%Y-%m-%d}: {why}")
    if data.get("intent") in ("topic", "fact") and data["intent"] != local.intent:
        rejected.append(f"intent {data['intent']!r}: the local rules' {local.intent!r} is kept")
    keywords = tuple(dict.fromkeys(kept)) or local.keywords
    origins = [("keywords", "llm" if kept else "local")]
    if expansions:
        origins.append(("expansions", "llm"))
    origins.append(("intent", "local"))
    if time_from:
        origins.append(("time", time_from))
    # The embedded text: English embeds the request's sentence (better than its keywords);
    # Japanese embeds the local keywords and those of the model's that they do not cover
    # (「飲食店」 beside 「飲食」 moved the query off the evidence).
    new = [k for k in kept if not any(k in own or own in k for own in local.keywords)]
    dense = local.dense_text or " ".join(dict.fromkeys(local.keywords + tuple(new)))
    search = " ".join([local.search_text, *expansions]).strip()
    return replace(local, keywords=keywords, source="llm", reason=f"checked reply of {model}", llm_calls=1,
                   time_range=time_range, search_text=search, dense_text=dense, origins=tuple(origins),
                   rejected=tuple(rejected))
