"""Query time, stage 1: the request -> what to search for.

One LLM call returns JSON: keywords, whether the user wants a topic recalled or a fact
answered, and a time range when the request names one. With no LLM configured, or on a
timeout, an error or an unusable reply, local rules take over: janome noun phrases
(Japanese) or the request's content words (English), a pattern-based intent, and a local
date parser. Both drop the request's meta-words (履歴, 話題, 要約, "summarize"...):
searching for 「履歴」 was the worked example's method-2 failure.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, replace
from functools import cached_property
from datetime import datetime, timedelta

from indexers.errors import BackendError
from indexers.lexical import EN_STOP, JA_META, _janome, is_japanese, tokenize
from indexers.model import head_and_tail

from ..llm import LLMClient
from .timerange import TimeRange, parse_time_range

_EN_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'\-]*")
TOPIC, FACT = "topic", "fact"
_TOPIC_EN = re.compile(
    r"\b(summari[sz]e|summary|recap|overview|remind me|what was said|"
    r"(talk|talked|discuss|discussed|chat|chatted|say|said|tell|told|decide|decided|agree|agreed)\s+(me\s+)?(about|on)\b|"
    r"what\s+(did|do|have)\s+[\w\s,]{1,40}?\s+(talk|talked|discuss|discussed|chat|chatted|say|said)\b)", re.I)
_TOPIC_JA = re.compile(r"要約|まとめ|振り返|話題|話した|話して|話を|の話|どんな話|どうなった|何と言|何て言|言って|言ってた|"
                       r"相談した|について(教えて|知りたい|まとめ|振り返)|やり(取|と)り")


@dataclass(frozen=True)
class KeywordResult:
    """What will be searched for, which extractor chose it, and why."""

    keywords: tuple[str, ...]
    source: str  # "llm" or "local"
    reason: str
    llm_calls: int = 0
    ms: float = 0.0
    intent: str = TOPIC  # topic: recall a stretch of talk; fact: find the messages that answer
    time_range: TimeRange | None = None
    search_text: str = ""  # the request without meta- and time words, for lexical search
    dense_text: str = ""  # what to embed, when not the keywords themselves

    @property
    def query(self) -> str:
        """Text to embed for dense search."""
        return self.dense_text or " ".join(self.keywords)

    @cached_property
    def terms(self) -> list[str]:
        """The lexical search terms (tokenized once: janome is the slow part of a request)."""
        return tokenize(self.search_text or self.query)


def _is_meta(word: str) -> bool:
    return word in JA_META or word.lower() in EN_STOP


def local_keywords(request: str) -> tuple[str, ...]:
    """Keywords without an LLM: janome noun phrases for Japanese, content words for English."""
    if is_japanese(request):
        words = _japanese_nouns(request)
    else:
        words = [w for w in _EN_WORD.findall(request) if w.lower() not in EN_STOP]
    return tuple(dict.fromkeys(words)) or (request.strip(),)


def _japanese_nouns(text: str) -> list[str]:
    phrases: list[str] = []
    current: list[str] = []
    for tok in _janome().tokenize(text):
        pos = tok.part_of_speech.split(",")
        usable = pos[0] == "名詞" and pos[1] not in ("非自立", "代名詞", "数", "接尾", "副詞可能")
        if usable and not _is_meta(tok.surface):
            current.append(tok.surface)
            continue
        if current:
            phrases.append("".join(current))
            current = []
    if current:
        phrases.append("".join(current))
    return [p for p in phrases if not _is_meta(p)]


def local_intent(request: str) -> str:
    """topic when the request asks to recall or summarize talk, else fact."""
    pattern = _TOPIC_JA if is_japanese(request) else _TOPIC_EN
    return TOPIC if pattern.search(request) else FACT


def local_plan(request: str, anchor: datetime | None) -> KeywordResult:
    time_range, rest = parse_time_range(request, anchor)
    keywords = local_keywords(rest) if rest.strip() else (request.strip(),)
    # English: the whole sentence embeds better than its keywords (LoCoMo: 0.55 vs 0.51 recall
    # by cosine alone); Japanese requests carry meta-phrases (前に…何と言っていたか) that dilute it.
    dense = "" if is_japanese(rest) or not rest.strip() else rest.strip()
    return KeywordResult(keywords, "local", "", 0, 0.0, local_intent(request), time_range, rest, dense)


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


def parse_keyword_reply(reply: str) -> tuple[str, ...]:
    """Keywords from the LLM's reply; raises ValueError when the reply is unusable."""
    data = _reply_json(reply)
    raw = data.get("keywords", data.get("keyword"))
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        raise ValueError("the reply has no 'keywords' list")
    words = [str(w).strip() for w in raw if isinstance(w, (str, int, float)) and str(w).strip()]
    words = [w for w in words if not _is_meta(w)]
    if not words:
        raise ValueError("the reply's keywords were all meta-words or empty")
    return tuple(dict.fromkeys(words))[:3]


def _reply_json(reply: str) -> dict:
    match = re.search(r"\{.*\}", reply, re.S)
    if not match:
        raise ValueError(f"no JSON object in the reply {reply[:80]!r}")
    data = json.loads(match.group(0))
    if not isinstance(data, dict):
        raise ValueError("the reply is not a JSON object")
    return data


def _llm_time(data: dict, anchor: datetime | None) -> TimeRange | None:
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
    start = datetime.combine(first, datetime.min.time(), tzinfo=anchor.tzinfo)
    end = datetime.combine(last + timedelta(days=1), datetime.min.time(), tzinfo=anchor.tzinfo)
    if start > anchor:  # a range after the last message holds no history: the model misread it
        return None
    return TimeRange(start, end, "(from the LLM)")


# A long request is a pasted document with a question before or after it; analysing all of
# it took janome 48 s per MB of Japanese and would overflow the LLM's context.
ANALYSED_CHARS = 4_000


def analysed_part(request: str) -> str:
    """What request analysis reads: the request, or the head and tail of a long one."""
    return head_and_tail(request, ANALYSED_CHARS)


def extract_keywords(request: str, llm: LLMClient | None, mode: str = "auto",
                     anchor: datetime | None = None) -> KeywordResult:
    """What to search for `request`; `mode` is auto (LLM when configured), llm, or local.

    `anchor` is the time of the thread's last message, for relative dates.
    """
    start = time.perf_counter()
    request = analysed_part(request)
    local = local_plan(request, anchor)
    if mode == "local" or llm is None:
        reason = "asked for the local extractor" if mode == "local" else "no LLM is configured"
        return replace(local, reason=reason, ms=_ms(start))
    context = f"The last message of the history is dated {anchor:%Y-%m-%d (%A)}." if anchor else ""
    try:
        reply = llm.chat([{"role": "system", "content": KEYWORD_PROMPT + " " + context},
                          {"role": "user", "content": request}], json_mode=True, max_tokens=120)
        words = parse_keyword_reply(reply)
        data = _reply_json(reply)
    except (BackendError, ValueError) as exc:
        return replace(local, reason=f"LLM fallback: {exc}", llm_calls=1, ms=_ms(start))
    intent = data.get("intent") if data.get("intent") in (TOPIC, FACT) else local.intent
    # the local parser is exact where it matches; the LLM covers what it cannot parse
    time_range = local.time_range or _llm_time(data, anchor)
    return KeywordResult(words, "llm", f"chosen by {llm.model}", 1, _ms(start), intent, time_range,
                         " ".join(words) + " " + local.search_text)


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000
