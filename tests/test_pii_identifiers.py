"""With masking on, nothing a client sends reaches the store, the turn log or the server's log
as sent: not its text, names, tool names and arguments (the rules), nor its identifiers
(tool-call ids, the id a tool result answers, a Responses `call_id`, a file id: refused when
they hold personal data, by the one identifier rule), nor fields semhist does not know (dropped)
or inline data (`data:` URLs, a file's bytes: left out). A corpus of personal data, each item
in the field it probes, goes in through History.add_many, the chat-completions proxy and the
Responses API; the store's files, the turn log and the log are then scanned byte by byte."""

from __future__ import annotations

import base64
import json
import logging
from pathlib import Path

import httpx
import pytest

from semhist import History
from semhist.kernel.errors import InputError
from semhist.kernel.settings import Settings

from .servers import Canned, Process

# (id, field it is sent in, the personal data): every item is its own, so a scan says which leaked
CORPUS = [
    ("text-email", "text", "taro.yamada@example.co.jp"),
    ("text-email-fullwidth", "text", "ｊｉｒｏ＠ｅｘａｍｐｌｅ．ｃｏｍ"),
    ("text-phone-jp", "text", "090-1234-5678"),
    ("text-phone-fullwidth", "text", "０８０－２３４５－６７８９"),
    ("text-phone-intl", "text", "+81 90 3456 7890"),
    ("text-phone-us", "text", "(415) 555-0123"),
    ("text-freedial", "text", "0120-123-456"),
    ("text-card", "text", "4111 1111 1111 1111"),
    ("text-mynumber", "text", "1234 5678 9018"),
    ("text-postal-address", "text", "〒100-0001 東京都千代田区千代田1-1"),
    ("text-address", "text", "大阪府大阪市北区梅田3丁目1番1号"),
    ("speaker-name", "name", "hanako.sato@example.jp"),
    ("tool-name", "tool_name", "saburo@example.net"),
    ("tool-argument", "argument", "shiro@example.org"),
    ("tool-argument-number", "argument", "5500000000000004"),  # a card sent as a JSON number
    ("tool-argument-key", "argument_key", "goro@example.com"),
    ("tool-result", "result", "070-3456-7890"),
    ("text-part", "text_part", "rokuro@example.com"),
    ("file-name", "filename", "shichiro@example.com"),
    ("image-link", "image_link", "hachiro@example.com"),
    ("request", "request", "kuro@example.com"),
    ("request-phone", "request", "050-4567-8901"),
    ("keyword-card", "request", "3782 822463 10005"),
    ("message-key", "key", "juro@example.com"),
    # the fields issue 53 found stored as sent
    ("tool-call-id", "tool_call.id", "call_ichiko@example.com"),
    ("tool-call-id-phone", "tool_call.id", "call_090-9876-5432"),
    ("tool-result-call-id", "tool_call_id", "call_niko@example.com"),
    ("responses-call-id", "call_id", "call_080-8765-4321"),
    ("tool-call-extra-key", "extra", "sanko@example.com"),
    ("part-file-id", "file_id", "file-yonko@example.com"),
    ("part-data-url", "data_url", "data:image/png;base64," + base64.b64encode(b"\x89PNG goko@example.com").decode()),
]
VALUES = {item: value for item, _, value in CORPUS}


def _in(field: str) -> list[str]:
    return [value for _, where, value in CORPUS if where == field]


def _leaked(data: bytes | str) -> list[str]:
    """The corpus items found in `data`, as UTF-8 or as JSON escapes them."""
    raw = data.encode() if isinstance(data, str) else data
    return [item for item, value in VALUES.items()
            if value.encode() in raw or json.dumps(value)[1:-1].encode() in raw]


def _files(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


def _call(call_id: str, name: str = "lookup", arguments: dict | None = None, **extra) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments or {})},
            **extra}


