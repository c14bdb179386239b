"""Against the real local model (Qwen2.5-Coder-1.5B via llama.cpp on 127.0.0.1), never a fake.

Assertions are lenient where a model's wording varies, strict where our code decides.
"""

import json

import pytest

from semhist.kernel.settings import Settings
from semhist import Engine
from semhist.pipeline.keyword import extract_keywords
from semhist.llm import make_llm
from tests.conftest import RAMEN_REQUEST, RAMEN_TURNS, SAMPLES
from tests.test_cli import semhist

pytestmark = [pytest.mark.llm, pytest.mark.slow]


def test_llm_keyword_for_the_ramen_request(llm_env):
    llm = make_llm(Settings.load(env=llm_env).llm)
    kw = extract_keywords(RAMEN_REQUEST, llm)
    assert kw.source == "llm", kw.reason
    assert any("ラーメン" in k for k in kw.keywords)
    assert kw.llm_calls == 1


def test_llm_keyword_for_an_english_request(llm_env):
    llm = make_llm(Settings.load(env=llm_env).llm)
    kw = extract_keywords("What did we decide about the Hong Kong server?", llm)
    assert kw.source == "llm", kw.reason
    assert any("hong kong" in k.lower() or "server" in k.lower() for k in kw.keywords)


def test_blocks_with_the_llm_keyword_keep_every_ramen_turn(llm_env, ramen, cache_dir):
    engine = Engine(Settings.load(env=llm_env, cache_dir=cache_dir))
    result = engine.ask(ramen, RAMEN_REQUEST)
    assert result.keywords.source == "llm" and result.llm_calls == 1
    assert RAMEN_TURNS <= result.included
    assert result.prompt.tokens <= 0.5 * result.full_tokens


def test_cli_ask_json_and_answer_with_the_real_llm(llm_env, cache_dir):
    proc = semhist("ask", str(SAMPLES / "ramen.json"), RAMEN_REQUEST, "--json", "--answer",
                   cache_dir=cache_dir, env=llm_env)
    data = json.loads(proc.stdout)
    assert data["keyword"]["source"] == "llm"
    assert data["llm_calls"] == 2  # one keyword call, one answer
    assert isinstance(data["answer"], str) and data["answer"].strip()
    # what the model was sent, shown: the answer guidance first, the reminder just before the request
    from semhist.kernel.tokens import count_messages
    from semhist.pipeline.asker import ANSWER_GUIDANCE, ANSWER_REMINDER

    messages = data["messages"]
    assert messages[0] == {"role": "system", "content": ANSWER_GUIDANCE}
    assert messages[-2] == {"role": "system", "content": ANSWER_REMINDER["ja"]}
    assert messages[-1] == {"role": "user", "content": RAMEN_REQUEST}
    assert data["prompt_tokens"] == count_messages(messages)


def test_compare_counts_one_llm_call(llm_env, cache_dir):
    proc = semhist("compare", str(SAMPLES / "ramen.json"), RAMEN_REQUEST, "--json", cache_dir=cache_dir, env=llm_env)
    rows = {r["strategy"]: r for r in json.loads(proc.stdout)["strategies"]}
    assert rows["blocks"]["keyword_source"] == "llm" and rows["blocks"]["llm_calls"] == 1
    assert rows["full"]["llm_calls"] == 0
    assert rows["blocks"]["evidence_kept"] == 24


def test_model_is_assembled_once_and_verified(tmp_path):
    from semhist.llm.server import MODEL_SHA256, model_is_built, model_path

    assert not model_is_built(tmp_path)
    path = model_path(tmp_path)
    assert model_is_built(tmp_path) and path.stat().st_size > 1_000_000_000
    assert path.with_suffix(".sha256").read_text().strip() == MODEL_SHA256
    mtime = path.stat().st_mtime_ns
    assert model_path(tmp_path) == path and path.stat().st_mtime_ns == mtime  # not rebuilt
    path.unlink()  # 1.1 GB: do not leave a second copy behind


def test_llm_plan_with_a_named_time(llm_env):
    from datetime import datetime, timedelta, timezone

    llm = make_llm(Settings.load(env=llm_env).llm)
    anchor = datetime(2025, 7, 29, 10, 41, tzinfo=timezone(timedelta(hours=9)))
    kw = extract_keywords("先週の火曜日に話したラーメンのことをまとめて", llm, anchor=anchor)
    assert kw.source == "llm", kw.reason
    assert any("ラーメン" in k for k in kw.keywords)
    assert kw.intent in ("topic", "fact")
    assert kw.time_range.start.date().isoformat() == "2025-07-22"  # the local parser is exact here
    assert "先週" not in kw.search_text


def test_llm_time_for_what_the_local_parser_cannot_read(llm_env):
    from datetime import datetime, timedelta, timezone

    llm = make_llm(Settings.load(env=llm_env).llm)
    anchor = datetime(2025, 7, 29, 10, 41, tzinfo=timezone(timedelta(hours=9)))
    kw = extract_keywords("三日前に話した映画のことを教えて", llm, anchor=anchor)
    assert kw.source == "llm", kw.reason
    if kw.time_range is not None:  # a small model may not give one; when it does, it must be sane
        assert kw.time_range.start < kw.time_range.end and kw.time_range.start <= anchor


def test_the_llm_never_confines_a_timeless_request_to_a_day(llm_env):
    """The packaged model answers almost every request with a time range (the day of the last
    message); only a request that names a time may get one."""
    from datetime import datetime, timezone

    llm = make_llm(Settings.load(env=llm_env).llm)
    anchor = datetime(2023, 10, 22, 20, 0, tzinfo=timezone.utc)
    kw = extract_keywords("When did Caroline go to the LGBTQ support group?", llm, anchor=anchor)
    assert kw.time_range is None and kw.intent == "fact"
    assert kw.origin["intent"] == "local" and "time" not in kw.origin
    assert kw.dense_text == "When did Caroline go to the LGBTQ support group?"


def test_eval_answer_scores_with_the_real_model(llm_env, cache_dir, tmp_path):
    """F1 and the judge where a gold answer exists, coverage where only evidence does."""
    thread = json.loads((SAMPLES / "english.json").read_text(encoding="utf-8"))
    thread["queries"].append({"query": "In which city is the main server?", "relevant_message_indices": [4, 5],
                              "answer": "Hong Kong", "category": "locomo_cat4"})
    path = tmp_path / "english_gold.json"
    path.write_text(json.dumps(thread), encoding="utf-8")
    proc = semhist("eval", str(path), "--answer", "--strategy", "blocks", "--strategy", "window", "--json",
                   "--details", "--quiet", cache_dir=cache_dir, env=llm_env)
    report = json.loads(proc.stdout)
    blocks = report["strategies"]["blocks"]
    assert blocks["llm_failures"] == 0, report["llm_failures"]
    assert 0 <= blocks["answer_f1"] <= 1 and 0 <= blocks["judge_accuracy"] <= 1
    assert 0 <= blocks["answer_coverage"] <= 1 and blocks["answer_ms_p50"] > 0
    assert 0 < blocks["prompt_prefix_reuse"] < 1  # the answer guidance opens every prompt
    gold = next(q for q in report["queries"] if q["query"].startswith("In which city"))
    assert "f1" in gold["answers"]["blocks"] and "coverage" not in gold["answers"]["blocks"]
    assert report["categories"]["blocks"]["locomo_cat4"]["answer_f1"] is not None
