"""A thread a process has never seen (a new replica, a thread routed or evicted elsewhere before):
its first ask reads what the request needs, not the whole thread; counted, not timed."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import datetime, timedelta, timezone

from semhist import render
from semhist.kernel.model import Message, Thread
from semhist.kernel.budget import Budget
from semhist.history.states import WHOLE_AT_ONCE

from .conftest import chat
from .workcount import count_work

T0 = datetime(2026, 2, 2, 9, 0, tzinfo=timezone.utc)
N = WHOLE_AT_ONCE + 300  # a thread long enough for its first ask to read a view
NEEDLE = "The offsite in Zanzibar has a budget of 4,200 euros, approved by Keiko."


def _thread() -> Thread:
    messages = chat(N, T0, seed=3)
    at = 120  # an old message, far from the recent turns
    messages[at] = replace(messages[at], content=NEEDLE, role="user")
    return Thread("cold", tuple(messages))


def _text(result) -> str:
    return "\n".join(str(m.get("content") or "") for m in result.prompt.messages)


def _started(h):
    """The background worker made before counting: its thread is not traced, the request's is."""
    h.parts.executor.submit(lambda: None).result()
    return h


def test_the_first_ask_of_a_thread_never_seen_reads_a_view_then_the_whole_thread_is_kept(make_history):
    writer = make_history()
    writer.ingest("19:cold@thread.v2", _thread())
    h = _started(make_history())  # another process: nothing of the thread in memory
    ask = lambda: h.ask("19:cold@thread.v2", "what is the budget of the Zanzibar offsite?",  # noqa: E731
                        budget=Budget.parse("1500"))
    first, work = count_work(ask)
    assert NEEDLE in _text(first)  # found through the view, as the whole thread would find it
    assert work["store_rows"] < N / 2, work  # not the thread's N messages
    h.parts.executor.submit(lambda: None).result()  # the whole thread, read meanwhile
    assert h.parts.states.loads == 1
    waiting = h.parts.states.peek("19:cold@thread.v2")
    assert waiting.index is None and waiting.nbytes >= waiting.loading.result().nbytes > 0  # counted by the cache
    again, work = count_work(ask)
    assert NEEDLE in _text(again) and work["store_rows"] <= 2, work  # now from memory
    entry = h.parts.states.peek("19:cold@thread.v2")
    assert entry.index is not None and entry.closed.nbytes == 0  # the view's messages are not kept twice


def test_a_files_first_ask_and_the_whole_index_still_read_it_whole(make_history):
    h = _started(make_history())
    thread = _thread()
    result, work = count_work(lambda: h.ask(thread, "what is the budget of the Zanzibar offsite?"))
    assert NEEDLE in _text(result) and work["store_rows"] >= N  # a file is asked as `semhist eval` measures it
    other = _started(make_history())
    index = other.index(h.put(thread))  # waits for nothing: read whole in place
    assert len(index.messages) == N and other.parts.states.loads == 1


def test_writes_while_the_thread_is_read_in_the_background_are_not_lost(make_history):
    writer = make_history()
    writer.ingest("19:busy@thread.v2", _thread())
    h = _started(make_history())
    h.ask("19:busy@thread.v2", "offsite budget?")
    for i in range(3):  # the bot's turns go on whatever the background read is doing
        h.add("19:busy@thread.v2", "user", f"new plan {i}: the offsite moves to Okinawa", name="Aiko",
              timestamp=T0 + timedelta(days=30, minutes=i))
        assert f"new plan {i}" in _text(h.ask("19:busy@thread.v2", "where does the offsite move?"))
    h.parts.executor.submit(lambda: None).result()
    last = h.ask("19:busy@thread.v2", "where does the offsite move?")
    assert all(f"new plan {i}" in _text(last) for i in range(3))
    assert h.parts.states.peek("19:busy@thread.v2").index.marker.messages == N + 3
    assert isinstance(last.thread.messages[0], Message)


# -- a first ask against a warm one: the same stretches under the same names -------------------
SMALL = 400  # messages: past the first ask's whole-read limit the test sets (the default is 2,000)
NOWHERE = "what did we decide about the Lisbon trip?"  # words no message holds
ZANZIBAR = "what is the budget of the Zanzibar offsite?"


