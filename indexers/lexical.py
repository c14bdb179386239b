"""Lexical side of search: language-aware tokens and a small BM25 index.

The language is detected per message by its script. Japanese text is cut by janome into
content words (nouns, verbs and adjectives in their base form); Chinese into characters and
character pairs; Korean into word stems and syllable pairs; other text (and the Latin words
in Chinese and Korean) into lower-cased words reduced by the Snowball English stemmer.
Meta-words of requests (履歴, 要約, 总结, 요약, "summarize"...) and stopwords never count as
evidence.
"""

from __future__ import annotations

import math
import re
import threading
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

_KANA = re.compile(r"[\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f]")
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_HANGUL = re.compile(r"[\uac00-\ud7a3\u1100-\u11ff\u3130-\u318f]")
_CJK = re.compile(f"{_KANA.pattern}|{_HAN.pattern}|{_HANGUL.pattern}")
_HAN_RUN = re.compile(f"(?:{_HAN.pattern})+")
_HANGUL_RUN = re.compile(f"(?:{_HANGUL.pattern})+")
_WORD = re.compile(r"[A-Za-z0-9]+")

JA_META = frozenset("""
履歴 話題 要約 会話 内容 まとめ 話 件 こと もの 前 以前 今 さっき 先ほど ところ 感じ 何 なに どこ
いつ 誰 どれ どんな 教え 説明 トーク チャット やりとり やり取り 質問 回答 返事 今回 最近 について 関連
相談 まとめる 探す 振り返る する いる ある なる できる 言う いう 聞く 話す 教える 思う 知る 覚える くれる もらう れる られる せる ない よう
""".split())

EN_STOP = frozenset("""
a an the and or but if of to in on at by for with about from into over after before as is are was were
be been being do does did have has had i me my we our you your he she it its they them their this that
these those what which who whom whose when where why how all any some can could would should will shall
may might must not no yes so than then there here just also again ever please tell us let lets ok okay
recap summarize summarise summary history conversation conversations chat talk talked talking discuss
discussed discussion said say says mention mentioned topic topics earlier previously remind recall
remember thread messages message back know anything everything something thing things up out
decide decided agree agreed s t her his him hers she he mine yours ours theirs
""".split())


# Requests and their history in Chinese and Korean: function words that never count as
# evidence, and the meta-words of a request (历史, 요약...), as JA_META is for Japanese.
ZH_STOP = tuple(sorted(set("""
什么 怎么 怎样 为什么 哪里 哪儿 哪个 哪些 多少 几 谁 吗 呢 吧 啊 呀 的 了 着 过 是 在 有 和 与 也 都 还 就 又
我 你 您 他 她 它 我们 你们 他们 咱们 这 那 这个 那个 这些 那些 请 告诉 一下 知道 记得 说 说过 聊 聊过 谈 谈过
讨论 之前 以前 刚才 上次 历史 记录 聊天 对话 内容 总结 概括 问题 回答 关于 一些 什么样 可以 能 会 要 想
""".split()), key=len, reverse=True))
KO_STOP = frozenset("""
제 저 저는 제가 나 내 내가 우리 우리가 당신 뭐 뭐예요 뭐였죠 무엇 무슨 어디 언제 누구 왜 어떻게 어느 그 이 저것 그것 것 거
좀 수 있다 있어요 했죠 했어요 하다 해요 말 말했죠 얘기 이야기 대화 내용 기록 요약 정리 전에 이전 아까 다시 알려 주세요 줘
대해 관해 있 없 하 되
""".split())
# Korean particles and endings, longest first: the stem of 「이름은」 is 「이름」.
_KO_SUFFIXES = tuple(sorted("""
이에요 예요 입니다 습니다 이었죠 였죠 이죠 죠 에서 에게 한테 으로 로 은 는 이 가 을 를 에 의 도 와 과 요 랑 이랑 까지 부터 처럼 보다
이라고 라고 이야 야 다고 해 한 했 하고 하는 해서 할 했던 하던
""".split(), key=len, reverse=True))


def language(text: str) -> str:
    """ja (any kana), ko (any hangul), zh (Han characters alone) or en (anything else)."""
    if _KANA.search(text):
        return "ja"
    if _HANGUL.search(text):
        return "ko"
    return "zh" if _HAN.search(text) else "en"


def is_japanese(text: str) -> bool:
    return language(text) == "ja"


def is_cjk(text: str) -> bool:
    """Written in Chinese, Japanese or Korean script (words are not cut by spaces)."""
    return bool(_CJK.search(text))