def _stored_messages() -> list[dict]:
    """Every item that is stored masked or left out, each in its field."""
    text = " / ".join(_in("text"))
    (name,), (tool,), (extra,), (data_url,) = _in("name"), _in("tool_name"), _in("extra"), _in("data_url")
    (mail, number), (key,), (result,) = _in("argument"), _in("argument_key"), _in("result")
    (part,), (filename,), (link,) = _in("text_part"), _in("filename"), _in("image_link")
    return [
        {"role": "user", "content": f"my details: {text}", "name": name},
        {"role": "assistant", "content": None, "tool_calls": [
            _call("call_1", f"lookup_{tool}", {"to": mail, "card": int(number), key: "yes"},
                  extra_content={"google": {"owner": extra}}),
            {**_call("call_2"), "function": {**_call("call_2")["function"], "owner": extra}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": f"found {result}"},
        {"role": "tool", "tool_call_id": "call_2", "content": "none"},
        {"role": "user", "content": [
            {"type": "text", "text": f"see {part}", "owner": extra},
            {"type": "image_url", "image_url": {"url": data_url, "detail": "high"}},
            {"type": "file", "file": {"file_id": "file-abc123", "filename": "report.pdf", "owner": extra}},
            {"type": "input_audio", "input_audio": {"data": data_url.split(",")[1], "format": "wav"}}]},
        {"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": data_url}},
            {"type": "image_url", "image_url": {"url": f"https://example.com/{link}/a.png"}},
            {"type": "file", "file": {"filename": f"{filename}.pdf", "file_data": data_url}},
            {"type": "input_audio", "input_audio": {"data": data_url.split(",")[1], "format": "wav"}}]},
    ]


def _refused_turns() -> list[tuple[str, list[dict]]]:
    """(item, a turn after a user message): each carries one identifier with personal data,
    so the whole write is refused."""
    def called(*ids: str) -> list[dict]:
        return [{"role": "assistant", "content": None, "tool_calls": [_call(i) for i in ids]},
                *({"role": "tool", "tool_call_id": i, "content": "ok"} for i in ids)]

    return [("tool-call-id", called(VALUES["tool-call-id"])),
            ("tool-call-id-phone", called("call_ok", VALUES["tool-call-id-phone"])),
            ("tool-result-call-id", [*called("call_ok"), {"role": "tool", "tool_call_id": VALUES["tool-result-call-id"],
                                                          "content": "late"}]),
            ("responses-call-id", called(VALUES["responses-call-id"])),
            ("part-file-id", [{"role": "user", "content": [
                {"type": "text", "text": "the contract"}, {"type": "file", "file": {"file_id": VALUES["part-file-id"]}}]}])]


def test_a_masked_thread_stores_and_logs_no_item_of_the_corpus(tmp_path, cache_dir, caplog):
    caplog.set_level(logging.DEBUG)
    h = History(Settings.load(env={}, cache_dir=cache_dir, data_dir=tmp_path, pii="on", log_prompts=True,
                              db=f"sqlite:///{tmp_path / 'db.sqlite3'}"))
    try:
        h.add_many("probe", [{**m, "id": f"m{i}"} for i, m in enumerate(_stored_messages())])
        for item, turn in _refused_turns():
            with pytest.raises(InputError, match="personal data") as refused:
                h.add_many("probe", [{"role": "user", "content": "stored with it, or not at all"}, *turn])
            assert not _leaked(str(refused.value)), item
        with pytest.raises(InputError, match="'id'.*personal data"):
            h.add_many("probe", [{"role": "user", "content": "hi", "id": VALUES["message-key"]}])
        h.ask("probe", "what are " + " and ".join(_in("request")) + "?")

        stored = h.store.messages("probe")
        assert len(stored) == 6  # a refused batch stores none of its messages
        calls = stored[1].tool_calls
        assert [c["id"] for c in calls] == ["call_1", "call_2"] and all(set(c) == {"id", "type", "function"}
                                                                         for c in calls)
        assert calls[0]["function"]["name"] == "[EMAIL]" and set(calls[1]["function"]) == {"name", "arguments"}
        assert json.loads(calls[0]["function"]["arguments"]) == {"to": "[EMAIL]", "card": "[CARD]", "[EMAIL]": "yes"}
        assert [m.tool_call_id for m in stored[2:4]] == ["call_1", "call_2"]
        # what masking cannot keep is left out; a message left with nothing says what was there
        assert stored[4].verbatim["content"] == [
            {"type": "text", "text": "see [EMAIL]"}, {"type": "file", "file": {"file_id": "file-abc123",
                                                                                "filename": "report.pdf"}}]
        assert stored[5].verbatim["content"] == [{"type": "text", "text": (
            "[image: inline data, not kept with masking on] [image: its link held personal data] "
            "[file [EMAIL]: inline data, not kept with masking on] [audio: inline data, not kept with masking on]")}]
        log = json.dumps(h.log("probe"), ensure_ascii=False)
        assert "prompt" in log and not _leaked(log)
    finally:
        h.close()
    assert not _leaked(_files(tmp_path))
    assert not _leaked("\n".join(r.getMessage() for r in caplog.records))


