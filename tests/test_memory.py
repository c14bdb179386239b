"""Summary and structured strategies: storage semantics (no LLM), then the real local LLM."""

import json

import pytest

from datetime import datetime, timedelta, timezone

from semhist.indexers.loader import loads
from semhist.kernel.budget import Budget
from semhist.kernel.settings import Settings
from semhist.indexers.store import NewMessage, SummaryRecord
from semhist import Engine
from tests.conftest import SAMPLES
from tests.test_cli import semhist
from tests.test_strategies import check_boundary_rules, tool_thread

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=timezone.utc)


def thread_of(texts, thread_id="t"):
    rows = [{"role": "user" if i % 2 == 0 else "assistant", "content": t, "timestamp": 1_750_000_000 + 60 * i}
            for i, t in enumerate(texts)]
    return loads(json.dumps({"id": thread_id, "messages": rows})).only()


def _stored(store, texts, thread_id="t"):
    rows = [NewMessage("user" if i % 2 == 0 else "assistant", t, T0 + timedelta(minutes=i), tokens=5)
            for i, t in enumerate(texts)]
    store.append(thread_id, rows, None)
    return store.messages(thread_id)


def test_summary_is_stored_by_message_key_and_forgotten_with_what_it_covers(store):
    a, b, c, d = _stored(store, ["a", "b", "c", "d"])
    store.put_summary("t", SummaryRecord(b.key, "they said a and b", "model-x", 10, "2026-01-01T00:00:00+00:00",
                                         a.sort_ts, b.sort_ts), 12.0)
    got = store.summary("t")
    assert (got.upto, got.text, got.model, got.covered_tokens) == (b.key, "they said a and b", "model-x", 10)
    store.forget_messages("t", ids=[d.id])
    assert store.summary("t") is not None  # d was not summarized
    store.forget_messages("t", ids=[a.id])
    assert store.summary("t") is None  # never serve a summary of forgotten text


def test_newer_statement_supersedes_older_but_both_are_kept(store):
    first, _, second, _ = _stored(store, ["budget is 5,000 yen", "ok", "actually budget is 8,000 yen", "ok"])
    old = store.record_extraction("t", first.key, (first.id, first.sort_ts, "constraint", "budget 5,000 yen",
                                                   first.content, None), "m", 1.0)
    store.record_extraction("t", second.key, (second.id, second.sort_ts, "constraint", "budget 8,000 yen",
                                              second.content, old), "m", 1.0)
    assert [n.quote for n in store.notes("t")] == ["actually budget is 8,000 yen"]
    everything = store.notes("t", active_only=False)
    assert len(everything) == 2 and everything[0].superseded_by == everything[1].id
    assert store.notes_progress("t") == second.key


def test_a_user_message_is_read_once_ever_and_forgetting_takes_its_statement(store):
    first, *_ = _stored(store, ["I can't eat spicy food", "noted"])
    note = (first.id, first.sort_ts, "constraint", "no spicy food", first.content, None)
    assert store.record_extraction("t", first.key, note, "m", 1.0) is not None
    assert store.record_extraction("t", first.key, note, "m", 1.0) is None  # another replica got there first
    assert len(store.notes("t")) == 1
    store.forget_messages("t", ids=[first.id])
    assert store.notes("t") == []
    store.forget_thread("t")
    assert store.notes_progress("t") is None and store.summary("t") is None


def test_memory_strategies_without_an_llm_are_a_clear_error(engine, ramen):
    from semhist.kernel.errors import ConfigError
    with pytest.raises(ConfigError, match="summary needs an LLM"):
        engine.ask(ramen, "ラーメンの話をまとめて", strategy="summary")


def test_compare_says_what_it_skipped_without_an_llm(cache_dir):
    out = semhist("compare", str(SAMPLES / "ramen.json"), "ラーメンの話をまとめて", cache_dir=cache_dir).stdout
    assert "skipped: summary, structured" in out and "need an LLM" in out


@pytest.fixture
def llm_engine(llm_env, tmp_path):
    def make(**overrides):
        return Engine(Settings.load(env=llm_env, cache_dir=tmp_path, **overrides))
    return make


@pytest.mark.llm
@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["summary", "structured"])
def test_boundary_rules_with_compaction(llm_engine, strategy):
    rows = [m.to_openai() | ({"timestamp": m.timestamp.isoformat()} if m.timestamp else {})
            for m in tool_thread().messages]
    operator = "Operator: from now on answer in English only."
    rows.insert(9, {"role": "system", "content": operator, "timestamp": rows[8]["timestamp"]})
    thread = loads(json.dumps(rows)).only()
    engine = llm_engine(recent=4)
    result = engine.ask(thread, "what was the Hong Kong load?", strategy=strategy, budget=Budget.parse("45%"))
    assert result.memory.compacted and result.memory.summary is not None
    check_boundary_rules(thread, result, Budget.parse("45%"))  # system prompt first and verbatim, etc.
    # the operator's instruction is kept verbatim, never handed to the summarizer
    assert operator in [m["content"] for m in result.prompt.messages if m["role"] == "system"]