# One tokenizer and stemmer per thread: the Snowball stemmer keeps its word in the object
# (shared by a service's request threads it raised IndexError), and janome's is not
# documented as thread-safe.
_local = threading.local()


def _janome():
    if not hasattr(_local, "janome"):
        from janome.tokenizer import Tokenizer

        _local.janome = Tokenizer()
    return _local.janome


def _stemmer():
    if not hasattr(_local, "stemmer"):
        import snowballstemmer

        _local.stemmer = snowballstemmer.stemmer("english")
    return _local.stemmer


def _japanese_words(text: str) -> list[str]:
    out = []
    for tok in _janome().tokenize(text):
        pos = tok.part_of_speech.split(",")
        if pos[0] in ("名詞", "動詞", "形容詞") and pos[1] not in ("非自立", "代名詞", "数", "接尾"):
            word = tok.base_form if tok.base_form != "*" else tok.surface
            if word not in JA_META:
                out.append(word.lower())
    # Latin words inside Japanese text ("Pythonで") are stemmed like English ones
    return out


# A message longer than this is a document pasted into the chat; its head says what it is
# about, and all of it took janome 48 s per MB of Japanese (its vector still reads all of it).
TERM_CHARS = 20_000


def chinese_runs(text: str) -> list[str]:
    """The Han runs of `text` with its function and meta-words taken out: 「我叫什么名字？」 ->
    叫, 名字."""
    for word in ZH_STOP:
        text = text.replace(word, " ")
    return _HAN_RUN.findall(text)


def _chinese_terms(text: str) -> list[str]:
    """Characters and character pairs (no dictionary ships for Chinese: pairs are what
    CJK search engines index, and single characters catch one-character words)."""
    out = []
    for run in chinese_runs(text):
        out += list(run) + [run[i:i + 2] for i in range(len(run) - 1)]
    return out


def korean_stems(text: str) -> list[str]:
    """The words of Korean text without their particles and endings: 「제 이름은 민수예요」 ->
    이름, 민수 (the pronoun is a function word)."""
    out = []
    for word in _HANGUL_RUN.findall(text):
        if word in KO_STOP:
            continue
        stem = next((word[:-len(s)] for s in _KO_SUFFIXES if word.endswith(s) and len(word) > len(s)), word)
        if stem not in KO_STOP:
            out.append(stem)
    return out


def _korean_terms(text: str) -> list[str]:
    """Each word's stem and its syllable pairs: the pairs match where a particle list does not
    (고양이를 / 고양이는 share 고양, 양이)."""
    out = []
    for word in _HANGUL_RUN.findall(text):
        stems = korean_stems(word)
        if not stems:  # a function or meta-word, whatever its ending
            continue
        out += stems + [word[i:i + 2] for i in range(len(word) - 1) if word[i:i + 2] not in stems]
    return out


def _latin_terms(text: str) -> list[str]:
    stem = _stemmer().stemWord
    return [stem(w) for w in (x.lower() for x in _WORD.findall(text)) if w not in EN_STOP]


# What `tokenize` makes of a text, as a number: recorded in each stored thread's manifest, so
# a thread tokenized by older rules is known (`semhist reindex` tokenizes it again). Raise it
# whenever the terms of some text change. 1: before the Chinese and Korean paths (their text
# went through janome or gave no term); 2: script-detected Chinese and Korean terms.
TERMS_VERSION = 2


def tokenize(text: str) -> list[str]:
    """Index terms of one text (of its first TERM_CHARS characters), by its own language."""
    text = text[:TERM_CHARS]
    lang = language(text)
    if lang == "ja":
        return _japanese_words(text)
    if lang == "zh":
        return _chinese_terms(text) + _latin_terms(text)
    if lang == "ko":
        return _korean_terms(text) + _latin_terms(text)
    return _latin_terms(text)


