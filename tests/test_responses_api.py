"""The proxy's Responses API (`POST /v1/responses`): input items become the chat turn semhist
stores and asks with, its prompt goes out as input items, the reply is read from the output
items (whole or streamed). Against the packaged model with the official openai client at the end."""

from __future__ import annotations

import json

import httpx
import pytest

from semhist.kernel.errors import InputError
from semhist.kernel.items import as_chat, as_input
from semhist.service.responses import ResponseStream, response_reply

from .servers import Process, Recorder, free_port

CALL = {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": '{"city": "Sapporo"}'}
OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": '{"temp": -3}'}


def test_input_items_are_the_chat_turn_and_the_prompt_goes_back_as_items():
    body = {"instructions": "Be brief.", "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "weather in Sapporo?"}]},
        CALL, OUTPUT, {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "It is -3."}]},
        {"role": "user", "content": "and tomorrow?"}]}
    chat = as_chat(body)
    assert chat == [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "weather in Sapporo?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Sapporo"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": -3}'},
        {"role": "assistant", "content": "It is -3."}, {"role": "user", "content": "and tomorrow?"}]
    items = as_input(chat)
    assert items[2] == CALL and items[3] == OUTPUT  # calls and their outputs stay paired, as sent
    assert items[-1] == {"type": "message", "role": "user", "content": "and tomorrow?"}
    assert as_chat({"input": "hello"}) == [{"role": "user", "content": "hello"}]
    with pytest.raises(InputError, match="input\\[0\\]"):
        as_chat({"input": [{"type": "computer_call", "call_id": "c"}]})


def test_the_reply_is_read_from_the_output_items_whole_or_streamed():
    response = {"id": "resp_1", "object": "response", "status": "completed", "output": [
        {"type": "reasoning", "id": "rs", "summary": []},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "It is "},
                                                             {"type": "output_text", "text": "-3."}]},
        CALL], "usage": {"input_tokens": 900, "input_tokens_details": {"cached_tokens": 768}}}
    reply = response_reply(json.dumps(response).encode())
    assert reply["content"] == "It is -3." and reply["tool_calls"][0]["id"] == "call_1"
    assert reply["id"].startswith("resp_1:")
    stream = ResponseStream()
    events = [{"type": "response.created", "response": {**response, "output": [], "status": "in_progress"}},
              {"type": "response.output_text.delta", "delta": "It is "},
              {"type": "response.completed", "response": response}]
    wire = b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)
    ended = [stream.feed(wire[i:i + 7]) for i in range(0, len(wire), 7)]  # cut anywhere
    assert any(ended) and stream.message() == reply and stream.cached == 768
    assert response_reply(b"not json") is None and response_reply(b'{"output": []}') is None


def test_the_turn_is_stored_before_an_unreachable_upstream_is_a_502(tmp_path, cache_dir):
    relay = Recorder(f"http://127.0.0.1:{free_port()}/v1")  # keeps what semhist sends; nothing behind it
    env = {"SEMHIST_DATA_DIR": str(tmp_path / "data"), "SEMHIST_CACHE_DIR": str(cache_dir)}
    server = Process(["serve", "--upstream", relay.url], env, tmp_path / "serve.log")
    try:
        body = {"model": "m", "instructions": "Be brief.", "previous_response_id": "resp_0", "store": False,
                "input": [{"role": "user", "content": "the budget is 5,000"}]}
        r = httpx.post(server.url + "/v1/responses", json=body, headers={"X-Semhist-Thread": "resp-t"}, timeout=60)
        assert r.status_code == 502 and r.json()["error"]["type"] == "upstream_unavailable"
        sent = relay.bodies[-1]
        assert "previous_response_id" not in sent and "instructions" not in sent and sent["store"] is False
        assert sent["input"][0] == {"type": "message", "role": "system", "content": "Be brief."}
        assert sent["input"][-1] == {"type": "message", "role": "user", "content": "the budget is 5,000"}
        assert sent["prompt_cache_key"].startswith("semhist-")
        listed = {t["thread"]: t["messages"] for t in httpx.get(server.url + "/v1/threads", timeout=30).json()}
        assert listed["resp-t"] == 1  # kept for the next turn
        nameless = httpx.post(server.url + "/v1/responses", json={"model": "m", "input": "hi"}, timeout=60)
        assert nameless.status_code == 422 and "X-Semhist-Thread" in nameless.json()["error"]["message"]
        unknown = httpx.post(server.url + "/v1/responses", timeout=60,
                             json={"model": "m", "input": "hi", "previous_response_id": "resp_never"})
        assert unknown.status_code == 422 and "previous_response_id" in unknown.json()["error"]["message"]
    finally:
        server.stop()
        relay.close()
    assert "Traceback" not in server.output()


