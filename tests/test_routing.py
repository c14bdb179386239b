"""Three `semhist serve` replicas on one PostgreSQL behind a real load balancer (Debian's
HAProxy with docs/samples/haproxy.cfg as the docs give it), hashing on the thread.

Each thread's requests reach one replica, so each thread's state is loaded once in the
whole deployment; a replica killed while bots write loses none of their messages (a bot
sends a message again with its id when an attempt fails, and the id keeps it once), its
threads move to the others while it is down and come back to it when it returns.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import httpx
import pytest

from .conftest import drop_all, wait_for
from .servers import Process, free_port

pytestmark = pytest.mark.slow

CONFIG = Path(__file__).resolve().parents[1] / "docs" / "samples" / "haproxy.cfg"
THREADS = [f"19:team{k}@thread.tacv2" for k in range(18)]


def haproxy() -> str:
    found = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin")
    if not found:
        pytest.fail("no HAProxy: apt-get install haproxy (.ci/run installs it)", pytrace=False)
    return found


class Balancer:
    """haproxy in the foreground with the documented config, its addresses from the environment."""

    def __init__(self, replicas: list[Process], log: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "SEMHIST_LB_BIND": f"127.0.0.1:{self.port}",
               **{f"SEMHIST_REPLICA_{i}": f"127.0.0.1:{r.port}" for i, r in enumerate(replicas, 1)}}
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen([haproxy(), "-db", "-f", str(CONFIG)], env=env, stdout=out,
                                         stderr=subprocess.STDOUT)
        assert wait_for(lambda: _answers(self.url + "/healthz"), timeout=20), log.read_text(errors="replace")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _replica(env: dict[str, str], base: Path, name: str, port: int | None = None) -> Process:
    return Process(["serve"], env, base / f"{name}.log", port=port)


def _loads(replica: Process) -> float:
    """The replica's thread-state loads (its /metrics)."""
    text = httpx.get(replica.url + "/metrics", timeout=10).text
    return sum(float(v) for v in re.findall(r"^semhist_thread_loads(?:_total)?(?:\{[^}]*\})? ([0-9.e+]+)$", text, re.M))


def _send(client: httpx.Client, thread: str, message: dict, attempts: int = 20) -> str:
    """A bot's write: again with the same id while an attempt fails (the replica died under
    it, or the balancer has not yet seen it go); the replica that stored it."""
    for _ in range(attempts):
        try:
            r = client.post(f"/v1/threads/{thread}/messages", json={"messages": [message]})
            if r.status_code < 500:
                r.raise_for_status()
                return r.headers["x-semhist-replica"]
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"{thread}: message {message['id']} not stored after {attempts} attempts")


@pytest.fixture
def deployment(postgres_url, tmp_path, cache_dir):
    drop_all(postgres_url)
    env = {"SEMHIST_DB": postgres_url, "SEMHIST_CACHE_DIR": str(cache_dir)}
    replicas = []
    try:
        for i in range(3):
            replicas.append(_replica({**env, "SEMHIST_DATA_DIR": str(tmp_path / f"r{i}")}, tmp_path, f"replica{i + 1}"))
        balancer = Balancer(replicas, tmp_path / "haproxy.log")
        yield env, replicas, balancer
        balancer.stop()
    finally:
        for r in replicas:
            r.stop()


def test_a_threads_requests_reach_one_replica_and_its_state_loads_once(deployment):
    env, replicas, balancer = deployment
    served: dict[str, set[str]] = defaultdict(set)
    with httpx.Client(base_url=balancer.url, timeout=60) as client:
        for t in THREADS:
            for k in range(4):
                served[t].add(_send(client, t, {"role": "user" if k % 2 == 0 else "assistant", "id": f"{t}-{k}",
                                                "name": "Aiko" if k % 2 == 0 else None,
                                                "content": f"Message {k} about the Hakone offsite budget."}))
        before = sum(_loads(r) for r in replicas)
        for t in THREADS:
            for request in ("What budget did we agree?", "And the hotel?"):
                r = client.post(f"/v1/threads/{t}/context", json={"request": request, "budget": 800})
                r.raise_for_status()
                served[t].add(r.headers["x-semhist-replica"])
            served[t].add(client.get(f"/v1/threads/{t}/messages").headers["x-semhist-replica"])
    assert all(len(names) == 1 for names in served.values()), served  # one replica per thread
    spread = Counter(next(iter(names)) for names in served.values())
    assert len(spread) == 3, spread  # and the threads spread over the three
    # each thread's state was loaded at most once in the whole deployment (the replica that
    # wrote it may already hold it): asks never made another replica read a thread whole
    assert sum(_loads(r) for r in replicas) - before <= len(THREADS)


def test_a_replica_killed_under_writes_loses_none_and_gets_its_threads_back(deployment, tmp_path):
    env, replicas, balancer = deployment
    home: dict[str, str] = {}
    with httpx.Client(base_url=balancer.url, timeout=60) as client:
        for t in THREADS:
            home[t] = _send(client, t, {"role": "user", "name": "Aiko", "id": f"{t}-0", "content": "Kick-off."})
    victim = Counter(home.values()).most_common(1)[0][0]
    index = int(victim.removeprefix("replica")) - 1
    written: dict[str, list[str]] = defaultdict(lambda: ["Kick-off."])
    while_down: dict[str, set[str]] = defaultdict(set)
    failures: list[BaseException] = []
    stop = threading.Event()

    def bot(threads: list[str]) -> None:  # writes round after round until told to stop
        try:
            with httpx.Client(base_url=balancer.url, timeout=60) as client:
                k = 0
                while not stop.is_set() or k < 6:
                    k += 1
                    time.sleep(0.2)
                    for t in threads:
                        name = _send(client, t, {"role": "user", "name": "Aiko", "id": f"{t}-{k}",
                                                 "content": f"Update {k} on the offsite."})
                        written[t].append(f"Update {k} on the offsite.")
                        if replicas[index].proc.poll() is not None:
                            while_down[t].add(name)
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            failures.append(exc)

    bots = [threading.Thread(target=bot, args=(THREADS[i::3],)) for i in range(3)]
    for b in bots:
        b.start()
    time.sleep(2)
    replicas[index].proc.kill()  # no goodbye: in-flight writes fail, the bots send them again
    replicas[index].proc.wait()
    time.sleep(5)  # the balancer's health check takes it out; its threads go elsewhere
    port = replicas[index].port
    replicas[index] = _replica({**env, "SEMHIST_DATA_DIR": str(tmp_path / f"r{index}")}, tmp_path,
                               f"{victim}-again", port=port)
    stop.set()
    for b in bots:
        b.join(timeout=300)
    assert not failures, failures
    moved = [t for t, h in home.items() if h == victim]
    assert all(victim not in while_down[t] for t in moved if while_down[t]), while_down
    assert any(while_down[t] for t in moved), "no write reached the moved threads while the replica was down"
    with httpx.Client(base_url=balancer.url, timeout=60) as client:
        # back in the pool (two health checks): its threads come home
        assert wait_for(lambda: client.get(f"/v1/threads/{moved[0]}/messages").headers.get("x-semhist-replica")
                        == victim, timeout=20)
        for t in THREADS:
            r = client.get(f"/v1/threads/{t}/messages")
            r.raise_for_status()
            assert r.headers["x-semhist-replica"] == home[t]
            texts = [m["content"] for m in r.json()["messages"]]
            assert len(texts) == len(set(texts)), t  # each write once, however often it was sent
            assert sorted(texts) == sorted(written[t]), t  # and none lost