@pytest.mark.llm
@pytest.mark.slow
def test_compaction_is_incremental_rare_and_keeps_the_prefix_stable(llm_engine):
    texts = []
    for i in range(14):
        texts += [f"Tell me about topic {i}: gardening tip number {i}.", f"Tip {i}: water the plants in the morning."]
    engine = llm_engine(recent=4)
    thread = thread_of(texts, "grow")
    budget = Budget.parse("400")
    first = engine.ask(thread, "any more tips?", strategy="summary", budget=budget)
    assert first.memory.compacted
    summary = first.memory.summary
    # everything older than the kept turns
    assert summary.upto == engine.index(thread).keys[first.prompt.selection.history[0][0] - 1]
    # one more exchange: no new compaction, and the prompt before the new turns is unchanged
    longer = thread_of(texts + ["And tip 14?", "Tip 14: mulch the soil."], "grow")
    second = engine.ask(longer, "any more tips?", strategy="summary", budget=budget)
    assert not second.memory.compacted and second.memory.llm_calls == 0
    assert second.memory.summary.upto == summary.upto
    n = len(first.prompt.messages) - 1 - 4  # system/summary + aged turns, before recent and request
    assert list(second.prompt.messages[:n]) == list(first.prompt.messages[:n])


@pytest.mark.llm
@pytest.mark.slow
def test_reduced_probe_set_with_the_real_llm(llm_engine):
    """Two probes (JA, EN): the structured list must hold the early detail; lenient on wording."""
    from semhist.indexers.loader import load
    from tests.conftest import ROOT

    threads = {t.id: t for t in load(ROOT / "data" / "probes" / "probes.jsonl").threads}
    details = {"probe-ja-00": "香港", "probe-en-02": "spicy"}
    kept = 0
    for tid, detail in details.items():
        thread = threads[tid]
        result = llm_engine().ask(thread, thread.queries[0].text, strategy="structured", budget=Budget.parse("50%"))
        assert result.memory.compacted
        kept += any(detail in n.quote for n in result.memory.notes)
        assert all(n.kind in ("constraint", "preference", "decision", "fact") for n in result.memory.notes)
    assert kept >= 1


@pytest.mark.llm
@pytest.mark.slow
def test_structured_on_a_long_thread_reads_each_statement_once(llm_env, tmp_path, cache_dir):
    """Above the view limit each request searches another view; the statement list is read
    from the store by message id, so it neither shrinks nor is read again."""
    from semhist.indexers.loader import load
    from semhist import History
    from tests.conftest import ROOT

    thread = {t.id: t for t in load(ROOT / "data" / "probes" / "probes.jsonl").threads}["probe-en-02"]
    history = History(Settings.load(env=llm_env, cache_dir=cache_dir, db=f"sqlite:///{tmp_path / 'db.sqlite3'}",
                                    data_dir=tmp_path, view_limit=20, recent=4, compaction_calls=60))
    history.ingest("p", thread)
    budget, request = Budget.parse("50%"), thread.queries[0].text
    first = history.ask("p", request, strategy="structured", budget=budget)
    assert first.memory.extracted >= 1 and not first.memory.backlog
    assert any("spicy" in n.quote for n in first.memory.notes)
    stamp = thread.messages[-1].timestamp
    for i, text in enumerate(["By the way, I am allergic to peanuts.", "What about dessert?", "And drinks?"]):
        history.add("p", "user", text, timestamp=stamp + timedelta(minutes=2 * i + 1))
        history.add("p", "assistant", "Noted.", timestamp=stamp + timedelta(minutes=2 * i + 2))
    second = history.ask("p", request, strategy="structured", budget=budget)
    assert second.memory.extracted <= 1  # the peanut statement, once it is older than the recent turns
    third = history.ask("p", request, strategy="structured", budget=budget)
    assert third.memory.extracted == 0 and third.memory.summaries == 0
    assert len(third.memory.notes) >= len(first.memory.notes)
    sources = [n.source_id for n in history.store.notes("p", active_only=False)]
    assert len(sources) == len(set(sources))  # no statement read twice
    history.close()


@pytest.mark.llm
@pytest.mark.slow
def test_cli_compare_shows_seven_strategies_and_stats(llm_env, tmp_path):
    from tests.conftest import ROOT
    probe = ROOT / "data" / "probes" / "probes.jsonl"
    env = {**llm_env, "SEMHIST_DB": f"sqlite:///{tmp_path / 'bot.sqlite3'}", "SEMHIST_DATA_DIR": str(tmp_path)}
    semhist("ingest", str(probe), "--source-thread", "probe-en-02", "--quiet", cache_dir=tmp_path, env=env)
    out = semhist("compare", "--thread", "probe-en-02", "Plan tonight's dinner menu for me.", "--budget", "50%",
                  "--json", cache_dir=tmp_path, env=env).stdout
    rows = {r["strategy"] for r in json.loads(out)["strategies"]}
    assert rows == {"full", "window", "token-budget", "summary", "structured", "utterances", "blocks"}
    report = json.loads(semhist("stats", "--json", cache_dir=tmp_path, env=env).stdout)
    figures = report["threads"]["probe-en-02"]
    assert figures["asks"] == 7 and figures["compactions"] >= 1 and figures["llm_calls"] >= 2
    assert 0 < figures["sent_vs_full"] <= 0.5