def _store_small(make_history, thread_id: str, **settings) -> int:
    """The thread's first SMALL messages stored; the needle's store id."""
    writer = make_history(**settings)
    writer.ingest(thread_id, Thread("cold", _thread().messages[:SMALL]))
    return {m.content: m.id for m in writer.store.messages(thread_id)}[NEEDLE]


def _named(h, thread_id: str, result) -> dict[tuple[int, ...], int]:
    """Each named stretch (store ids) and the block it is named by, checked against the store:
    the number of a closed block it is of (a reply may run into the next), or one after the
    closed ones for the open tail."""
    closed = h.store.block_frequencies(thread_id, ())[1]
    out = {}
    for stretch in render.ask_dict(result)["retrieved"]:
        ids = tuple(stretch["message_indices"])
        owners = set(h.store.block_of(thread_id, list(ids)).values())
        assert stretch["block_id"] in owners or (None in owners and stretch["block_id"] >= closed), \
            (stretch, owners, closed)
        out[ids] = stretch["block_id"]
    return out


def _holding(names: dict[tuple[int, ...], int], message: int) -> int | None:
    return next((b for ids, b in names.items() if message in ids), None)


def test_a_first_ask_names_stretches_as_a_warm_ask_does_and_says_what_its_view_left_out(make_history):
    tid = "19:first@thread.v2"
    needle = _store_small(make_history, tid)
    h = _started(make_history())
    h.parts.states.whole_at_once = 100  # a thread past it: the first ask reads a view
    ask = lambda request: h.ask(tid, request, budget=Budget.parse("1500"))  # noqa: E731
    held = threading.Event()  # the background read waits behind it, so that both first asks read views
    h.parts.executor.submit(held.wait)
    first, first_nowhere = ask(ZANZIBAR), ask(NOWHERE)
    held.set()
    h.parts.executor.submit(lambda: None).result()  # the whole thread, read meanwhile
    warm, warm_nowhere = ask(ZANZIBAR), ask(NOWHERE)
    assert len(first.thread.messages) < SMALL and len(warm.thread.messages) == SMALL
    # the stretches both name are named alike: by the store's block numbers, not the view's
    cold_names, warm_names = _named(h, tid, first), _named(h, tid, warm)
    assert _holding(cold_names, needle) == _holding(warm_names, needle) == h.store.block_of(tid, [needle])[needle]
    assert all(warm_names[ids] == b for ids, b in cold_names.items() if ids in warm_names)
    assert f"block {_holding(cold_names, needle)} " in render.ask_text(render.ask_dict(first))
    # the view left out what only a similarity search over the whole thread finds: the first
    # asks' notes say so, in the JSON and the text, and the warm asks' do not
    for cold, again in ((first, warm), (first_nowhere, warm_nowhere)):
        said = f"searched a view of {len(cold.thread.messages):,} of {SMALL:,} messages"
        assert any(said in n for n in render.ask_dict(cold)["notes"]), cold.prompt.notes
        assert f"note: first ask of this thread in this process: {said}" in render.ask_text(render.ask_dict(cold))
        assert not any("first ask" in n for n in again.prompt.notes), again.prompt.notes
    # words that point nowhere: the view holds the recent turns only, a smaller prompt, and says so
    assert any("point to no older block" in n for n in first_nowhere.prompt.notes)
    assert first_nowhere.prompt.tokens < warm_nowhere.prompt.tokens


def test_a_view_of_a_thread_past_view_limit_names_the_stores_blocks(make_history):
    tid = "19:long@thread.v2"
    needle = _store_small(make_history, tid, view_limit=100)
    viewed, whole = _started(make_history(view_limit=100)), _started(make_history())
    viewed.ask(tid, ZANZIBAR)
    assert viewed.vectors(tid).wait(60)  # its FAISS index, built in the background
    through_view = viewed.ask(tid, ZANZIBAR, budget=Budget.parse("1500"))
    read_whole = whole.ask(tid, ZANZIBAR, budget=Budget.parse("1500"))
    assert len(through_view.thread.messages) < SMALL == len(read_whole.thread.messages)
    assert not any("first ask" in n for n in through_view.prompt.notes)  # its nearest messages were searched
    in_view, in_whole = _named(viewed, tid, through_view), _named(whole, tid, read_whole)
    assert _holding(in_view, needle) == _holding(in_whole, needle) == viewed.store.block_of(tid, [needle])[needle]
    assert all(in_whole[ids] == b for ids, b in in_view.items() if ids in in_whole)
