"""Bursts over HTTP: several messages of one conversation arriving 0.5-2 s apart (a Teams user
typing short lines, with Teams' clock behind or ahead of ours) through `semhist agent`, and
concurrent proxy requests on one thread: every message stored once, in the order said, every
request answered. What each prompt holds is checked in tests/test_history.py (the request once,
what came after it after it)."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import httpx
import pytest

from .servers import Process, free_port
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
    env = {"SEMHIST_DATA_DIR": str(tmp_path / "data"), "SEMHIST_CACHE_DIR": str(cache_dir)}
    server = Process(["serve", "--upstream", f"http://127.0.0.1:{free_port()}/v1"], env, tmp_path / "serve.log")
    said = [f"question {i}: what about item {i}?" for i in range(5)]
    codes: list[int] = []

    def ask(text: str) -> None:
        body = {"model": "m", "messages": [{"role": "user", "content": text}]}
        codes.append(httpx.post(server.url + "/v1/chat/completions", json=body, timeout=60,
                                headers={"X-Semhist-Thread": "together"}).status_code)

    try:
        workers = [threading.Thread(target=ask, args=(text,)) for text in said]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        listed = {t["thread"]: t["messages"] for t in httpx.get(server.url + "/v1/threads", timeout=30).json()}
    finally:
        server.stop()
    assert codes == [502] * len(said)  # the upstream is down; each turn is kept for the next
    assert listed["together"] == len(said)
    assert "Traceback" not in server.output()
