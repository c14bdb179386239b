"""Query time, stage 1: the request -> search keyword(s).

The LLM is asked once for a JSON answer; with no LLM configured, or on a timeout, an
error or an unusable reply, a local extractor (janome nouns for Japanese, stopword
filtering for English) takes over. Both drop the request's meta-words (履歴, 話題, 要約,
"summarize", "history"...): searching for 「履歴」 was the worked example's method-2 failure.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from functools import lru_cache

from indexers.errors import BackendError

from .llm import LLMClient

JA_META = frozenset("""
履歴 話題 要約 会話 内容 まとめ 話 件 こと もの 前 以前 今 さっき 先ほど ところ 感じ 何 なに どこ
いつ 誰 どれ どんな 教え 説明 トーク チャット やりとり やり取り 質問 回答 返事 今回 最近 について 関連
""".split())

EN_STOP = frozenset("""
a an the and or but if of to in on at by for with about from into over after before as is are was were
be been being do does did have has had i me my we our you your he she it its they them their this that
these those what which who whom whose when where why how all any some can could would should will shall
may might must not no yes so than then there here just also again ever please tell us let lets ok okay
recap summarize summarise summary history conversation conversations chat talk talked talking discuss
discussed discussion said say says mention mentioned topic topics earlier previously remind recall
remember thread messages message back know anything everything something thing things up out
decide decided agree agreed
""".split())

_JA_CHARS = re.compile(r"[\u3040-\u30ff\u3400-\u9fff]")
_EN_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'\-]*")


def is_japanese(text: str) -> bool:
    return bool(_JA_CHARS.search(text))


@dataclass(frozen=True)
class KeywordResult:
    """What will be searched for, which extractor chose it, and why."""

    keywords: tuple[str, ...]
    source: str  # "llm" or "local"
    reason: str
    llm_calls: int = 0
    ms: float = 0.0

    @property
    def query(self) -> str:
        return " ".join(self.keywords)


@lru_cache(maxsize=1)
def _janome():
    from janome.tokenizer import Tokenizer

    return Tokenizer()


def _is_meta(word: str) -> bool:
    return word in JA_META or word.lower() in EN_STOP


def local_keywords(request: str) -> tuple[str, ...]:
    """Keywords without an LLM: janome noun phrases for Japanese, content words for English."""
    if is_japanese(request):
        words = _japanese_nouns(request)
    else:
        words = [w for w in _EN_WORD.findall(request) if w.lower() not in EN_STOP]
    seen: dict[str, None] = {}
    for w in words:
        seen.setdefault(w, None)
    return tuple(seen) or (request.strip(),)


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
    # English words inside a Japanese request ("Pythonで...") are nouns to janome too.
    return [p for p in phrases if not _is_meta(p)]


KEYWORD_PROMPT = (
    "You pick search keywords for finding the earlier parts of a long chat history that a "
    "user's request is about. Answer with JSON only, no explanation: "
    '{"keywords": ["..."]} with 1 to 3 keywords, the main topic or entity first, in the '
    "language of the request. Never return words about the request itself (history, "
    "conversation, summary, topic, talk, 履歴, 会話, 話題, 要約, 内容, まとめ)."
)


def parse_keyword_reply(reply: str) -> tuple[str, ...]:
    """Keywords from the LLM's reply; raises ValueError when the reply is unusable."""
    match = re.search(r"\{.*\}", reply, re.S)
    if not match:
        raise ValueError(f"no JSON object in the reply {reply[:80]!r}")
    data = json.loads(match.group(0))
    raw = data.get("keywords", data.get("keyword")) if isinstance(data, dict) else None
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        raise ValueError("the reply has no 'keywords' list")
    words = [str(w).strip() for w in raw if isinstance(w, (str, int, float)) and str(w).strip()]
    words = [w for w in words if not _is_meta(w)]
    if not words:
        raise ValueError("the reply's keywords were all meta-words or empty")
    return tuple(dict.fromkeys(words))[:3]


def extract_keywords(request: str, llm: LLMClient | None, mode: str = "auto") -> KeywordResult:
    """Keywords for `request`; `mode` is auto (LLM when configured), llm, or local."""
    start = time.perf_counter()
    if mode == "local" or llm is None:
        reason = "asked for the local extractor" if mode == "local" else "no LLM is configured"
        return KeywordResult(local_keywords(request), "local", reason, 0, _ms(start))
    try:
        reply = llm.chat([{"role": "system", "content": KEYWORD_PROMPT},
                          {"role": "user", "content": request}], json_mode=True, max_tokens=64)
        words = parse_keyword_reply(reply)
        return KeywordResult(words, "llm", f"chosen by {llm.model}", 1, _ms(start))
    except (BackendError, ValueError) as exc:
        reason = f"LLM fallback: {exc}"
        return KeywordResult(local_keywords(request), "local", reason, 1, _ms(start))


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000
