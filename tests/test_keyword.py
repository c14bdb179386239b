from datetime import datetime, timedelta, timezone

import pytest

from semhist.kernel.settings import LLMConfig
from semhist.pipeline.keyword import extract_keywords, local_keywords, local_plan
from semhist.pipeline.llmplan import parse_keyword_reply
from semhist.llm import OpenAIChat, make_llm


@pytest.mark.parametrize("request_text,expected", [
    ("この履歴からラーメンの話題について要約してください。", ("ラーメン",)),
    ("映画について話したことをまとめて", ("映画",)),
    ("前に京都観光バス株式会社について何と言っていたか教えて。", ("京都観光バス株式会社",)),
    ("What did we decide about the Hong Kong server?", ("Hong", "Kong", "server")),
    ("Summarize what we said about lunch on Friday.", ("lunch", "Friday")),
])
def test_local_extractor_drops_meta_words(request_text, expected):
    assert local_keywords(request_text) == expected


def test_a_request_of_meta_words_alone_has_no_keyword():
    # it was the whole request: the meta-phrase the Strategies guide says is never searched
    assert local_keywords("履歴を要約して") == ()


ANCHOR = datetime(2024, 8, 10, 12, tzinfo=timezone(timedelta(hours=9)))


@pytest.mark.parametrize("request_text", [
    "8月6日の23時台に話した内容をまとめてください。",  # gave the keyword 「の に話した内容をまとめてください。」
    "4月15日の9時台に話した内容を教えて。",
    "2024年4月29日に話したことをまとめて。",
    "先週の火曜日に何を話しましたか？",  # gave 「?」
    "What did we talk about on April 15, 2024 at 9 am?",
    "Summarize what we discussed on May 22, 2024.",
    "8月6日の23時台に話した内容を箇条書きで",
])
def test_a_request_that_names_only_a_time_has_no_keyword(request_text):
    plan = local_plan(request_text, ANCHOR)
    assert plan.time_range is not None
    assert plan.keywords == () and plan.terms == [] and plan.query == ""


@pytest.mark.parametrize("request_text,expected", [
    ("Reply with just OK", ()),
    ("One word", ()),
    ("Short answer", ()),
    ("ラーメンの話を一言で", ("ラーメン",)),
    ("ラーメンについて箇条書きでまとめて", ("ラーメン",)),
    ("映画の話を3行でまとめて", ("映画",)),
    ("What did we decide about the Hong Kong server? Short answer.", ("Hong", "Kong", "server")),
    ("Which city did we pick for the offsite? One word.", ("city", "pick", "offsite")),
    ("Summarize the ramen talk in 3 bullet points.", ("ramen",)),
])
def test_instructions_about_the_answer_are_no_keywords(request_text, expected):
    plan = local_plan(request_text, None)
    assert plan.keywords == expected
    assert not {"一言", "箇条", "reply", "ok", "word", "short", "answer", "bullet", "point"} & set(plan.terms)


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

    from semhist.pipeline.llmplan import llm_time as _llm_time
    anchor = datetime(2025, 7, 29, tzinfo=timezone.utc)
    assert _llm_time({"time": {"start": "2025-07-20", "end": "2025-07-22"}}, anchor).end.day == 23
    assert _llm_time({"time": {"start": "2025-08-20", "end": "2025-08-22"}}, anchor) is None  # after the thread
    assert _llm_time({"time": {"start": "2025-07-22", "end": "2025-07-20"}}, anchor) is None  # reversed
    assert _llm_time({"time": {"start": "soon"}}, anchor) is None
    assert _llm_time({"time": None}, anchor) is None
    assert _llm_time({"time": {"start": "9999-12-31"}}, anchor) is None  # was an OverflowError
