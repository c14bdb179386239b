"""The bot's path: append -> ask -> append on a stored thread that grows while it is asked,
with the real embedder, FAISS, SQLite and PostgreSQL."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from semhist.kernel.model import Message, Thread
from semhist.kernel.budget import Budget

from .conftest import RAMEN_REQUEST, SHARED_DATA
from .conftest import chat as _chat

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


class Calls:
    """Counts calls of some store methods (the store itself does the work)."""

    def __init__(self, store, names):
        self.counts = dict.fromkeys(names, 0)
        for name in names:
            real = getattr(store, name)

            def counted(*args, _real=real, _name=name, **kwargs):
                self.counts[_name] += 1
                return _real(*args, **kwargs)
            setattr(store, name, counted)


def _prompt_text(result) -> str:
    return "\n".join(str(m.get("content") or "") for m in result.prompt.messages)


def test_appends_update_the_state_and_asks_only_read_it(make_history):
    h = make_history()
    msgs = _chat(300, T0)
    h.ingest("bot", Thread("bot", tuple(msgs)))
    h.ask("bot", "what about the deploy on Friday?")
    calls = Calls(h.store, ["load", "changes"])
    last = msgs[-1].timestamp
    for turn in range(30):
        h.add("bot", "user", f"turn {turn}: is the flaky test fixed?", timestamp=last + timedelta(seconds=20 * turn))
        result = h.ask("bot", "what about the deploy on Friday?", budget=Budget.parse("600"))
        assert result.prompt.messages[-2]["content"] == f"turn {turn}: is the flaky test fixed?"
        h.add("bot", "assistant", f"answer {turn}", timestamp=last + timedelta(seconds=20 * turn + 5))
    assert calls.counts == {"load": 0, "changes": 0}  # its own writes were applied, nothing read again
    assert h.parts.states.loads == 1
    index = h.index("bot")
    assert len(index) == 360 and [b.message_ids for b in index.blocks] == \
        [b.message_ids for b in h.parts.states._load("bot").blocks]  # the same as reading the thread afresh


def test_another_process_writes_are_caught_up_by_adding_them(make_history):
    writer, reader = make_history(), make_history()
    writer.ingest("bot", Thread("bot", tuple(_chat(200, T0))))
    reader.ask("bot", "budget for Q3?")
    calls = Calls(reader.store, ["load", "changes"])
    for i in range(5):
        writer.add("bot", "user", f"the offsite moved to Kyoto, note {i}", timestamp=T0 + timedelta(days=1, minutes=i))
    result = reader.ask("bot", "where is the team offsite?")
    assert "the offsite moved to Kyoto, note 4" in _prompt_text(result)
    assert calls.counts == {"load": 0, "changes": 1} and reader.parts.states.loads == 1


def test_a_message_that_sorts_before_the_newest_is_placed_by_time(make_history):
    h = make_history()
    h.ingest("bot", Thread("bot", tuple(_chat(50, T0))))
    h.ask("bot", "ramen?")
    stamp = h.store.messages("bot")[10].timestamp + timedelta(seconds=1)  # a replica's late write
    h.add("bot", "user", "a late note about ramen in Sapporo", timestamp=stamp)
    index = h.index("bot")
    assert [m.index for m in index.messages] == [m.id for m in h.store.messages("bot")]
    assert index.messages[11].content == "a late note about ramen in Sapporo"


def test_per_thread_state_is_bounded(make_history):
    h = make_history(cache_threads=3)
    for i in range(8):
        h.ingest(f"t{i}", Thread(f"t{i}", tuple(_chat(300, T0, seed=i))))
        h.ask(f"t{i}", "budget for Q3?")
        assert len(h.parts.states) <= 3
    one = h.parts.states.nbytes / len(h.parts.states)
    tiny = make_history(cache_mb=max(1, int(2.5 * one / 2**20)))
    for i in range(8):
        tiny.ask(f"t{i}", "budget for Q3?")
        assert tiny.parts.states.nbytes <= tiny.settings.cache_mb * 2**20 or len(tiny.parts.states) == 1
    assert len(tiny.parts.states) <= 3
    assert tiny.ask("t0", "budget for Q3?").prompt.selection.retrieved  # evicted threads come back from the store


@pytest.mark.parametrize("view_limit", [5_000, 20])
def test_a_forgotten_thread_used_again_is_a_new_thread_everywhere(make_history, ramen, view_limit):
    bot, other = make_history(view_limit=view_limit), make_history(view_limit=view_limit)
    bot.ingest("x", ramen)
    bot.ask("x", RAMEN_REQUEST)  # its state is cached (and, for a long thread, its FAISS index built)
    if view_limit < len(ramen.messages):
        assert bot.vectors("x").wait(60)
    other.forget("x")
    fresh = [Message(i, "user" if i % 2 == 0 else "assistant", f"new topic {i}: the Lisbon office", T0 + timedelta(minutes=i))
             for i in range(len(ramen.messages))]  # as many messages as before: the count alone proves nothing
    other.ingest("x", Thread("x", tuple(fresh)))
    text = _prompt_text(bot.ask("x", RAMEN_REQUEST))
    assert not any(m.content in text for m in ramen.messages if len(m.content) > 8)
    bot.close()
    if view_limit < len(ramen.messages):
        path = bot.parts.thread_vectors("x").path
        assert not path.exists() or json.loads(path.open("rb").readline())["thread_uid"] == \
            other.store.marker("x").uid  # no file ever holds the forgotten vectors


def test_files_and_stored_threads_take_one_path(engine, make_history, ramen):
    stored = make_history()
    stored.ingest("team", ramen)
    from_store = stored.ask("team", RAMEN_REQUEST, budget=Budget.parse("50%"))
    from_file = engine.ask(ramen, RAMEN_REQUEST, budget=Budget.parse("50%"))
    assert from_file.prompt.messages == from_store.prompt.messages
    assert engine.store.count(engine.put(ramen)) == len(ramen.messages)


def test_a_long_thread_view_takes_lexical_and_time_candidates(make_history):
    h = make_history(view_limit=100)
    msgs = _chat(600, T0, seed=2)
    special = [Message(0, "user", "we should visit Zanzibar for the retreat", msgs[200].timestamp + timedelta(seconds=1)),
               Message(0, "assistant", "Zanzibar in March works for everyone", msgs[200].timestamp + timedelta(seconds=2))]
    thread = Thread("long", tuple(msgs[:201] + special + msgs[201:]))
    h.ingest("long", thread)
    result = h.ask("long", "Zanzibar", budget=Budget.parse("800"))
    assert "Zanzibar in March works for everyone" in _prompt_text(result)
    assert len(result.thread.messages) < len(thread.messages)  # a view, not the whole thread
    day = msgs[100].timestamp
    named = h.ask("long", f"what did we talk about on {day:%d %B %Y}?", budget=Budget.parse("2000"))
    assert named.keywords.time_range is not None
    stored_day = [m for m in h.store.messages("long") if m.timestamp.date() == day.date()]
    viewed_day = [m for m in named.thread.messages if m.timestamp and m.timestamp.date() == day.date()]
    assert len(viewed_day) == min(len(stored_day), 400)  # the named day's messages are all in the view
    first = named.prompt.selection.retrieved[0]
    assert first.score is None and named.thread.messages[first.message_ids[0]].index == stored_day[0].id


def test_a_views_stretches_are_dated_where_the_thread_has_a_gap(make_history):
    """A view holds some blocks of a long thread: two of them next to each other there are not
    neighbours in the thread unless they are consecutive blocks, so each retrieved stretch is
    dated where the thread has talk between (a view once joined them under one date)."""
    rows = []
    t = datetime(2026, 3, 2, 9, tzinfo=timezone.utc)
    for k in range(120):  # the offsite every tenth stretch, other talk between, an hour apart
        topic = "the Zanzibar offsite budget" if k % 10 == 0 else f"the printer on floor {k}"
        for j in range(3):
            rows.append({"role": "user" if j % 2 == 0 else "assistant", "name": "Hanako" if j % 2 == 0 else None,
                         "content": f"[{len(rows)}] About {topic}: point {j}.",
                         "timestamp": (t + timedelta(hours=k, seconds=20 * j)).isoformat()})
    h = make_history(view_limit=100)
    h.add_many("long", [{k: v for k, v in r.items() if v is not None} for r in rows])
    result = h.ask("long", "What did we say about the Zanzibar offsite budget?", budget=Budget.parse("1500"))
    assert len(result.thread.messages) < len(rows)  # a view
    context = next(m["content"] for m in result.prompt.messages if "<retrieved_history>" in str(m["content"]))
    previous = None
    for line in context.splitlines():
        if line.startswith("[") and "]" in line and ":" not in line.split("]", 1)[1]:
            previous = None  # a stretch's date header
        elif line[:1] != "<" and "[" in line and line.split("[", 1)[1].split("]")[0].isdigit():
            n = int(line.split("[", 1)[1].split("]")[0])
            assert previous is None or n == previous + 1, context  # one stretch: neighbours in the thread
            previous = n


@pytest.mark.slow
@pytest.mark.shared_data
def test_index_rebuilds_never_stall_an_ask(make_history, cache_dir):
    """A thread crossing the HNSW threshold, and one whose FAISS file is missing: the ask that
    notices returns at once; the index is built in the background."""
    from semhist.indexers.embed import CachedEmbedder, EmbeddingCache, get_embedder
    from semhist.indexers.loader import load
    from semhist.kernel.model import embedding_text

    base = [m for t in load(SHARED_DATA / "locomo.jsonl").threads[:3] for m in t.messages]
    cached = CachedEmbedder(get_embedder("use-m3"), EmbeddingCache(cache_dir / "embeddings.sqlite3"))
    vectors = cached.embed([embedding_text(m) for m in base])  # the real vectors, embedded once
    h = make_history(ann_threshold=8000, view_limit=500)
    copies = 8000 // len(base) + 1
    span = base[-1].timestamp - base[0].timestamp + timedelta(days=1)
    msgs = [Message(i, m.role, m.content, m.timestamp + (i // len(base)) * span, m.name)
            for i, m in enumerate(base * copies)][:7990]
    real = h.parts.ingestor.embedder

    class Ready:  # hands the ingest those real vectors, in order
        id, dim, pos = real.id, real.dim, 0

        def embed(self, texts, kind="passage"):
            out = np.vstack([vectors[(Ready.pos + i) % len(base)] for i in range(len(texts))])
            Ready.pos += len(texts)
            return out
    h.parts.ingestor.embedder = Ready()
    h.ingest("big", Thread("big", tuple(msgs)))
    h.parts.ingestor.embedder = real
    h.ask("big", "What did Caroline research?")
    tv = h.vectors("big")
    assert tv.wait(120) and tv.kind == "flat" and tv.size == 7990
    for i in range(20):
        h.add("big", "user", f"follow-up {i}", timestamp=msgs[-1].timestamp + timedelta(minutes=i + 1))
    start = time.perf_counter()
    result = h.ask("big", "What did Caroline research?")
    assert time.perf_counter() - start < 1.0 and result.prompt.selection.retrieved
    assert not tv.ready and tv.kind == "flat"  # HNSW is being built; the exact index answers meanwhile
    assert h.ask("big", "Who is Melanie?").prompt.selection.retrieved
    assert tv.wait(120) and tv.kind == "hnsw"
    h.ask("big", "What did Caroline research?")
    assert tv.wait(60) and tv.size == 8010
    h.close()
    tv.path.unlink()
    cold = make_history(ann_threshold=8000, view_limit=500)
    start = time.perf_counter()
    assert cold.ask("big", "What did Caroline research?").prompt.messages
    assert time.perf_counter() - start < 3.0  # the embedder loads; the index is built in the background
    assert cold.vectors("big").wait(120) and cold.vectors("big").size == 8010


def test_a_file_above_the_view_limit_is_asked_through_its_view(cache_dir, ramen):
    from semhist.kernel.settings import Settings
    from semhist import Engine

    from .conftest import RAMEN_TURNS

    engine = Engine(Settings.load(env={}, cache_dir=cache_dir, view_limit=30), llm=None)
    result = engine.ask(ramen, RAMEN_REQUEST)
    assert len(result.thread.messages) < len(ramen.messages)  # a view...
    kept = {result.thread.messages[p].index for p in result.included}
    assert RAMEN_TURNS <= kept  # ...read in the file's own message indices
    assert result.thread.ground_truth(RAMEN_REQUEST) is not None
    engine.close()


def test_an_append_with_the_callers_key_is_stored_once(make_history):
    h = make_history()
    first = h.add("teams", "user", "hello from Teams", key="1722211200000")
    again = h.add("teams", "user", "hello from Teams", key="1722211200000")  # a retried webhook
    assert first == again and h.store.count("teams") == 1
    assert h.add("teams", "user", "hello again", key="1722211200001") != first


def test_nothing_grows_per_ask_in_a_long_running_process(make_history):
    """A bot process asks for months: what it keeps per request must be bounded (a cache
    keyed by each prompt's context text once grew by several KB an ask)."""
    import gc
    import tracemalloc

    h = make_history(view_limit=150)  # searched through views: the path of long threads
    msgs = _chat(200, T0, seed=4)
    h.ingest("bot", Thread("bot", tuple(msgs)))
    assert h.vectors("bot").wait(60)
    requests = [f"what did we say about the {t}?" for t in ("budget for Q3", "deploy on Friday", "team offsite",
                                                             "flaky test", "ramen in Sapporo")]

    def asks(n: int) -> None:  # the same requests (their embeddings are cached), other budgets
        for i in range(n):
            h.ask("bot", requests[i % len(requests)], budget=Budget.parse(str(700 + 7 * i)), log_turn=False)
    asks(20)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    asks(150)
    gc.collect()
    grown = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(before, "filename"))
    tracemalloc.stop()
    assert grown < 300_000, f"{grown / 1e6:.2f} MB more Python memory after 150 asks"
