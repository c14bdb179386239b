"""Stored threads end to end with the real embedder and FAISS, on SQLite and PostgreSQL."""

from __future__ import annotations

import logging
import random
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from semhist.indexers.embed import cache_key
from semhist.indexers.embed import PASSAGE
from semhist.kernel.errors import IndexMismatchError, InputError
from semhist.kernel.model import Message, Thread
from semhist.indexers.segment import TimeGapSegmenter
from semhist.kernel.budget import Budget
from .conftest import RAMEN_REQUEST, RAMEN_TURNS, chat as _chat


def test_ingest_then_ask_keeps_every_ramen_turn_and_logs_it(make_history, ramen):
    h = make_history()
    assert h.ingest("team-1", ramen).added == len(ramen.messages)
    again = h.ingest("team-1", ramen)
    assert (again.added, again.skipped) == (0, len(ramen.messages))  # idempotent
    result = h.ask("team-1", RAMEN_REQUEST)
    kept = {result.thread.messages[p].index for p in result.included}
    stored_ids = [m.id for m in h.store.messages("team-1")]
    assert {stored_ids[i] for i in RAMEN_TURNS} <= kept
    (turn,) = h.log("team-1")
    assert turn["keyword"] == ["ラーメン"] and turn["extractor"] == "local"
    assert turn["retrieved"] and turn["retrieved"][0]["score"] > 0.3
    assert turn["prompt_tokens"] == result.prompt.tokens and turn["timings_ms"]["total_ms"] > 0
    recent = [result.thread.messages[p].index for p in result.prompt.selection.history_ids]
    assert turn["recent"] == [recent[0], recent[-1], len(recent)] and recent[-1] == stored_ids[-1]


class CountingEmbedder:
    def __init__(self, inner):
        self.inner, self.id, self.dim, self.texts = inner, inner.id, inner.dim, 0

    def embed(self, texts, kind=PASSAGE):
        self.texts += len(texts)
        return self.inner.embed(texts, kind)


def test_append_costs_one_embedding_and_never_touches_closed_blocks(make_history):
    h = make_history()
    msgs = _chat(300, datetime(2026, 1, 1, tzinfo=timezone.utc))
    h.ingest("t", Thread("t", tuple(msgs)))
    closed = h.store.blocks("t")
    counter = CountingEmbedder(h.parts.ingestor.embedder)
    h.parts.ingestor.embedder = counter
    tail_sizes = []
    for i in range(20):
        h.add("t", "user", f"follow-up {i} about the deploy", timestamp=msgs[-1].timestamp + timedelta(seconds=30 * (i + 1)))
        tail_sizes.append(len(h.store.tail("t")))
    assert counter.texts == 20  # one embedding per appended message
    assert h.store.blocks("t")[:len(closed)] == closed  # closed blocks unchanged
    assert max(tail_sizes) <= 60  # the work per append is bounded by the open block, not the thread


def test_incremental_blocks_equal_segmenting_the_whole_thread(make_history):
    h = make_history(batch_size=7)
    msgs = _chat(200, datetime(2026, 1, 1, tzinfo=timezone.utc), seed=3)
    h.ingest("t", Thread("t", tuple(msgs)))
    stored = h.store.messages("t", with_vectors=True)
    vectors = np.vstack([m.vector for m in stored])
    whole = TimeGapSegmenter().segment(msgs, vectors)
    position = {m.id: p for p, m in enumerate(stored)}
    got = [(tuple(position[i] for i in b.message_ids), b.parts) for b in h.store.blocks("t")]
    assert got == [(b.message_ids, b.parts) for b in whole[:-1]]  # sub-segments too: the drift history is kept
    assert any(len(b.parts) > 1 for b in whole[:-1])


