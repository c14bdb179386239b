"""Bursts over HTTP: several messages of one conversation arriving 0.5-2 s apart (a Teams user
typing short lines, with Teams' clock behind or ahead of ours) through `semhist agent`, and
concurrent proxy requests on one thread: every message stored once, in the order said, every
request answered, and every prompt forwarded holds its request once, with what was stored after it
only after it (the library side of this is in tests/test_history.py: the request once,
what came after it after it)."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import httpx
import pytest

from semhist.indexers.store import open_store

from .servers import Process, Recorder, free_port
from .test_agent import activity, start_agent, stored

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("skew", [-30, 30])
def test_a_burst_through_the_agent_is_stored_once_in_order_and_answered(tmp_path, cache_dir, skew):
    server = start_agent(tmp_path, cache_dir)
    conv = f"19:burst{skew + 100}@thread.tacv2"
    said = [f"line {i}: the meeting moves to room {300 + i}" for i in range(4)]
    now = datetime.now(timezone.utc) + timedelta(seconds=skew)
    codes: list[int] = []

    def post(i: int) -> None:
        stamp = (now + timedelta(seconds=0.5 * i)).isoformat().replace("+00:00", "Z")
        body = activity(said[i], f"burst-{i}", conv, timestamp=stamp)
        codes.append(httpx.post(server.url + "/api/messages", json=body, timeout=60).status_code)

    try:
        workers = []
        for i in range(len(said)):
            workers.append(threading.Thread(target=post, args=(i,)))
            workers[-1].start()
            time.sleep(0.5)
        for w in workers:
            w.join()
        again = activity(said[1], "burst-1", conv)  # Teams redelivers one of them
        assert httpx.post(server.url + "/api/messages", json=again, timeout=60).status_code == 200
    finally:
        server.stop()
    assert codes == [200] * len(said)
    assert [m.content for m in stored(server, conv) if m.role == "user"] == said
    assert "Traceback" not in server.output()


def test_concurrent_proxy_requests_on_one_thread_lose_and_repeat_nothing(tmp_path, cache_dir):
    recorder = Recorder(f"http://127.0.0.1:{free_port()}/v1")  # keeps what semhist forwards; its upstream is down
    env = {"SEMHIST_DATA_DIR": str(tmp_path / "data"), "SEMHIST_CACHE_DIR": str(cache_dir)}
    server = Process(["serve", "--upstream", recorder.url], env, tmp_path / "serve.log")
    said = [f"question {i}: what about item {i}?" for i in range(5)]
    codes: list[int] = []

    def ask(i: int) -> None:  # max_tokens tells which request a forwarded prompt was built for
        body = {"model": "m", "messages": [{"role": "user", "content": said[i]}], "max_tokens": 100 + i}
        codes.append(httpx.post(server.url + "/v1/chat/completions", json=body, timeout=60,
                                headers={"X-Semhist-Thread": "together"}).status_code)

    try:
        workers = [threading.Thread(target=ask, args=(i,)) for i in range(len(said))]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        listed = {t["thread"]: t["messages"] for t in httpx.get(server.url + "/v1/threads", timeout=30).json()}
    finally:
        server.stop()
        recorder.close()
    assert codes == [502] * len(said)  # the upstream is down; each turn is kept for the next
    assert listed["together"] == len(said)
    assert "Traceback" not in server.output()
    store = open_store(f"sqlite:///{tmp_path / 'data' / 'semhist.sqlite3'}")
    try:
        order = [m.content for m in store.messages("together")]  # the order they were stored in
    finally:
        store.close()
    assert sorted(order) == sorted(said) and len(recorder.bodies) == len(said)
    for body in recorder.bodies:
        texts = [m["content"] for m in body["messages"] if m["role"] == "user" and m["content"] in said]
        request = said[body["max_tokens"] - 100]
        assert texts.count(request) == 1, texts  # the request once
        # what was stored before it comes before it; what came after it (another request in
        # flight) only after it, in the order stored
        at = texts.index(request)
        assert texts[:at] == [t for t in order[:order.index(request)] if t in texts[:at]], (request, texts)
        assert texts[at + 1:] == [t for t in order[order.index(request) + 1:] if t in texts[at + 1:]], (request, texts)

