"""Query time, stage 1: the request -> what to search for.

Local rules always run: janome noun phrases (Japanese) or the request's content words
(English), a pattern-based intent, and a local date parser. With an LLM configured, one call
returns JSON (keywords, intent, a time range), and llmplan.checked keeps what survives its
checks on top of the local plan; on a timeout, an error or an unusable reply the local plan
stands, saying why. Both drop the request's meta-words (履歴, 話題, 要約, "summarize"...):
searching for 「履歴」 was the worked example's method-2 failure.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, replace
from functools import cached_property
from datetime import datetime

from semhist.kernel.errors import BackendError
from semhist.indexers.lexical import EN_STOP, JA_META, _janome, chinese_runs, is_japanese, korean_stems, language, tokenize
from semhist.kernel.model import head_and_tail

from ..llm import LLMClient
from .llmplan import KEYWORD_PROMPT, checked
from .timerange import TimeRange, parse_time_range

_EN_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'\-]*")
TOPIC, FACT = "topic", "fact"
_TOPIC_EN = re.compile(
    r"\b(summari[sz]e|summary|recap|overview|remind me|what was said|"
    r"(talk|talked|discuss|discussed|chat|chatted|say|said|tell|told|decide|decided|agree|agreed)\s+(me\s+)?(about|on)\b|"
    r"what\s+(did|do|have)\s+[\w\s,]{1,40}?\s+(talk|talked|discuss|discussed|chat|chatted|say|said)\b)", re.I)
_TOPIC_JA = re.compile(r"要約|まとめ|振り返|話題|話した|話して|話を|の話|どんな話|どうなった|何と言|何て言|言って|言ってた|"
                       r"相談した|について(教えて|知りたい|まとめ|振り返)|やり(取|と)り")
_TOPIC_ZH = re.compile(r"总结|概括|回顾|(聊|谈|说|讨论)(了|过)(什么|些什么|哪些)|关于.{1,20}?(聊|谈|说|讨论)")
_TOPIC_KO = re.compile(r"요약|정리|(얘기|이야기|대화|말)(했|한|를 했|를 나눴)|에 대해.{0,10}(얘기|이야기|말|대화)")
_TOPIC = {"ja": _TOPIC_JA, "zh": _TOPIC_ZH, "ko": _TOPIC_KO, "en": _TOPIC_EN}
# Instructions about the answer's form, not its subject: 「一言で」, 「箇条書きで」, "Reply with just OK",
# "One word", "Short answer". The local extractor kept 「一言」, 「箇条」, "Reply", "Short" as keywords.
_ANSWER_FORM = re.compile(
    r"(?:一言|ひとこと|一文|[一二三四五1-9１-９]\s*(?:行|文|語))\s*(?:で|に)|[0-9０-９]+\s*文字(?:以内|程度|くらい)?\s*で|"
    r"箇条書き(?:で|に)?|(?:(?:簡潔|手短|簡単)に|短く)(?=\s*(?:まとめ|答え|教え|説明|言って|書い|お願い))|"
    r"(?<![\u3400-\u9fff])表(?:形式)?で(?=\s*(?:まとめ|答え|教え|書い|示し|お願い))|"
    r"(?:日本語|英語)で(?=\s*(?:答え|回答|返|書い|まとめ|教え))|(?:はい|イエス)か(?:いいえ|ノー)で|"
    r"(?:OK|ok|オーケー)[」』]?と?だけ|"
    r"\b(?:(?:reply|respond|answer|say)\s+(?:with\s+)?(?:just|only)|(?:just|only)\s+(?:reply|respond|answer|say)"
    r"(?:\s+with)?)\s+(?:[\"'“][^\"'”]{1,20}[\"'”]|ok(?:ay)?\b|yes\b|no\b|done\b)|"
    r"\b(?:in\s+)?(?:one|a\s+single|two|three|four|five|\d+)\s+(?:words?|sentences?|lines?|paragraphs?|"
    r"bullet\s+points?|bullets?)\b|\b(?:short|brief|quick|one-word)\s+(?:answer|reply|response)\b|"
    r"\b(?:keep\s+it|be)\s+(?:short|brief|concise)\b|\b(?:briefly|concisely)\b|\btl;?dr\b|"
    r"\b(?:in|as)\s+(?:a\s+)?(?:bullet\s+points|bullets|bulleted\s+list|bullet\s+list|numbered\s+list)\b|"
    r"\b(?:(?:answer|reply|respond)\s+(?:with\s+|in\s+)?(?:a\s+)?)?(?:just\s+)?yes\s+or\s+no\b|\bno\s+explanations?\b", re.I)


def without_answer_form(text: str) -> str:
    """The text without instructions about the answer's form (they name no topic)."""
    return _ANSWER_FORM.sub(" ", text)


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
    # where each part came from after validation: (("keywords", "llm"), ("time", "local"), ...)
    origins: tuple[tuple[str, str], ...] = ()
    rejected: tuple[str, ...] = ()  # what the LLM said that was not used, and why

    @property
    def origin(self) -> dict[str, str]:
        return dict(self.origins)

    def to_dict(self) -> dict:
        return {"keywords": list(self.keywords), "source": self.source, "reason": self.reason,
                "intent": self.intent, "time_range": self.time_range.to_dict() if self.time_range else None,
                "from": dict(self.origins), "rejected": list(self.rejected)}

    @property
    def query(self) -> str:
        """Text to embed for dense search."""
        return self.dense_text or " ".join(self.keywords)

    @cached_property
    def terms(self) -> list[str]:
        """The lexical search terms (tokenized once: janome is the slow part of a request);
        a question or exclamation mark is no term (janome calls a half-width 「?」 a noun)."""
        return [t for t in tokenize(self.search_text or self.query) if not _MARKS.fullmatch(t)]


