"""POST /v1/chat/completions: semhist in front of the real local model, driven by the official
`openai` SDK; a relay between semhist and the model records what the model was sent."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import httpx
import pytest

from semhist.kernel.errors import ConfigError
from semhist.kernel.model import Message
from semhist.kernel.settings import LLMConfig, Settings
from semhist.indexers.store import StoredMessage
from semhist.kernel.model import end_with_turn
from semhist.service.chat import first_unseen
from semhist.service.upstream import StreamReply, reply_of, upstream_of

from .conftest import RAMEN_REQUEST, SAMPLES
from .servers import Process, Recorder, free_port

CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Tokyo"}'}}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "the weather of a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]


def stored(*turns) -> list[StoredMessage]:
    now = datetime.now(timezone.utc)
    return [StoredMessage(id=i, thread_id="t", role=r, content=c, timestamp=now, sort_ts=float(i))
            for i, (r, c) in enumerate(turns)]


def sent(*turns) -> list[Message]:
    return [Message(index=i, role=r, content=c) for i, (r, c) in enumerate(turns)]


U1, A1, U2, A2, U3 = ("user", "hi"), ("assistant", "hello"), ("user", "ramen?"), ("assistant", "Ichiran"), \
    ("user", "more")


@pytest.mark.parametrize("thread,request_,new", [
    ([U1, A1], [U2], None),  # the new turn alone: lines up nowhere, all of it is new
    ([U1, A1], [U1, A1, U2], 2),  # the whole client history
    ([U1, A1, U2, A2], [U2, A2, U3], 2),  # a client that sends the last few turns
    ([U1, A1, U2, A2], [U1, A1, U2], 3),  # a retry whose answer never arrived: nothing new
    ([U1, A1, U2], [U2], 1),  # a retry before any answer was stored
    ([U1, ("user", "more"), A1], [("user", "more")], None),  # "more" said again is said again
    ([U2, A2], [U1, A1, U2, A2, U3], 4),  # history from before semhist saw the thread
    ([], [U1, A1, U2], None),
    ([U1, A1, U2, A2], [U1, A1, ("user", "ramen? (edited)")], None),  # edited: the caller stores its turn
    ([("user", "yes"), ("assistant", "Go on?"), ("user", "yes"), ("assistant", "Go on?")],
     [("user", "yes"), ("assistant", "Go on?"), ("user", "yes")], 2),  # the end, not a retry
])
def test_new_messages_start_where_the_request_lines_up_with_the_thread(thread, request_, new):
    assert first_unseen(stored(*thread), sent(*request_)) == new


def test_the_current_turn_ends_the_prompt_once_with_its_tool_results():
    turn = [{"role": "user", "content": "weather?"}, {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'}]
    context = [{"role": "system", "content": "context"}, {"role": "user", "content": "earlier"}]
    # the prompt semhist built: recent turns end with the stored copy, the request appended again
    built = context + [{**m} for m in turn] + [{"role": "user", "content": "weather?"}]
    assert end_with_turn(built, turn) == context + turn
    assert end_with_turn(context + [turn[0]], turn[:1]) == context + turn[:1]


def test_the_current_turn_stays_before_what_was_stored_after_it():
    first, second = {"role": "user", "content": "Quick question:"}, {"role": "user", "content": "frozen until?"}
    reply = {"role": "assistant", "content": "Yes."}
    earlier = [{"role": "user", "content": "Quick question:"}, reply]  # said before, answered
    # a second line of the burst (or a request in flight) was stored after the request
    built = earlier + [dict(first), dict(second)]
    assert end_with_turn(built, [first]) == earlier + [first, second]
    assert end_with_turn(earlier + [dict(second)], [first]) == earlier + [second, first]  # no copy: at the end


def sse(*events) -> bytes:
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"


def chunk(delta, finish=None):
    return {"id": "chatcmpl-7", "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def test_a_streamed_reply_is_read_whatever_the_chunk_boundaries():
    body = sse(chunk({"role": "assistant", "content": "ラー"}), chunk({"content": "メン"}),
               chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                      "function": {"name": "get_", "arguments": '{"ci'}}]}),
               chunk({"tool_calls": [{"index": 0, "function": {"name": "weather", "arguments": 'ty": "Tokyo"}'}}]}),
               chunk({}, "tool_calls"))
    want = {"role": "assistant", "content": "ラーメン", "tool_calls": [CALL]}
    keys = set()
    for size in (1, 7, 64, len(body)):
        reader = StreamReply()
        ended = [reader.feed(body[i:i + size]) for i in range(0, len(body), size)]
        assert sum(ended) == 1  # the end is seen once, when the [DONE] line is complete
        got = reader.message()
        keys.add(got.pop("id"))
        assert got == want
    assert len(keys) == 1 and keys.pop().startswith("chatcmpl-7:")


def test_a_streams_usage_chunk_gives_the_providers_cached_tokens():
    usage = {"id": "chatcmpl-7", "object": "chat.completion.chunk", "choices": [],
             "usage": {"prompt_tokens": 2000, "completion_tokens": 5,
                       "prompt_tokens_details": {"cached_tokens": 1792}}}
    reader = StreamReply()
    reader.feed(sse(chunk({"role": "assistant", "content": "ok"}), chunk({}, "stop"), usage))
    assert reader.cached == 1792 and reader.message()["content"] == "ok"
    plain = StreamReply()
    plain.feed(sse(chunk({"content": "ok"}, "stop")))
    assert plain.cached is None  # no usage asked for: nothing estimated here


def test_a_reply_is_only_what_the_model_said():
    ok = reply_of(b'{"id": "c1", "choices": [{"message": {"role": "assistant", "content": "ok"}}]}')
    assert {k: v for k, v in ok.items() if k != "id"} == {"role": "assistant", "content": "ok"}
    # servers that reuse completion ids (a counter, a small random number): two answers, two keys
    other = reply_of(b'{"id": "c1", "choices": [{"message": {"role": "assistant", "content": "no"}}]}')
    assert ok["id"].startswith("c1:") and other["id"] != ok["id"]
    for body in (b"<html>", b'{"choices": []}', b"\xff", b'{"choices": [{"message": {"content": ""}}]}',
                 b'{"choices": [{"message": "hello"}]}', b'{"choices": [{"message": null}]}'):
        assert reply_of(body) is None
    assert StreamReply().message() is None  # a stream that never ended stores nothing


def test_the_upstream_comes_from_the_flag_or_the_llm_variables():
    with pytest.raises(ConfigError, match="--upstream"):
        upstream_of(Settings.load(env={}))
    local = upstream_of(Settings.load(env={}, upstream="http://127.0.0.1:8080/v1/"))
    assert local.url == "http://127.0.0.1:8080/v1/chat/completions" and local.uses_client_key
    # the OpenAI key is for OpenAI: --upstream gets SEMHIST_UPSTREAM_API_KEY or the client's own
    env = {"OPENAI_API_KEY": "sk-openai"}
    assert upstream_of(Settings.load(env=env, upstream="http://gw/v1?x=1")).headers == {}
    assert upstream_of(Settings.load(env=env, upstream="http://gw/v1?x=1")).url == "http://gw/v1/chat/completions?x=1"
    assert upstream_of(Settings.load(env={**env, "SEMHIST_UPSTREAM_API_KEY": "gw"}, upstream="http://gw/v1")
                       ).headers == {"Authorization": "Bearer gw"}
    assert upstream_of(Settings.load(env=env)).headers == {"Authorization": "Bearer sk-openai"}
    azure = LLMConfig("azure", "gpt-4o", api_key="k", base_url="https://x.openai.azure.com/", api_version="2024-10-21")
    up = upstream_of(Settings.load(env={}, llm=azure))
    assert up.url == "https://x.openai.azure.com/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21"
    assert up.headers == {"api-key": "k"} and not up.uses_client_key
    # prompt_cache_key: sent where the upstream takes it (Azure refuses unknown fields), as asked
    assert not up.cache_key and local.cache_key
    assert not upstream_of(Settings.load(env={}, upstream="http://127.0.0.1:8080/v1", cache_key="off")).cache_key
    assert upstream_of(Settings.load(env={}, llm=azure, cache_key="on")).cache_key


def test_the_cache_key_is_a_digest_of_the_thread_never_its_name():
    from semhist.service.chat import cache_key_of

    key = cache_key_of("john.doe@example.com")
    assert key.startswith("semhist-") and "john" not in key and key == cache_key_of("john.doe@example.com")
    assert key != cache_key_of("jane@example.com")


# -- the real thing ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def proxy(tmp_path_factory, cache_dir, llm_server):
    base = tmp_path_factory.mktemp("proxy")
    relay = Recorder(llm_server)
    env = {"SEMHIST_DATA_DIR": str(base / "data"), "SEMHIST_CACHE_DIR": str(cache_dir)}
    server = Process(["serve", "--upstream", relay.url], env, base / "serve.log")
    ramen = json.loads((SAMPLES / "ramen.json").read_text())
    messages = ramen["messages"] if isinstance(ramen, dict) else ramen
    httpx.post(server.url + "/v1/threads/ramen/messages", json={"messages": messages}, timeout=120).raise_for_status()
    yield server, relay
    server.stop()
    relay.close()
    assert "Traceback" not in server.output(), server.output()


def client(server, thread: str | None = "ramen"):
    import openai

    headers = {"X-Semhist-Thread": thread} if thread else {}
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", default_headers=headers,
                         timeout=600, max_retries=0)


def count(server, thread: str) -> int:
    threads = {t["thread"]: t["messages"] for t in httpx.get(server.url + "/v1/threads", timeout=30).json()}
    return threads.get(thread, 0)


def last_log(server, thread: str) -> dict:
    return httpx.get(server.url + f"/v1/threads/{thread}/log", params={"limit": 1}, timeout=30).json()[-1]


@pytest.mark.llm
@pytest.mark.slow
def test_the_openai_sdk_gets_the_model_answer_to_semhists_prompt(proxy):
    from semhist.llm.server import MODEL_NAME

    server, relay = proxy
    before = count(server, "ramen")
    raw = client(server).chat.completions.with_raw_response.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": RAMEN_REQUEST}], max_tokens=48, temperature=0)
    reply = raw.parse()
    text = reply.choices[0].message.content
    assert isinstance(text, str) and text.strip()
    seen = relay.bodies[-1]
    assert seen["model"] == MODEL_NAME and seen["max_tokens"] == 48 and seen["temperature"] == 0
    prompt = "\n".join(m["content"] for m in seen["messages"] if isinstance(m.get("content"), str))
    assert "一蘭" in prompt and seen["messages"][-1] == {"role": "user", "content": RAMEN_REQUEST}
    assert int(raw.headers["x-semhist-prompt-tokens"]) < last_log(server, "ramen")["full_tokens"]
    assert count(server, "ramen") == before + 2  # the request and the model's reply
    # the thread's prompts meet the same provider cache; llama.cpp takes the key too
    from semhist.service.chat import cache_key_of

    assert seen["prompt_cache_key"] == cache_key_of("ramen")


@pytest.mark.llm
@pytest.mark.slow
def test_a_stream_is_relayed_and_its_reply_stored_before_it_ends(proxy):
    from semhist.llm.server import MODEL_NAME

    server, relay = proxy
    sdk = client(server)
    stream = sdk.chat.completions.create(model=MODEL_NAME, stream=True, max_tokens=32,
                                         messages=[{"role": "user", "content": "一蘭のおすすめは？"}])
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text.strip() and relay.bodies[-1]["stream"] is True
    # the client sends its whole history next: only the new request is stored (and the reply)
    history = [{"role": "user", "content": "一蘭のおすすめは？"}, {"role": "assistant", "content": text}]
    before = count(server, "ramen")
    raw = sdk.chat.completions.with_raw_response.create(
        model=MODEL_NAME, max_tokens=16, messages=[{"role": "system", "content": "Answer in one line."}, *history,
                                                   {"role": "user", "content": "すみれは？"}])
    assert raw.headers["x-semhist-stored"] == "1" and count(server, "ramen") == before + 2
    assert int(raw.headers["x-semhist-cached-tokens"]) >= 0  # what repeats the previous prompt's start
    seen = relay.bodies[-1]["messages"]
    assert seen[0] == {"role": "system", "content": "Answer in one line."}
    assert [m for m in seen if m.get("content") == text], "the stored streamed reply was not in the next prompt"


@pytest.mark.llm
@pytest.mark.slow
def test_tool_calls_and_results_reach_the_model_intact(proxy):
    from semhist.llm.server import MODEL_NAME

    server, relay = proxy
    turn = [{"role": "user", "content": "What is the weather in Tokyo?"},
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 21, "sky": "clear"}'}]
    reply = client(server, "tools").chat.completions.create(model=MODEL_NAME, messages=turn, tools=TOOLS,
                                                            max_tokens=32)
    assert reply.choices[0].message.content or reply.choices[0].message.tool_calls
    seen = relay.bodies[-1]
    assert seen["tools"] == TOOLS
    assert seen["messages"][-3:] == turn  # the prompt ends with the tool turn, as the client sent it
    assert count(server, "tools") == 4  # request, call, result, answer
    # the next request: the stored call and result come back in the prompt paired, never split
    client(server, "tools").chat.completions.create(model=MODEL_NAME, max_tokens=8, tools=TOOLS,
                                                    messages=[{"role": "user", "content": "And tomorrow?"}])
    seen = relay.bodies[-1]["messages"]
    at = next(i for i, m in enumerate(seen) if m.get("tool_calls"))
    assert seen[at]["tool_calls"] == [CALL] and seen[at + 1]["tool_call_id"] == "call_1"
    assert seen[-1] == {"role": "user", "content": "And tomorrow?"}


@pytest.mark.llm
@pytest.mark.slow
def test_the_thread_can_come_from_user_and_a_request_without_one_is_refused(proxy):
    import openai

    from semhist.llm.server import MODEL_NAME

    server, _ = proxy
    with pytest.raises(openai.UnprocessableEntityError, match="X-Semhist-Thread"):
        client(server, None).chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "hi"}])
    raw = client(server, None).chat.completions.with_raw_response.create(
        model=MODEL_NAME, user="Taro Yamada", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    thread = raw.headers["x-semhist-thread"]
    assert thread.startswith("user-") and count(server, thread) == 2  # a name the store refuses: its digest


@pytest.mark.llm
@pytest.mark.slow
def test_the_model_list_is_the_upstreams(proxy):
    from semhist.llm.server import MODEL_NAME

    server, _ = proxy
    assert MODEL_NAME in [m.id for m in client(server).models.list().data]  # what clients ask first


def test_the_model_list_comes_from_beside_the_completions_url():
    def listed(**kwargs):
        return upstream_of(Settings.load(env={}, **kwargs)).models_url

    assert listed(upstream="http://127.0.0.1:8080/v1") == "http://127.0.0.1:8080/v1/models"
    assert listed(upstream="https://llm.example/v1/chat/completions?x=1") == "https://llm.example/v1/models"
    azure = LLMConfig("azure", "gpt-4o", api_key="k", base_url="https://x.openai.azure.com/", api_version="2024-10-21")
    assert listed(llm=azure) is None  # a deployment lists itself


def test_an_unreachable_upstream_is_a_502_and_the_request_is_kept(tmp_path, cache_dir):
    import openai

    env = {"SEMHIST_DATA_DIR": str(tmp_path / "data"), "SEMHIST_CACHE_DIR": str(cache_dir)}
    server = Process(["serve", "--upstream", f"http://127.0.0.1:{free_port()}/v1"], env, tmp_path / "serve.log")
    try:
        with pytest.raises(openai.APIStatusError) as refused:
            client(server, "down").chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert refused.value.status_code == 502 and "could not be reached" in str(refused.value)
        assert count(server, "down") == 1  # nothing lost: the next request finds it (and stores it once)
        with pytest.raises(openai.APIStatusError):
            client(server, "down").chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert count(server, "down") == 1
        # refused before anything is stored: an unknown strategy, a request with no text
        for headers, messages in (({"X-Semhist-Strategy": "bogus"}, [{"role": "user", "content": "new"}]),
                                  ({}, [{"role": "user", "content": " "}])):
            with pytest.raises(openai.UnprocessableEntityError):
                client(server, "down").chat.completions.create(model="m", messages=messages, extra_headers=headers)
        assert count(server, "down") == 1
    finally:
        server.stop()
    assert "Traceback" not in server.output()


@pytest.mark.llm
@pytest.mark.slow
def test_the_forwarded_body_keeps_planted_text_as_data(proxy):
    from semhist.llm.server import MODEL_NAME

    from .injection import CORPUS, REQUEST, check_prompt, planted_thread

    server, relay = proxy
    # a thread longer than the budget (one that fits is sent whole, its file part as the client sent
    # it, which the packaged model refuses), and a budget that holds every planted message (59)
    httpx.post(server.url + "/v1/threads/planted/messages", json={"messages": planted_thread(CORPUS, more=25)},
               timeout=120).raise_for_status()
    client(server, "planted").chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": REQUEST}], max_tokens=1, temperature=0,
        extra_headers={"X-Semhist-Budget": "4000"})
    shown = check_prompt(relay.bodies[-1]["messages"], *CORPUS)
    assert len(shown) == len(CORPUS), set(c["id"] for c in CORPUS) - shown


REMINDER = "Answer in one short sentence."
QUESTIONS = ["What is the capital of France?", "And of Japan?", "Which of the two is larger?",
             "Name a river in the first.", "Thanks. Anything else to add?"]


def _whole_history_client(send, reminder_role: str) -> list[str]:
    """A client that sends its whole history each turn and a format reminder after the user's
    turn, as frameworks do; returns the replies."""
    history: list[dict] = [{"role": "system", "content": "You are a helpful assistant."}]
    replies = []
    for question in QUESTIONS:
        history.append({"role": "user", "content": question})
        reply = send([*history, {"role": reminder_role, "content": REMINDER}])
        replies.append(reply)
        history += [{"role": reminder_role, "content": REMINDER}, {"role": "assistant", "content": reply}]
    return replies


@pytest.mark.llm
@pytest.mark.slow
def test_a_trailing_system_message_reaches_the_model_once_and_is_not_stored(proxy):
    """Issue 53: `[system, user, system "Answer in one short sentence."]` reached the model with
    the reminder again as the last user message, and each turn stored another copy."""
    from semhist.llm.server import MODEL_NAME

    server, relay = proxy
    sdk = client(server, "reminded")
    seen = []

    def send(messages):
        reply = sdk.chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=8, temperature=0)
        seen.append(relay.bodies[-1]["messages"])
        return reply.choices[0].message.content or ""

    _whole_history_client(send, "system")
    for question, body in zip(QUESTIONS, seen):
        assert [m for m in body if m["role"] == "user"][-1] == {"role": "user", "content": question}
        assert body[-1] == {"role": "system", "content": REMINDER}
        assert sum(REMINDER in json.dumps(m) for m in body) == 1, body
    assert count(server, "reminded") == 2 * len(QUESTIONS)  # each question and reply, no reminder
    turns = httpx.get(server.url + "/v1/threads/reminded/log", timeout=30).json()
    assert len(turns) == len(QUESTIONS)