class BM25:
    """Okapi BM25 (k1=1.2, b=0.75) over documents added one at a time.

    The newest documents can be taken back (`truncate`): a thread's open blocks change as
    messages arrive, while everything before them only ever grows. Weights are computed for
    the terms a query asks for, when it asks: a query has a handful of terms, a thread
    thousands.
    """

    def __init__(self, docs: Iterable[Sequence[str]] = (), k1: float = 1.2, b: float = 0.75,
                 keep_terms: bool = True):
        self._k1, self._b = k1, b
        self._keep_terms = keep_terms  # needed to take documents back; append-only indexes skip it
        self._lengths = np.zeros(64, dtype=np.float32)
        self.n = 0
        self._total = 0.0
        self._entries = 0  # postings held, for `nbytes`
        self._postings: dict[str, tuple[list[int], list[int]]] = {}
        self._doc_terms: list[tuple[str, ...]] = []  # distinct terms of each document
        for doc in docs:
            self.add(doc)

    def add(self, doc: Sequence[str]) -> int:
        """Add a document; returns its number."""
        i = self.n
        if i == len(self._lengths):
            self._lengths = np.concatenate([self._lengths, np.zeros(len(self._lengths), dtype=np.float32)])
        self._lengths[i] = len(doc)
        self._total += len(doc)
        counts = Counter(doc)
        self._entries += len(counts)
        for term, tf in counts.items():
            docs, tfs = self._postings.setdefault(term, ([], []))
            docs.append(i)
            tfs.append(tf)
        if self._keep_terms:
            self._doc_terms.append(tuple(counts))
        self.n += 1
        return i

    def truncate(self, n: int) -> None:
        """Drop every document from number `n` on."""
        if self.n > n and not self._keep_terms:
            raise ValueError("this BM25 index keeps no document terms: it cannot truncate")
        while self.n > n:
            self.n -= 1
            self._total -= float(self._lengths[self.n])
            removed = self._doc_terms.pop()
            self._entries -= len(removed)
            for term in removed:
                docs, tfs = self._postings[term]
                docs.pop()
                tfs.pop()
                if not docs:
                    del self._postings[term]

    def scores(self, query_terms: Iterable[str]) -> np.ndarray:
        out = np.zeros(self.n, dtype=np.float32)
        if not self.n:
            return out
        avg = self._total / self.n if self._total > 0 else 1.0
        lengths = self._lengths[:self.n]
        k1, b = self._k1, self._b
        for term in set(query_terms):
            hit = self._postings.get(term)
            if hit is None:
                continue
            ids = np.asarray(hit[0], dtype=np.int64)
            tf = np.asarray(hit[1], dtype=np.float32)
            idf = math.log(1 + (self.n - len(ids) + 0.5) / (len(ids) + 0.5))
            out[ids] += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lengths[ids] / avg))
        return out

    def coverage(self, query_terms: Iterable[str]) -> np.ndarray:
        """How many of the query's distinct terms each document holds."""
        out = np.zeros(self.n, dtype=np.int32)
        for term in set(query_terms):
            hit = self._postings.get(term)
            if hit is not None:
                out[np.asarray(hit[0], dtype=np.int64)] += 1
        return out

    @property
    def nbytes(self) -> int:
        """About what the postings take in memory."""
        return 120 * self._entries + self._lengths.nbytes


class ScanBM25:
    """The same scores as `BM25`, computed by scanning the documents for the query's terms
    instead of keeping postings: for an index built for one request (a long thread's
    candidate view), where building postings would cost more than every lookup."""

    def __init__(self, docs: Iterable[Sequence[str]] = (), k1: float = 1.2, b: float = 0.75):
        self._k1, self._b = k1, b
        self._docs: list[Sequence[str]] = []
        self._total = 0.0
        for doc in docs:
            self.add(doc)

    @property
    def n(self) -> int:
        return len(self._docs)

    def add(self, doc: Sequence[str]) -> int:
        self._docs.append(doc)
        self._total += len(doc)
        return len(self._docs) - 1

    def truncate(self, n: int) -> None:
        while len(self._docs) > n:
            self._total -= len(self._docs.pop())

    def scores(self, query_terms: Iterable[str]) -> np.ndarray:
        n = len(self._docs)
        out = np.zeros(n, dtype=np.float32)
        if not n:
            return out
        avg = self._total / n if self._total > 0 else 1.0
        lengths = np.fromiter((len(d) for d in self._docs), dtype=np.float32, count=n)
        k1, b = self._k1, self._b
        for term in set(query_terms):
            counts = np.fromiter((d.count(term) for d in self._docs), dtype=np.float32, count=n)
            ids = np.flatnonzero(counts)
            if not len(ids):
                continue
            tf = counts[ids]
            idf = math.log(1 + (n - len(ids) + 0.5) / (len(ids) + 0.5))
            out[ids] += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lengths[ids] / avg))
        return out

    def coverage(self, query_terms: Iterable[str]) -> np.ndarray:
        """How many of the query's distinct terms each document holds."""
        out = np.zeros(len(self._docs), dtype=np.int32)
        for term in set(query_terms):
            out += np.fromiter((term in d for d in self._docs), dtype=np.int32, count=len(self._docs))
        return out

    @property
    def nbytes(self) -> int:
        return 8 * int(self._total) + 64 * len(self._docs)