@pytest.mark.llm
@pytest.mark.slow
def test_the_openai_client_gets_responses_on_semhists_prompt_whole_and_streamed(tmp_path, cache_dir, llm_server):
    import openai

    from semhist.llm.server import MODEL_NAME

    relay = Recorder(llm_server)
    env = {"SEMHIST_DATA_DIR": str(tmp_path / "data"), "SEMHIST_CACHE_DIR": str(cache_dir)}
    server = Process(["serve", "--upstream", relay.url], env, tmp_path / "serve.log")
    try:
        httpx.post(server.url + "/v1/threads/resp-llm/messages", timeout=60, json={"messages": [
            {"role": "user", "content": "Note this: the release freezes on December 12.", "name": "Taro"},
            {"role": "assistant", "content": "Noted: the release freezes on December 12."}]}).raise_for_status()
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=600,
                               default_headers={"X-Semhist-Thread": "resp-llm"})
        whole = client.responses.create(model=MODEL_NAME, instructions="Answer in one short sentence.",
                                        input="When does the release freeze?", max_output_tokens=40)
        assert whole.output_text.strip()
        assert "December 12" in json.dumps(relay.bodies[-1]["input"])  # what the model was sent: semhist's
        assert whole.id and "previous_response_id" not in relay.bodies[-1]
        # a client that chains responses names no thread: previous_response_id finds it
        chained = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=600)
        events = list(chained.responses.create(model=MODEL_NAME, input="Thanks. And what did I ask before?",
                                               previous_response_id=whole.id, max_output_tokens=40, stream=True))
        kinds = [e.type for e in events]
        assert kinds[-1] == "response.completed" and "response.output_text.delta" in kinds
        streamed = events[-1].response.output_text
        log = httpx.get(server.url + "/v1/threads/resp-llm/log", timeout=30).json()
        assert len(log) == 2
    finally:
        server.stop()
        relay.close()
    assert "Traceback" not in server.output()
    from semhist.indexers.store import open_store

    store = open_store(f"sqlite:///{tmp_path / 'data' / 'semhist.sqlite3'}")
    try:
        said = [(m.role, m.content) for m in store.messages("resp-llm")]
    finally:
        store.close()
    # both turns and both replies stored once, in order
    assert [r for r, _ in said] == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert said[3][1] == whole.output_text and said[5][1] == streamed


@pytest.mark.llm
@pytest.mark.slow
def test_a_trailing_developer_item_reaches_the_model_once_and_is_not_stored(tmp_path, cache_dir, llm_server):
    """Issue 53: a Responses request whose input ends with a developer item after the user's
    sent its text again as the last user message and stored a copy every turn."""
    import openai

    from semhist.llm.server import MODEL_NAME

    from .test_chat_proxy import QUESTIONS, REMINDER, _whole_history_client

    relay = Recorder(llm_server)
    env = {"SEMHIST_DATA_DIR": str(tmp_path / "data"), "SEMHIST_CACHE_DIR": str(cache_dir)}
    server = Process(["serve", "--upstream", relay.url], env, tmp_path / "serve.log")
    seen = []
    try:
        sdk = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=600,
                            default_headers={"X-Semhist-Thread": "reminded"})

        def send(messages):
            reply = sdk.responses.create(model=MODEL_NAME, input=messages, max_output_tokens=16)
            seen.append(relay.bodies[-1]["input"])
            return reply.output_text

        _whole_history_client(send, "developer")
        listed = {t["thread"]: t["messages"] for t in httpx.get(server.url + "/v1/threads", timeout=30).json()}
    finally:
        server.stop()
        relay.close()
    assert "Traceback" not in server.output()
    for question, items in zip(QUESTIONS, seen):
        users = [i for i in items if i.get("role") == "user"]
        assert users[-1]["content"] == question
        assert items[-1]["role"] == "developer" and items[-1]["content"] == REMINDER
        assert sum(REMINDER in json.dumps(i) for i in items) == 1, items
    assert listed["reminded"] == 2 * len(QUESTIONS)
