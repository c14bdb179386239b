"""`semhist serve` over real HTTP: a uvicorn process on 127.0.0.1, the real embedder and SQLite."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import httpx
import pytest

from .conftest import RAMEN_REQUEST, RAMEN_TURNS, SAMPLES
from .servers import Process

pytestmark = pytest.mark.slow

LIMITS = {"SEMHIST_MAX_BATCH": "300", "SEMHIST_MAX_MESSAGE_CHARS": "5000", "SEMHIST_MAX_BODY_KB": "256"}


@pytest.fixture(scope="module")
def service(tmp_path_factory, cache_dir):
    base = tmp_path_factory.mktemp("service")
    env = {"SEMHIST_DATA_DIR": str(base / "data"), "SEMHIST_CACHE_DIR": str(cache_dir), **LIMITS}
    server = Process(["serve"], env, base / "serve.log")
    yield server
    server.stop()


@pytest.fixture
def api(service):
    with httpx.Client(base_url=service.url, timeout=60) as client:
        yield client


def ramen_messages() -> list[dict]:
    raw = json.loads((SAMPLES / "ramen.json").read_text())
    raw = raw["messages"] if isinstance(raw, dict) else raw
    return [{**m, "id": f"teams-{i}"} for i, m in enumerate(raw)]


def test_append_is_idempotent_by_id(api):
    first = api.post("/v1/threads/19:abc@thread.tacv2;messageid=1/messages", json={"messages": [
        {"role": "user", "content": "こんにちは", "id": "1722211200000", "name": "Taro",
         "timestamp": "2026-11-30T09:00:00.1234567Z"},
        {"role": "assistant", "content": "こんにちは！", "id": "1722211200000:reply"}]})
    assert first.status_code == 201, first.text
    assert first.json()["added"] == 2
    again = api.post("/v1/threads/19:abc@thread.tacv2;messageid=1/messages", json={"messages": [
        {"role": "user", "content": "こんにちは", "id": "1722211200000"},
        {"role": "user", "content": "新しい話", "id": "1722211200001"}]})
    assert again.status_code == 201
    assert again.json()["added"] == 1
    assert again.json()["ids"][0] == first.json()["ids"][0]
    listed = {t["thread"]: t for t in api.get("/v1/threads").json()}
    assert listed["19:abc@thread.tacv2;messageid=1"]["messages"] == 3
    assert listed["19:abc@thread.tacv2;messageid=1"]["first"].startswith("2026-11-30T09:00:00.123456")


def test_a_bad_message_stores_none_of_the_batch(api):
    batch = [{"role": "user", "content": f"message {i}", "id": f"b{i}"} for i in range(5)]
    batch[3] = {"role": "user", "content": "when?", "timestamp": "not a time", "id": "b3"}
    r = api.post("/v1/threads/atomic/messages", json={"messages": batch})
    assert r.status_code == 422
    err = r.json()["error"]
    assert (err["index"], err["field"]) == (3, "timestamp")
    assert "atomic" not in {t["thread"] for t in api.get("/v1/threads").json()}
    batch[3] = {"role": "narrator", "content": "x"}
    err = api.post("/v1/threads/atomic/messages", json={"messages": batch}).json()["error"]
    assert (err["index"], err["field"], err["type"]) == (3, "role", "invalid_request")


def test_openai_shapes_go_in_and_come_back_as_sent(api):
    image = {"type": "image_url", "image_url": {"url": "https://example.com/menu.png"}}
    r = api.post("/v1/threads/shapes/messages", json={"messages": [
        {"role": "developer", "content": "Be brief.", "timestamp": 1764493199000},
        {"role": "user", "content": [{"type": "text", "text": "the menu"}, image], "timestamp": 1764493200000},
        {"role": "assistant", "content": "", "timestamp": 1764493201000}]})
    assert r.status_code == 201, r.text
    sent = api.post("/v1/threads/shapes/context", json={"request": "what was on the menu?"}).json()["messages"]
    assert sent[0] == {"role": "developer", "content": "Be brief."}
    assert {"role": "user", "content": [{"type": "text", "text": "the menu"}, image]} in sent
    listed = {t["thread"]: t for t in api.get("/v1/threads").json()}
    assert listed["shapes"]["first"].startswith("2025-11-30T08:59:59")  # milliseconds since 1970
    legacy = api.post("/v1/threads/shapes/messages", json={"messages": [
        {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}}]})
    err = legacy.json()["error"]
    assert legacy.status_code == 422 and err["field"] == "function_call" and "tool_calls" in err["message"]
    surrogate = api.post("/v1/threads/shapes/messages", content=b'{"messages": [{"role": "user", "content": "\\ud800"}]}',
                         headers={"content-type": "application/json"})
    assert surrogate.status_code == 422 and surrogate.json()["error"]["field"] == "content"


def test_context_is_the_prompt_for_the_next_turn(api):
    r = api.post("/v1/threads/ramen/messages", json={"messages": ramen_messages()})
    assert r.status_code == 201 and r.json()["added"] == 68
    ids = r.json()["ids"]
    ctx = api.post("/v1/threads/ramen/context", json={"request": RAMEN_REQUEST, "budget": "50%"})
    assert ctx.status_code == 200, ctx.text
    body = ctx.json()
    assert body["messages"][-1] == {"role": "user", "content": RAMEN_REQUEST}
    assert body["prompt_tokens"] <= body["budget_tokens"] < body["full_tokens"]
    assert body["keyword"]["source"] == "local" and "ラーメン" in body["keyword"]["keywords"]
    prompt = json.dumps(body["messages"], ensure_ascii=False)
    kept = [i for i in RAMEN_TURNS if ramen_messages()[i]["content"][:20] in prompt]
    assert len(kept) >= 20
    assert body["retrieved"] and body["retrieved"][0]["start"].startswith("2025-07-29")
    assert set(body["retrieved"][0]["message_indices"]) <= set(ids)
    with_system = api.post("/v1/threads/ramen/context", json={"request": RAMEN_REQUEST, "budget": 400,
                                                              "system_prompt": "あなたは親切なアシスタントです。"}).json()
    assert with_system["messages"][0] == {"role": "system", "content": "あなたは親切なアシスタントです。"}
    assert with_system["prompt_tokens"] <= 400
    log = api.get("/v1/threads/ramen/log", params={"limit": 2}).json()
    assert [t["request"] for t in log] == [RAMEN_REQUEST] * 2
    assert log[0]["retrieved"][0]["start"].startswith("2025-07-29")


def test_old_tool_results_leave_the_prompt_as_the_agent_appends(api):
    # the bot's path over HTTP: each turn appended (request, call, result, answer), then asked;
    # a result read 6+ turns ago is a placeholder, the latest three are whole, and a request
    # about an old one retrieves it whole
    def turn(i: int) -> list[dict]:
        city = ["Oslo", "Lima", "Cairo", "Tokyo", "Paris", "Dublin", "Madrid", "Sydney", "Toronto"][i]
        call = {"id": f"c{i}", "type": "function", "function": {"name": "server_report", "arguments": "{}"}}
        return [{"role": "user", "content": f"How is the {city} server?"},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": f"c{i}", "content": f"{city} report: kernel 6.{i}. " * 30},
                {"role": "assistant", "content": f"The {city} server is fine."}]

    for i in range(9):
        assert api.post("/v1/threads/agent/messages", json={"messages": turn(i)}).status_code == 201
        body = api.post("/v1/threads/agent/context", json={"request": "And now?", "strategy": "full"}).json()
        shown = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        cleared = (i + 1 - 3) // 5 * 5 if i + 1 > 3 else 0
        assert [c.startswith("[result of server_report") for c in shown] == [True] * cleared + [False] * (i + 1 - cleared)
    found = api.post("/v1/threads/agent/context", json={"request": "Which kernel did the Cairo server run?"}).json()
    assert "Cairo report: kernel 6.2" in json.dumps(found["messages"])


def test_forget_a_message_by_id_or_key_then_the_thread(api):
    ids = api.post("/v1/threads/forget-me/messages", json={"messages": [
        {"role": "user", "content": "秘密の合言葉はカモメ", "id": "k1"},
        {"role": "user", "content": "明日は晴れ", "id": "k2"},
        {"role": "user", "content": "今日は雨", "id": "k3"}]}).json()["ids"]
    gone = api.delete(f"/v1/threads/forget-me/messages/{ids[0]}")
    assert gone.status_code == 200 and gone.json()["forgotten"] == 1
    assert api.delete(f"/v1/threads/forget-me/messages/{ids[0]}").status_code == 404
    assert api.delete("/v1/threads/forget-me/messages/k2", params={"by": "key"}).json()["forgotten"] == 1
    assert api.delete("/v1/threads/forget-me/messages/k2", params={"by": "key"}).status_code == 404
    prompt = api.post("/v1/threads/forget-me/context", json={"request": "合言葉は？"}).json()["messages"]
    assert "カモメ" not in json.dumps(prompt, ensure_ascii=False)
    assert api.delete("/v1/threads/forget-me").json()["forgotten"] == 1
    assert api.delete("/v1/threads/forget-me").status_code == 404
    assert api.post("/v1/threads/forget-me/context", json={"request": "x"}).status_code == 404


BAD = [  # (method, path, body or raw bytes, status, error type)
    ("post", "/v1/threads/t/messages", b'{"messages": [', 400, "invalid_json"),
    ("post", "/v1/threads/t/messages", b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', 400, "invalid_json"),
    ("post", "/v1/threads/t/messages", {"messages": []}, 422, "invalid_request"),
    ("post", "/v1/threads/t/messages", {"messages": [{"role": "user", "content": 5}]}, 422, "invalid_request"),
    ("post", "/v1/threads/t/messages", {"messages": [{"role": "user", "content": "a\u0000b"}]}, 422, "invalid_request"),
    ("post", "/v1/threads/t/messages", {"messages": [{"role": "function", "name": "f", "content": "1"}]}, 422,
     "invalid_request"),
    ("post", "/v1/threads/t/messages", {"messages": [{"role": "tool", "content": "x"}]}, 422, "invalid_request"),
    ("post", "/v1/threads/t/messages", {"messages": [{"role": "user", "content": "x", "timestamp": 1e20}]}, 422,
     "invalid_request"),
    ("post", "/v1/threads/bad%2Fid/messages", {"messages": [{"role": "user", "content": "x"}]}, 404, "not_found"),
    ("post", "/v1/threads/..x/messages", {"messages": [{"role": "user", "content": "x"}]}, 422, "invalid_request"),
    ("post", "/v1/threads/t/messages", {"messages": [{"role": "user", "content": "x"}] * 301}, 413, "too_large"),
    ("post", "/v1/threads/t/messages", {"messages": [{"role": "user", "content": "x" * 5001}]}, 413, "too_large"),
    ("post", "/v1/threads/t/messages", b'{"messages": [{"role": "user", "content": "' + b"y" * 300_000 + b'"}]}', 413,
     "too_large"),
    ("post", "/v1/threads/nobody/context", {"request": "hello"}, 404, "not_found"),
    ("post", "/v1/threads/ramen/context", {"request": ""}, 422, "invalid_request"),
    ("post", "/v1/threads/ramen/context", {"request": "x", "budget": "ten"}, 422, "invalid_request"),
    ("post", "/v1/threads/ramen/context", b'{"request": "x", "system_prompt": "\\ud800"}', 422, "invalid_request"),
    ("post", "/v1/threads/ramen/context", b'{"request": "x\\u0000"}', 422, "invalid_request"),
    ("post", "/v1/threads/t/messages", {"messages": [{"role": "user", "content": "x", "timestamp": True}]}, 422,
     "invalid_request"),
    ("post", "/v1/threads/ramen/context", {"request": "x", "strategy": "magic"}, 422, "invalid_request"),
    ("post", "/v1/threads/ramen/context", {"request": "x", "strategy": "summary"}, 422, "not_supported"),
    ("post", "/v1/threads/t/messages", {"messages": [{"role": "user", "content": "x",
                                                      "timestamp": "9999-12-31T23:59:59-01:00"}]}, 422, "invalid_request"),
    ("post", "/v1/threads/ramen/context", {"request": "x", "budget": "1" + "0" * 400}, 422, "invalid_request"),
    ("post", "/v1/threads/ramen/context", {"request": "x", "budget": 10**30}, 422, "invalid_request"),
    ("delete", "/v1/threads/ramen/messages/%C2%B2", None, 422, "invalid_request"),
    ("delete", "/v1/threads/ramen/messages/99999999999999999999", None, 404, "not_found"),
    ("get", "/v1/threads/nobody/log", None, 404, "not_found"),
    ("delete", "/v1/threads/ramen/messages/abc", None, 422, "invalid_request"),
    ("get", "/v1/nothing-here", None, 404, "not_found"),
    ("put", "/v1/threads", None, 405, "method_not_allowed"),
]


@pytest.mark.parametrize("method,path,body,status,kind", BAD, ids=[f"{b[3]}-{i}" for i, b in enumerate(BAD)])
def test_bad_requests_get_a_json_error_and_store_nothing(api, method, path, body, status, kind):
    before = api.get("/healthz").json()["messages"]
    options = {"content": body, "headers": {"content-type": "application/json"}} if isinstance(body, bytes) else \
        ({"json": body} if body is not None else {})
    r = api.request(method.upper(), path, **options)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["type"] == kind and err["message"]
    assert "Traceback" not in r.text
    assert api.get("/healthz").json()["messages"] == before


def test_a_billed_budget_and_the_cached_tokens_of_a_context(api):
    api.post("/v1/threads/billed/messages", json={"messages": ramen_messages()})
    asks = [api.post("/v1/threads/billed/context", json={"request": "ラーメンの話", "budget": "1000b",
                                                         "system_prompt": "You are the ramen bot."}).json()
            for _ in range(2)]
    assert asks[0]["cached_tokens"] is None  # no earlier prompt of the thread
    assert 0 < asks[1]["cached_tokens"] <= asks[1]["prompt_tokens"]  # the system prompt at least repeats
    # the first ask has no earlier prompt to read from the cache: all of it is billed
    assert asks[0]["budget_tokens"] == 1000 and asks[0]["prompt_tokens"] <= 1000
    assert asks[1]["budget_tokens"] == 10_000  # a billed budget picks the cache layout: 0.1x what is cached


def test_metrics_count_routes_tokens_and_messages(api):
    api.post("/v1/threads/ramen/context", json={"request": "ラーメンの話", "budget": "20%"})
    text = api.get("/metrics").text
    assert 'semhist_http_requests_total{method="POST",route="/v1/threads/{thread_id}/context",status="200"}' in text
    assert 'semhist_http_request_seconds_bucket{le="0.05",method="POST",route="/v1/threads/{thread_id}/context"}' in text
    assert "ramen" not in text  # series per route, never per thread
    values = {line.split()[0]: float(line.split()[1]) for line in text.splitlines() if line and line[0] != "#"}
    assert values["semhist_context_full_history_tokens_total"] > values["semhist_context_prompt_tokens_total"] > 0
    assert values["semhist_context_prompt_tokens_total"] >= values["semhist_context_cached_tokens_total"] >= 0
    assert values["semhist_messages_stored"] == api.get("/healthz").json()["messages"] > 0
    assert api.get("/openapi.json").json()["paths"]["/v1/threads/{thread_id}/context"]["post"]


def test_threads_are_isolated(api):
    """Randomized: what one thread said never reaches another thread's prompt."""
    rng = random.Random(11)
    words = {f"iso{n}": f"合言葉{n}号はキリン{n * 7919}" for n in range(6)}
    for thread, secret in words.items():
        msgs = [{"role": "user", "content": secret}] + [
            {"role": rng.choice(["user", "assistant"]), "content": f"{thread} の雑談 {i}"} for i in range(12)]
        assert api.post(f"/v1/threads/{thread}/messages", json={"messages": msgs}).status_code == 201
    leaks = 0
    for _ in range(30):
        thread, other = rng.sample(sorted(words), 2)
        prompt = json.dumps(api.post(f"/v1/threads/{thread}/context", json={
            "request": f"{words[other]}について教えて", "budget": rng.choice([200, "50%", 1000])}).json()["messages"],
            ensure_ascii=False)
        prompt = prompt.replace(f"{words[other]}について教えて", "")
        leaks += sum(secret in prompt for t, secret in words.items() if t != thread)
    assert leaks == 0