_WORDLIKE = re.compile(r"\w")
_MARKS = re.compile(r"[?!？！。、]+")


def _is_meta(word: str) -> bool:
    return word in JA_META or word.lower() in EN_STOP


def local_keywords(request: str) -> tuple[str, ...]:
    """Keywords without an LLM: janome noun phrases for Japanese, the content runs of Chinese
    and the word stems of Korean, content words for English (and Latin words in any).
    A request made only of meta-words, time words and instructions about the answer has
    none: 「の に話した内容をまとめてください。」 searched is the meta-phrase docs/guides/strategies.md says is not."""
    request = without_answer_form(request)
    lang = language(request)
    latin = [w for w in _EN_WORD.findall(request) if w.lower() not in EN_STOP]
    if lang == "ja":
        words = _japanese_nouns(request)
    elif lang == "zh":
        runs = chinese_runs(request)
        words = [r for r in runs if len(r) > 1] or runs
        words += latin
    elif lang == "ko":
        words = korean_stems(request) + latin
    else:
        words = latin
    return tuple(dict.fromkeys(words))


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
    return [p for p in phrases if not _is_meta(p) and _WORDLIKE.search(p)]  # 「?」 alone is no phrase


def has_content(word: str) -> bool:
    """Does `word` name something (a noun phrase, a content word), not just ask or say how
    to answer?"""
    word = without_answer_form(word)
    lang = language(word)
    if lang == "ja":
        return bool(_japanese_nouns(word))
    if lang == "zh":
        return bool(chinese_runs(word))
    if lang == "ko":
        return bool(korean_stems(word))
    return any(w.lower() not in EN_STOP for w in _EN_WORD.findall(word))


def local_intent(request: str) -> str:
    """topic when the request asks to recall or summarize talk, else fact."""
    return TOPIC if _TOPIC[language(request)].search(request) else FACT


_LOCAL = (("keywords", "local"), ("intent", "local"), ("time", "local"))


def local_plan(request: str, anchor: datetime | None) -> KeywordResult:
    time_range, rest = parse_time_range(request, anchor)
    if (form := without_answer_form(rest)) != rest:
        rest = re.sub(r"\s+", " ", form).strip()
    keywords = local_keywords(rest)
    # English: the whole sentence embeds better than its keywords (LoCoMo: 0.55 vs 0.51 recall
    # by cosine alone); Japanese requests carry meta-phrases (前に…何と言っていたか) that dilute it.
    # Chinese and Korean keywords are character runs and stems, which embed worse than the
    # sentence: they are embedded whole, as English is. Without a keyword, a request that names
    # a time has no topic to embed (「…の23時台に話した内容」: its time chooses); one that names
    # none is embedded whole, for what the analysis missed (「ひさご」 read as a verb).
    if not keywords:
        dense = "" if time_range else rest.strip()
    else:
        dense = "" if is_japanese(rest) else rest.strip()
    origins = _LOCAL if time_range else _LOCAL[:2]
    return KeywordResult(keywords, "local", "", 0, 0.0, local_intent(request), time_range, rest, dense, origins)


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
        return replace(checked(local, reply, request, anchor, llm.model, has_content), ms=_ms(start))
    except (BackendError, ValueError) as exc:
        return replace(local, reason=f"LLM fallback: {exc}", llm_calls=1, ms=_ms(start),
                       rejected=(f"the whole reply: {exc}",))


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000