@pytest.mark.parametrize("text,expected", [
    ("明日の天気は？", True), ("おすすめは？ 安いのは？", True), ("What's up?", True),
    ("By the way, our servers are in Frankfurt. Anyway, how do I read the logs?", False),
    ("予算は5,000円です。", False), ("I can't eat spicy food.", False),
    ("おすすめのラーメン屋を教えてください。", True), ("週末の天気を調べてもらえますか。", True),
    ("週末の天気、調べてもらえますか。", False),  # a comma may join a statement: the model reads it
    ("Can you recommend a hotel near the station.", True), ("Please summarize the meeting", True),
    ("Please remember that I am allergic to nuts.", False), ("静かな部屋がほしいです。", False),
    ("明日は休みなので、ゆっくり話せます。", False), ("How we deploy: blue-green, always.", False),
    ("What I want is a quiet room.", False),
    ("予算は5000円なので、おすすめのラーメン屋を教えてください。", False),
    ("来月から大阪に引っ越しますので、よろしくお願いします。", False),
    ("Could you book a table for Friday, my budget is $50.", False),
    ("List of my allergies: peanuts and shellfish.", False),
    # greetings and thanks state nothing; an interjection is no clause of its own
    ("Morning! Can you help me plan the infrastructure for our new chat service?", True),
    ("こんにちは！おすすめのラーメン屋を教えてください。", True), ("ねえ、明日の天気を調べて。", True),
    ("Hi there. Please summarize the weather for tomorrow.", True), ("Thanks!", True), ("こんにちは！", True),
    ("Thanks! I'll book a table for six at 12:30 then.", False), ("Hi, I'm allergic to peanuts.", False),
    ("ところで、うちのサーバーは香港にあるんだ。ログの見方を教えて。", False),
])
def test_only_pure_questions_skip_extraction(text, expected):
    from semhist.memory.compaction import only_questions
    assert only_questions(text) is expected


@pytest.mark.parametrize("reply,expected", [
    ('{"kind": "constraint", "text": "budget 5,000 yen", "replaces": null}', ("constraint", "budget 5,000 yen", None)),
    ('{"kind": "fact", "text": "servers in Frankfurt", "replaces": 3}', ("fact", "servers in Frankfurt", 3)),
    ('{"kind": "fact", "text": "x", "replaces": 99}', ("fact", "x", None)),  # unknown id: no supersession
    ('{"kind": "none", "text": "", "replaces": null}', None),
    ('{"kind": "wish", "text": "x"}', None),
    ("no json here", None),
])
def test_parse_note(reply, expected):
    from semhist.memory.compaction import parse_note
    assert parse_note(reply, {3}) == expected


def test_probe_set_shape():
    from tests.conftest import ROOT
    rows = [json.loads(line) for line in (ROOT / "data" / "probes" / "probes.jsonl").open(encoding="utf-8")]
    assert len(rows) >= 40 and {r["language"] for r in rows} == {"ja", "en"}
    kinds = {r["queries"][0]["category"] for r in rows}
    assert kinds == {"constraint_probe", "request_probe", "supersession_probe", "casual_probe"}
    for r in rows:
        q, texts = r["queries"][0], [m["content"] for m in r["messages"]]
        at = q["relevant_message_indices"][0]
        assert r["messages"][at]["role"] == "user" and all(d in texts[at] for d in q["detail"])
        assert at <= 10 and len(texts) >= 40  # early, then buried
        assert not any(d in m for m in texts[at + 2:] for d in q["detail"])  # said once (and its reply)
        assert not any(d in m for m in texts[at:] for d in q.get("stale", []))  # the old value only before
        assert all(plain in texts[:at] for plain in q.get("never_noted", []))


@pytest.mark.parametrize("reply,limit,expected", [
    # the packaged model's summary once ended 「- 明」: the token limit stopped it mid-word
    ("- ラーメン: 一蘭のとんこつ\n- すみれの味噌ラーメン\n- 明", 100, "- ラーメン: 一蘭のとんこつ\n- すみれの味噌ラーメン"),
    ("- Hong Kong is primary\n- Singapore is the fallback", 100, "- Hong Kong is primary\n- Singapore is the fallback"),
    ("One sentence here. Another one that goes on and on and on", 6, "One sentence here."),
])
def test_summaries_end_on_whole_lines(reply, limit, expected):
    from semhist.memory.compaction import whole_lines
    assert whole_lines(reply, limit) == expected