def test_no_query_ever_returns_another_threads_text(make_history):
    h = make_history()
    rng = random.Random(11)
    words = ["ramen", "deploy", "budget", "offsite", "flaky test", "holiday", "invoice", "design review"]
    threads = [f"user-{i}" for i in range(10)]
    start = datetime(2026, 2, 1, tzinfo=timezone.utc)
    for t in threads:
        msgs = [Message(j, "user" if j % 2 == 0 else "assistant", f"[{t}] {rng.choice(words)} {rng.choice(words)}",
                        start + timedelta(minutes=j)) for j in range(rng.randint(5, 30))]
        h.ingest(t, Thread(t, tuple(msgs)))
    for _ in range(40):
        t = rng.choice(threads)
        request = f"what did we say about the {rng.choice(words)}?"
        vector = h.parts.embedder.embed([request])[0]
        assert all(m.content.startswith(f"[{t}]") for m, _ in h.search(t, vector, k=50))
        result = h.ask(t, request, log_turn=False)
        text = "\n".join(str(m["content"]) for m in result.prompt.messages)
        others = [o for o in threads if o != t and f"[{o}]" in text]
        assert not others, f"{t}'s prompt holds text of {others}"


def test_forget_removes_text_vectors_cache_and_files(make_history, ramen):
    h = make_history(view_limit=20)  # searched through views: the thread has a FAISS file
    h.ingest("a", ramen)
    h.ingest("b", ramen)
    h.ask("a", RAMEN_REQUEST)
    tv = h.vectors("a")
    assert tv.wait(60)
    h.close()
    path = tv.path
    assert path.exists()
    texts = [m.content for m in ramen.messages]
    h.parts.embedder.embed(texts)  # as a file ask would have cached them
    h.forget("a")
    assert not path.exists() and h.store.count("a") == 0 and not h.store.has_thread("a")
    assert not h.parts.embedder.cache.get_many([cache_key(h.parts.embedder.id, PASSAGE, texts[3])], h.parts.embedder.dim)
    with pytest.raises(InputError):
        h.ask("a", RAMEN_REQUEST)
    assert h.store.count("b") == len(ramen.messages)  # other threads untouched
    h.add("a", "user", "a new start")  # the id can be used again, as a new thread
    assert h.store.manifest("a")["embedder"] == h.parts.embedder.id and h.store.count("a") == 1


def test_forget_messages_and_before_a_date(make_history, ramen):
    h = make_history()
    h.ingest("a", ramen)
    target = next(m for m in h.store.messages("a") if "すみれ" in m.content)
    h.forget("a", ids=[target.id])
    vector = h.parts.embedder.embed(["すみれの味噌ラーメン"])[0]
    assert all(m.id != target.id for m, _ in h.search("a", vector, k=100))
    text = "\n".join(str(m["content"]) for m in h.ask("a", "すみれについて教えて").prompt.messages)
    assert target.content not in text
    cutoff = h.store.messages("a")[30].timestamp
    older = sum(1 for m in h.store.messages("a") if m.timestamp < cutoff)
    removed = h.forget("a", before=cutoff)
    assert removed == older > 0 and all(m.timestamp >= cutoff for m in h.store.messages("a"))


def test_retention_forgets_old_messages_on_write(make_history):
    h = make_history()
    now = datetime.now(timezone.utc)
    old = [Message(i, "user", f"old {i}", now - timedelta(days=40, minutes=-i)) for i in range(5)]
    h.ingest("r", Thread("r", tuple(old)))
    h.add("r", "user", "fresh")
    assert h.set_retention("r", 30) == 5
    assert [m.content for m in h.store.messages("r")] == ["fresh"]
    other = make_history()  # another process, applying it on its next write
    other.ingest("r", Thread("r", tuple(old)))
    assert other.store.count("r") == 1