def test_tool_calls_pair_with_their_results_after_masking(make_history):
    """Masking keeps ids as sent (they hold no personal data, or the write is refused): each
    result still answers its call in the store and in the prompt, and two calls whose
    arguments mask alike stay two."""
    h = make_history(pii="on")
    h.add_many("paired", [
        {"role": "user", "content": "write to taro@example.com and jiro@example.com"},
        {"role": "assistant", "content": None, "tool_calls": [
            _call("call_a", "send", {"to": "taro@example.com"}), _call("call_b", "send", {"to": "jiro@example.com"})]},
        {"role": "tool", "tool_call_id": "call_b", "content": "sent to jiro@example.com"},
        {"role": "tool", "tool_call_id": "call_a", "content": "sent to taro@example.com"},
        {"role": "assistant", "content": "Both are sent."}])
    stored = h.store.messages("paired")
    assert [c["id"] for c in stored[1].tool_calls] == ["call_a", "call_b"]
    assert [m.tool_call_id for m in stored[2:4]] == ["call_b", "call_a"]
    assert all(c["function"]["arguments"] == '{"to": "[EMAIL]"}' for c in stored[1].tool_calls)
    sent = h.ask("paired", "did the mail to taro@example.com go out?").prompt.messages
    at = next(i for i, m in enumerate(sent) if m.get("tool_calls"))
    assert [c["id"] for c in sent[at]["tool_calls"]] == ["call_a", "call_b"]
    assert sorted(m["tool_call_id"] for m in sent[at + 1:at + 3]) == ["call_a", "call_b"]
    assert "taro@example.com" not in json.dumps(sent[:-1])


def test_an_identifier_refused_in_a_later_batch_stores_none_of_the_earlier_ones(make_history):
    h = make_history(pii="on", batch_size=2)
    messages = [{"role": "user", "content": f"line {i}"} for i in range(4)] + [
        {"role": "assistant", "content": None, "tool_calls": [_call(VALUES["tool-call-id"])]}]
    with pytest.raises(InputError, match=r"message 4, field 'tool_calls\[0\].id': .*personal data"):
        h.add_many("batched", messages)
    assert not h.store.has_thread("batched")


def _completion(message: dict) -> dict:
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop", "message": message}]}


