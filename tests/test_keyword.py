import pytest

from indexers.settings import LLMConfig
from retrieval.pipeline.keyword import extract_keywords, local_keywords, parse_keyword_reply
from retrieval.llm import OpenAIChat, make_llm


@pytest.mark.parametrize("request_text,expected", [
    ("この履歴からラーメンの話題について要約してください。", ("ラーメン",)),
    ("映画について話したことをまとめて", ("映画",)),
    ("前に京都観光バス株式会社について何と言っていたか教えて。", ("京都観光バス株式会社",)),
    ("What did we decide about the Hong Kong server?", ("Hong", "Kong", "server")),
    ("Summarize what we said about lunch on Friday.", ("lunch", "Friday")),
])
def test_local_extractor_drops_meta_words(request_text, expected):
    assert local_keywords(request_text) == expected


def test_local_extractor_never_returns_nothing():
    assert local_keywords("履歴を要約して") == ("履歴を要約して",)


@pytest.mark.parametrize("reply,expected", [
    ('{"keywords": ["ラーメン"]}', ("ラーメン",)),
    ('Sure! {"keywords": ["ラーメン", "話題"]} hope it helps', ("ラーメン",)),
    ('{"keyword": "Hong Kong server"}', ("Hong Kong server",)),
    ('{"keywords": ["Kyoto", "Beppu", "Oita", "Hakone"]}', ("Kyoto", "Beppu", "Oita")),
])
def test_parse_keyword_reply(reply, expected):
    assert parse_keyword_reply(reply) == expected


@pytest.mark.parametrize("reply", ["ラーメン", '{"keywords": []}', '{"keywords": ["履歴", "要約"]}', '{"x": 1}', "{bad json}"])
def test_unusable_replies_are_rejected(reply):
    with pytest.raises(ValueError):
        parse_keyword_reply(reply)


def test_no_llm_means_local_and_says_why():
    kw = extract_keywords("この履歴からラーメンの話題について要約してください。", None)
    assert kw.source == "local" and "no LLM" in kw.reason and kw.llm_calls == 0


def test_unreachable_llm_falls_back_with_the_reason():
    # A real client against a closed port on this machine: the failure is real, not simulated.
    llm = make_llm(LLMConfig("openai", "any-model", "k", "http://127.0.0.1:9/v1", timeout=3))
    assert isinstance(llm, OpenAIChat)
    kw = extract_keywords("この履歴からラーメンの話題について要約してください。", llm)
    assert kw.source == "local" and kw.keywords == ("ラーメン",)
    assert kw.reason.startswith("LLM fallback") and kw.llm_calls == 1


def test_llm_time_range_is_checked():
    from datetime import datetime, timezone

    from retrieval.pipeline.llmplan import llm_time as _llm_time
    anchor = datetime(2025, 7, 29, tzinfo=timezone.utc)
    assert _llm_time({"time": {"start": "2025-07-20", "end": "2025-07-22"}}, anchor).end.day == 23
    assert _llm_time({"time": {"start": "2025-08-20", "end": "2025-08-22"}}, anchor) is None  # after the thread
    assert _llm_time({"time": {"start": "2025-07-22", "end": "2025-07-20"}}, anchor) is None  # reversed
    assert _llm_time({"time": {"start": "soon"}}, anchor) is None
    assert _llm_time({"time": None}, anchor) is None
    assert _llm_time({"time": {"start": "9999-12-31"}}, anchor) is None  # was an OverflowError