def test_pii_is_masked_before_storing_and_embedding(make_history):
    h = make_history(pii="on")
    h.add("p", "user", "連絡先は taro@example.jp と 090-1234-5678、カードは 4111 1111 1111 1111 です")
    (stored,) = h.store.messages("p", with_vectors=True)
    assert stored.content == "連絡先は [EMAIL] と [PHONE]、カードは [CARD] です"
    expected = h.parts.embedder.embed([stored.content])[0]
    assert np.allclose(stored.vector, expected, atol=1e-5)
    h.ask("p", "メールは taro@example.jp で合ってる？")
    assert h.log("p")[-1]["request"] == "メールは [EMAIL] で合ってる？"  # the turn log is masked too
    plain = make_history()
    plain.add("q", "user", "taro@example.jp")
    assert plain.store.messages("q")[0].content == "taro@example.jp"  # off by default


def test_large_threads_go_approximate_with_high_recall(make_history):
    h = make_history(ann_threshold=500, view_limit=400)
    msgs = _chat(900, datetime(2026, 1, 1, tzinfo=timezone.utc), seed=5)
    h.ingest("big", Thread("big", tuple(msgs)))
    tv = h.vectors("big")
    assert tv.wait(60) and tv.kind == "hnsw" and tv.size == 900
    stored = h.store.messages("big", with_vectors=True)
    matrix = np.vstack([m.vector for m in stored])
    ids = np.array([m.id for m in stored])
    rng = np.random.default_rng(0)
    recalls = []
    for q in rng.choice(len(stored), 50, replace=False):
        query = matrix[q] + 0.05 * rng.standard_normal(matrix.shape[1]).astype(np.float32)
        exact = set(ids[np.argsort(-(matrix @ query))[:10]])
        recalls.append(len(exact & set(tv.search(query, 10)[1])) / 10)
    assert np.mean(recalls) >= 0.95
    result = h.ask("big", "what about the deploy on Friday?")
    assert h.log("big")[-1]["view"]["whole_thread"] is False and len(result.thread.messages) < 900
    assert result.prompt.selection.retrieved


def test_corrupt_or_missing_faiss_is_rebuilt_with_a_log_line(make_history, ramen, caplog):
    h = make_history(view_limit=20)
    h.ingest("c", ramen)
    tv = h.vectors("c")
    tv.wait(60)
    path, size = tv.path, tv.size
    h.close()
    path.write_bytes(path.read_bytes()[:200] + b"garbage")
    with caplog.at_level(logging.INFO, logger="semhist.vectors"):
        fresh = make_history(view_limit=20)
        tv = fresh.vectors("c")
        assert tv.wait(60) and tv.size == size
    assert any("corrupt" in r.getMessage() for r in caplog.records)
    fresh.close()
    path.unlink()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="semhist.vectors"):
        tv = make_history(view_limit=20).vectors("c")
        assert tv.wait(60) and tv.size == size
    assert any("missing" in r.getMessage() for r in caplog.records)


def test_another_embedder_is_refused_until_reindex(make_history, ramen):
    make_history().ingest("e", ramen)
    other = make_history(embedder="e5-small")
    with pytest.raises(IndexMismatchError, match="semhist reindex"):
        other.ask("e", RAMEN_REQUEST)
    assert other.reindex("e") == len(ramen.messages)
    assert other.ask("e", RAMEN_REQUEST).prompt.selection.retrieved
    assert other.index("e").dim == 384


def test_reindex_tokenizes_a_thread_stored_by_older_rules_again(make_history, caplog):
    from semhist.indexers.lexical import TERMS_VERSION, tokenize

    h = make_history()
    for role, text in [("user", "我叫小王，我住在上海。"), ("assistant", "你好，小王！"),
                       ("user", "今天天气怎么样？"), ("assistant", "今天是晴天。")]:
        h.add("zh", role, text)
    # as an older version left it: no terms for Chinese text, a manifest without a terms version
    stored = h.store.messages("zh", with_vectors=True)
    h.store.set_derived("zh", [(m.id, m.vector, ()) for m in stored], h.parts.embedder.id)
    old = {k: v for k, v in h.store.manifest("zh").items() if k != "terms"}
    h.store.put_manifest("zh", old)
    with caplog.at_level(logging.WARNING, logger="semhist.history"):
        before = make_history()
        assert not before.index("zh").lexical.scores(tokenize("上海")).any()
    assert any("semhist reindex --thread zh" in r.getMessage() for r in caplog.records)
    assert before.reindex("zh") == 4
    assert h.store.manifest("zh")["terms"] == TERMS_VERSION
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="semhist.history"):
        after = make_history()
        assert after.index("zh").lexical.scores(tokenize("上海"))[0] > 0
    assert not caplog.records