def test_the_proxy_and_the_responses_api_store_and_log_no_item_of_the_corpus(tmp_path, cache_dir):
    extra, data_url = VALUES["tool-call-extra-key"], VALUES["part-data-url"]
    # the model's tool call carries a field semhist does not know (as Gemini's thought signatures do),
    # and one reply a call id with personal data: that reply is not stored, the log says so masked
    reply = {"role": "assistant", "content": None, "tool_calls": [
        _call("call_1", "lookup", {"who": VALUES["tool-argument"]}, extra_content={"google": {"owner": extra}})]}
    upstream = Canned({"chat": [_completion(reply), _completion({"role": "assistant", "content": "done"}),
                                   _completion({"role": "assistant", "content": None, "tool_calls": [
                                       _call(VALUES["tool-call-id-phone"])]})],
                          "responses": [{"id": "resp_1", "object": "response", "status": "completed", "output": [
                              {"type": "message", "role": "assistant", "content": [
                                  {"type": "output_text", "text": "noted"}]}]}]})
    data = tmp_path / "data"
    env = {"SEMHIST_DATA_DIR": str(data), "SEMHIST_CACHE_DIR": str(cache_dir), "SEMHIST_PII": "on",
           "SEMHIST_LOG_PROMPTS": "on"}
    server = Process(["serve", "--upstream", upstream.url], env, tmp_path / "serve.log")
    try:
        def chat(thread: str, messages: list[dict]) -> httpx.Response:
            return httpx.post(server.url + "/v1/chat/completions", headers={"X-Semhist-Thread": thread}, timeout=60,
                              json={"model": "m", "messages": messages})

        asked = {"role": "user", "name": VALUES["speaker-name"], "content": [
            {"type": "text", "text": f"who is {VALUES['text-email']}?"},
            {"type": "image_url", "image_url": {"url": data_url}}]}
        first = chat("probe-chat", [asked])
        assert first.status_code == 200, first.text
        # as sent, once: the stored copy (masked, its image left out) does not go besides
        assert upstream.bodies[0]["messages"] == [asked]
        echoed = first.json()["choices"][0]["message"]  # the client sends the call back as it got it
        result = {"role": "tool", "tool_call_id": "call_1", "content": f"call {VALUES['tool-result']}"}
        assert chat("probe-chat", [asked, echoed, result]).status_code == 200
        assert chat("probe-chat", [asked, echoed, result, {"role": "assistant", "content": "done"},
                                   {"role": "user", "content": "and again?"}]).status_code == 200
        for item, turn in _refused_turns():
            refused = chat("probe-chat", [{"role": "user", "content": "go on"}, *turn])
            assert refused.status_code == 422 and "personal data" in refused.text, (item, refused.text)
            assert not _leaked(refused.text), item

        def respond(items: list[dict]) -> httpx.Response:
            return httpx.post(server.url + "/v1/responses", headers={"X-Semhist-Thread": "probe-resp"}, timeout=60,
                              json={"model": "m", "input": items})

        call = {"type": "function_call", "call_id": VALUES["responses-call-id"], "name": "lookup", "arguments": "{}"}
        refused = respond([{"role": "user", "content": "hi"}, call,
                           {"type": "function_call_output", "call_id": call["call_id"], "output": "ok"}])
        assert refused.status_code == 422 and not _leaked(refused.text)
        answered = respond([{"role": "user", "content": [
            {"type": "input_text", "text": f"my card is {VALUES['text-card']}"},
            {"type": "input_image", "image_url": data_url}]}])
        assert answered.status_code == 200, answered.text

        logs = [httpx.get(server.url + f"/v1/threads/{t}/log", timeout=30).text for t in ("probe-chat", "probe-resp")]
        assert all('"prompt"' in log for log in logs) and not _leaked("".join(logs))
        # the current turn goes upstream as the client sent it; what semhist kept of it is masked
        assert upstream.bodies[1]["messages"][-2]["tool_calls"][0]["extra_content"] == {"google": {"owner": extra}}
    finally:
        server.stop()
        upstream.close()
    assert not _leaked(_files(data))
    h = History(Settings.load(env={}, cache_dir=cache_dir, data_dir=data))
    try:
        stored = h.store.messages("probe-chat")
    finally:
        h.close()
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant", "user"]  # the refused: none
    assert list(stored[1].tool_calls) == [_call("call_1", "lookup", {"who": "[EMAIL]"})]  # its unknown field dropped
    assert stored[0].content == "who is [EMAIL]?" and stored[0].verbatim is None  # the inline image left out
    log = (tmp_path / "serve.log").read_text(errors="replace")
    assert "could not store the reply" in log and "[PHONE]" in log and not _leaked(log)
    assert "Traceback" not in log
