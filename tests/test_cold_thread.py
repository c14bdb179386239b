"""A thread a process has never seen (a new replica, a thread routed or evicted elsewhere before):
its first ask reads what the request needs, not the whole thread; counted, not timed."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

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