def test_a_replica_never_returns_what_another_forgot(make_history, ramen):
    writer, reader = make_history(), make_history()
    writer.ingest("a", ramen)
    vector = reader.parts.embedder.embed(["すみれの味噌ラーメン"])[0]
    (top, _), *_ = reader.search("a", vector, k=5)  # the reader's index is loaded and warm
    writer.forget("a", ids=[top.id])
    assert all(m.id != top.id for m, _ in reader.search("a", vector, k=100))
    assert len(reader.index("a").rows) == len(ramen.messages) - 1
    writer.add("a", "user", "すみれの新メニューが出た")
    assert any("新メニュー" in m.content for m, _ in reader.search("a", vector, k=100))


def test_a_request_stored_before_the_ask_is_sent_once(make_history):
    h = make_history()
    h.add("t", "user", "最初の話題はラーメンでした")
    h.add("t", "assistant", "いいですね、一蘭でしたね")
    h.add("t", "user", "ラーメンの話をまとめて")  # a bot stores the user's message, then asks
    messages = h.ask("t", "ラーメンの話をまとめて").prompt.messages
    assert [m["content"] for m in messages].count("ラーメンの話をまとめて") == 1
    assert messages[-1] == {"role": "user", "content": "ラーメンの話をまとめて"}


def test_add_many_stores_all_or_nothing_and_returns_every_id(make_history):
    h = make_history()
    first = h.add_many("t", [{"role": "user", "content": "a", "id": "k1"}, {"role": "assistant", "content": "b"}])
    again = h.add_many("t", [{"role": "user", "content": "c", "id": "k2"}, {"role": "user", "content": "a", "id": "k1"},
                             {"role": "user", "content": "c", "id": "k2"}])
    assert again.added == 1
    assert again.every_id[1] == first.every_id[0] and again.every_id[0] == again.every_id[2]
    with pytest.raises(InputError) as bad:
        h.add_many("t", [{"role": "user", "content": "x"}, {"role": "user", "content": "y", "timestamp": "nope"}])
    assert (bad.value.index, bad.value.field) == (1, "timestamp")
    with pytest.raises(InputError) as bad:
        h.add_many("t", [{"role": "user", "content": "x", "timestamp": 1e20}])
    assert bad.value.field == "timestamp" and "out of range" in str(bad.value)
    assert h.store.count("t") == 3


