"""`semhist llm-server` returns the tool calls the packaged model writes as text as `tool_calls`
(llm/toolcalls.py), and only those; with the model, a tool loop through semhist's proxy."""

from __future__ import annotations

import json

import pytest

from semhist.llm.toolcalls import as_events, tool_calls_in, with_tool_calls

NAMES = {"weather"}
TOOLS = [{"type": "function", "function": {"name": "weather", "description": "current weather of a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]


@pytest.mark.parametrize("text", [
    '```json\n{\n  "name": "weather",\n  "arguments": {\n    "city": "Sapporo"\n  }\n}\n```\n\n\n',  # what it writes
    '<tool_call>\n{"name": "weather", "arguments": {"city": "Sapporo"}}\n</tool_call>',  # what its template asks
    '{"name": "weather", "arguments": "{\\"city\\": \\"Sapporo\\"}"}',  # bare, arguments as a string
    '```\n[{"name": "weather", "parameters": {"city": "Sapporo"}}]\n```',
])
def test_a_reply_that_is_only_calls_becomes_tool_calls(text):
    calls = tool_calls_in(text, NAMES)
    assert [c["function"]["name"] for c in calls] == ["weather"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": "Sapporo"} and calls[0]["id"].startswith("call_")


@pytest.mark.parametrize("text", [
    "It is sunny in Sapporo.",
    'Here is an example:\n```json\n{"name": "weather", "arguments": {"city": "Sapporo"}}\n```',  # words around it
    '```json\n{"name": "rm_rf", "arguments": {}}\n```',  # not a declared tool
    '```json\n{"name": "weather", "arguments": [1]}\n```', '```json\n{"name": "weather"\n```', '{"city": "Sapporo"}',
])
def test_anything_else_stays_the_answer(text):
    assert tool_calls_in(text, NAMES) is None
    reply = {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}
    assert with_tool_calls(reply, TOOLS) == reply


def test_a_streamed_reply_carries_the_calls_in_its_events():
    reply = with_tool_calls({"id": "c1", "model": "m", "created": 1, "usage": {"prompt_tokens": 9}, "choices": [
        {"index": 0, "message": {"role": "assistant", "content": '```json\n{"name": "weather", "arguments": {}}\n```'},
         "finish_reason": "stop"}]}, TOOLS)
    events = [json.loads(e[6:]) for e in as_events(reply)[:-1]]
    assert events[0]["choices"][0]["delta"]["tool_calls"][0]["index"] == 0
    assert events[1]["choices"][0]["finish_reason"] == "tool_calls" and events[2]["usage"] == {"prompt_tokens": 9}
    assert as_events(reply)[-1] == b"data: [DONE]\n\n"


@pytest.mark.llm
@pytest.mark.slow
def test_a_tool_loop_runs_on_the_packaged_model_through_the_proxy(tmp_path, cache_dir, llm_server):
    import openai

    from semhist.llm.server import MODEL_NAME

    from .servers import Process

    env = {"SEMHIST_DATA_DIR": str(tmp_path / "data"), "SEMHIST_CACHE_DIR": str(cache_dir)}
    server = Process(["serve", "--upstream", llm_server], env, tmp_path / "serve.log")
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=600,
                               default_headers={"X-Semhist-Thread": "tools"})
        asked = [{"role": "user", "content": "What is the weather in Sapporo? Use the tool."}]
        first = client.chat.completions.create(model=MODEL_NAME, messages=asked, tools=TOOLS, max_tokens=60, temperature=0)
        calls = first.choices[0].message.tool_calls
        assert calls and calls[0].function.name == "weather"  # not JSON text in `content`
        result = {"role": "tool", "tool_call_id": calls[0].id, "content": '{"sky": "snow", "celsius": -3}'}
        second = client.chat.completions.create(model=MODEL_NAME, tools=TOOLS, max_tokens=60, temperature=0, messages=[
            *asked, first.choices[0].message.model_dump(exclude_none=True), result])
        assert second.choices[0].message.content or second.choices[0].message.tool_calls
        # a thread of its own: on "tools" the model has the weather in its history now and may just say it
        streamed = list(client.chat.completions.create(model=MODEL_NAME, messages=asked, tools=TOOLS, max_tokens=60, temperature=0,
                                                       stream=True, extra_headers={"X-Semhist-Thread": "tools-2"}))
        assert any(c.choices and c.choices[0].delta.tool_calls for c in streamed), [
            c.choices[0].delta for c in streamed if c.choices]
    finally:
        server.stop()
    assert "Traceback" not in server.output()