def test_token_is_required_when_set(tmp_path, cache_dir):
    env = {"SEMHIST_DATA_DIR": str(tmp_path / "data"), "SEMHIST_CACHE_DIR": str(cache_dir),
           "SEMHIST_API_TOKEN": "s3cret-token"}
    server = Process(["serve"], env, tmp_path / "serve.log")
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            assert client.get("/healthz").status_code == 200  # liveness probes carry no token
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic s3cret-token"}):
                r = client.get("/v1/threads", headers=headers)
                assert r.status_code == 401 and r.json()["error"]["type"] == "unauthorized"
                assert client.get("/metrics", headers=headers).status_code == 401
            ok = client.get("/v1/threads", headers={"Authorization": "Bearer s3cret-token"})
            assert ok.status_code == 200 and ok.json() == []
    finally:
        server.stop()
    assert "s3cret-token" not in server.output()


def test_no_token_means_loopback_only(tmp_path):
    out = subprocess.run([sys.executable, "-m", "semhist.cli", "serve", "--host", "0.0.0.0", "--data-dir",
                          str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 3
    assert "SEMHIST_API_TOKEN" in out.stderr and "Traceback" not in out.stderr


def test_planted_text_stays_data_in_context_over_http(api):
    from .injection import CORPUS, REQUEST, check_prompt, planted_thread

    assert api.post("/v1/threads/planted/messages", json={"messages": planted_thread(CORPUS)}).status_code == 201
    for strategy in ("blocks", "full", "token-budget"):
        body = api.post("/v1/threads/planted/context", json={"request": REQUEST, "strategy": strategy,
                                                             "budget": 3000}).json()
        shown = check_prompt(body["messages"], *CORPUS)
        assert strategy == "token-budget" or len(shown) == len(CORPUS), (strategy, set(c["id"] for c in CORPUS) - shown)