def test_a_tool_loop_ends_the_prompt_with_its_results_not_the_request_again(make_history):
    history = make_history()
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Tokyo"}'}}
    turn = [{"role": "user", "content": "What is the weather in Tokyo?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 21}'}]
    history.add_many("agent", [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}, *turn])
    messages = history.ask("agent", turn[0]["content"]).prompt.messages
    assert [m["role"] for m in messages[-3:]] == ["user", "assistant", "tool"]
    assert messages[-2]["tool_calls"] == [call] and messages[-1]["tool_call_id"] == "call_1"
    assert sum(m.get("content") == turn[0]["content"] for m in messages) == 1
    # once the model has answered, the same words are a new request
    history.add_many("agent", [{"role": "assistant", "content": "21 degrees"}])
    assert history.ask("agent", turn[0]["content"]).prompt.messages[-1] == turn[0]


def test_stats_report_prefix_reuse_and_budget_hits(make_history):
    """A bot's loop: append the request, ask, append the reply. With `full` each prompt starts
    with the previous one (a provider cache reads nearly all of it); `window` slides."""
    from semhist.stats import stats

    h = make_history()
    t0 = datetime(2025, 7, 1, 9, 0, tzinfo=timezone.utc)
    h.add("bot", "system", "You are the ops bot.", timestamp=t0)
    for i in range(8):
        at = t0 + timedelta(minutes=2 * i + 1)
        h.add("bot", "user", f"question {i} about the Hong Kong server", timestamp=at)
        h.ask("bot", f"question {i} about the Hong Kong server", strategy="full")
        h.ask("bot", f"question {i} about the Hong Kong server", strategy="window", budget=Budget.parse("60"))
        h.add("bot", "assistant", f"answer {i}: the load is fine", timestamp=at + timedelta(seconds=30))
    figures = stats(h.store, "bot")["threads"]["bot"]
    full_only = [t for t in h.store.turns("bot") if t["strategy"] == "full"]
    assert all("prefix" in t for t in full_only)
    assert 0.5 < figures["prefix_reuse"] < 1.0
    assert figures["at_budget"] > 0  # the 60-token window prompts are full
    assert figures["over_budget"] == 0


def test_an_edit_replaces_the_message_at_its_place_and_the_old_text_is_gone(make_history):
    from datetime import datetime, timedelta, timezone

    from semhist import Budget

    history = make_history()
    t = datetime(2026, 1, 5, 9, tzinfo=timezone.utc)
    talks = [("budget", ["Let's fix the offsite budget.", "What amount?", "The budget is 5,000 euros.", "Noted."]),
             ("hotel", ["Which hotel?", "Aurora or Borealis.", "Aurora then.", "Booked Aurora."]),
             ("train", ["Train times?", "The 9:10 or the 11:40.", "The 9:10.", "Noted, 9:10."])]
    history.add_many("t", [{"role": "user" if i % 2 == 0 else "assistant", "content": line, "id": f"{topic}{i}",
                            "timestamp": (t + timedelta(days=day, minutes=i)).isoformat()}
                           for day, (topic, lines) in enumerate(talks) for i, line in enumerate(lines)])
    assert history.edit("t", "nobody", "x") is None
    new = history.edit("t", "budget2", "The budget is 50,000 euros.")
    contents = [m.content for m in history.store.messages("t")]
    assert contents[2] == "The budget is 50,000 euros." and "The budget is 5,000 euros." not in contents
    assert history.store.id_of("t", "budget2") == new
    prompt = history.ask("t", "What was the budget amount?", budget=Budget.parse("200")).prompt
    shown = "\n".join(str(m["content"]) for m in prompt.messages)
    assert "50,000 euros" in shown and "5,000 euros" not in shown.replace("50,000 euros", "")


def test_an_edit_remakes_blocks_only_when_the_message_was_in_one(make_history):
    from datetime import datetime, timedelta, timezone

    h = make_history()
    t = datetime(2026, 1, 5, 9, tzinfo=timezone.utc)
    h.add_many("e", [{"role": "user" if i % 2 == 0 else "assistant", "content": f"line {i} about topic {i // 6}",
                      "id": f"k{i}", "timestamp": (t + timedelta(hours=3 * (i // 6), minutes=i)).isoformat()}
                     for i in range(60)])
    stored = h.store.messages("e")
    tail = next(m for m in reversed(stored) if m.block_no is None)
    closed = next(m for m in stored if m.block_no is not None and m.block_no >= 0)
    remade = []
    resegment = h.store.resegment
    h.store.resegment = lambda *a, **k: remade.append(a[0]) or resegment(*a, **k)
    keys = {m.id: f"k{i}" for i, m in enumerate(stored)}
    h.edit("e", keys[tail.id], "an edited recent line")
    assert remade == []  # the open tail: no block to remake (the whole thread was segmented twice before)
    h.edit("e", keys[closed.id], "an edited old line")
    assert remade == ["e"]  # once
    assert [m.content for m in h.store.messages("e")].count("an edited old line") == 1


@pytest.mark.parametrize("skew", [-30, 0, 30])  # the Teams timestamps behind, with or ahead of ours
@pytest.mark.parametrize("burst", [2, 5])
def test_a_burst_keeps_the_request_once_and_what_came_after_it_after_it(make_history, burst, skew):
    from datetime import datetime, timedelta, timezone

    history = make_history()
    t = datetime.now(timezone.utc) - timedelta(hours=1)
    history.add_many("b", [{"role": "user", "content": "hello", "timestamp": t.isoformat()},
                           {"role": "assistant", "content": "hi", "timestamp": (t + timedelta(seconds=5)).isoformat()}])
    said = [f"part {i} of what I meant" for i in range(burst)]
    now = datetime.now(timezone.utc) + timedelta(seconds=skew)
    for i, text in enumerate(said):  # 0.5-2 s apart, stored before any answer
        history.add("b", "user", text, timestamp=now + timedelta(seconds=0.5 + 1.5 * i / burst), key=f"k{i}")
    for i, request in enumerate(said):  # each ask, as a bot answering in order (or a parallel one)
        sent = [m["content"] for m in history.ask("b", request).prompt.messages if m["role"] == "user"]
        assert sent.count(request) == 1, sent
        assert sent[sent.index(request):] == said[i:], sent  # nothing stored after it is placed before it


def test_what_was_forgotten_is_recorded_without_its_text(make_history):
    """Each forget leaves a record of when, how many, the span and why, never the text; date
    cuts (retention runs) extend one record; forgetting the thread removes them all."""
    from datetime import datetime, timezone

    h = make_history()
    h.add_many("gone", [{"role": "user", "content": f"secret {i}", "id": f"k{i}",
                         "timestamp": f"2026-11-0{i}T09:00:00+00:00"} for i in range(1, 8)])
    h.forget("gone", ids=[h.store.id_of("gone", "k5"), h.store.id_of("gone", "k6")])
    h.edit("gone", "k7", "secret 7, edited")
    h.forget("gone", before=datetime(2026, 11, 2, tzinfo=timezone.utc))
    h.forget("gone", before=datetime(2026, 11, 3, tzinfo=timezone.utc))
    records = h.store.forgotten("gone")
    assert [(r["reason"], r["messages"]) for r in records] == [("forget", 2), ("edit", 1), ("before", 2)]
    assert records[0]["first_ts"] == datetime(2026, 11, 5, 9, tzinfo=timezone.utc).timestamp()
    assert "secret" not in repr(records)
    h.forget("gone")
    assert h.store.forgotten("gone") == []


def test_kept_prompts_are_the_messages_sent_and_a_forget_clears_them(make_history):
    h = make_history(log_prompts=True, pii="on")
    h.add_many("kept", [{"role": "user", "content": "my number is 090-1234-5678", "id": "a"},
                        {"role": "assistant", "content": "noted"}])
    result = h.ask("kept", "call me at 090-1234-5678 about ramen")
    (turn,) = h.log("kept")
    assert [m["role"] for m in turn["prompt"]] == [m["role"] for m in result.prompt.messages]
    assert "090-1234-5678" not in repr(turn["prompt"])  # masked like the thread, the request too
    h.forget("kept", ids=[h.store.id_of("kept", "a")])
    assert all("prompt" not in t for t in h.log("kept"))
    plain = make_history()
    plain.add("plain", "user", "hello")
    plain.ask("plain", "hello?")
    assert "prompt" not in plain.log("plain")[0]  # off by default


def test_the_log_says_what_the_budget_left_out(make_history, ramen):
    h = make_history(hit_window=2)  # a hit's smallest part, a ±2 window, does not fit 250 tokens
    h.ingest("tight", ramen)
    result = h.ask("tight", RAMEN_REQUEST, budget=Budget.parse("250"))
    (turn,) = h.log("tight")
    left = result.prompt.selection.left_out
    assert left and len(turn["left_out"]) == len(left) <= 3  # the ramen topic does not fit in 250 tokens
    kept = {result.thread.messages[p].index for p in result.included}
    for entry in turn["left_out"]:
        assert entry["block_messages"][0] not in kept and entry["messages"] >= 1
