"""Masking belongs to the thread: once written masked, every later write and turn-log entry
of that thread is masked, whatever the writing process's own `pii` setting. Names, tool-call
arguments and text parts are masked with the text."""

from __future__ import annotations

import json

from semhist.kernel.settings import Settings
from semhist.history import History

PHONE, MAIL = "090-1234-5678", "taro.yamada@example.co.jp"


def _history(tmp_path, pii: str) -> History:
    return History(Settings.load(env={}, data_dir=tmp_path, cache_dir=tmp_path, pii=pii))


def _raw(tmp_path) -> bytes:
    return b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())


def test_a_masked_thread_stays_masked_for_writers_without_the_flag(tmp_path):
    masked = _history(tmp_path, "on")
    masked.add_many("t", [{"role": "user", "content": f"連絡先は{PHONE}です", "name": MAIL}])
    masked.close()
    plain = _history(tmp_path, "off")  # another replica, or a later run without --pii
    try:
        plain.add_many("t", [
            {"role": "user", "content": f"mail me at {MAIL}"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "send", "arguments": json.dumps(
                    {"to": MAIL, "card": 4111111111111111, "copies": 2})}}]},
            {"role": "tool", "tool_call_id": "c1", "content": f"sent to {MAIL}"},
            {"role": "user", "content": [{"type": "text", "text": f"call {PHONE}"},
                                         {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                                         {"type": "file", "file": {"filename": f"{MAIL}.pdf", "file_id": "file-1"}}]},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c2", "type": "function", "function": {
                "name": "deep", "arguments": "[" * 900 + "]" * 900}}]},
            {"role": "tool", "tool_call_id": "c2", "content": "ok"},
        ])
        plain.ask("t", f"what is {MAIL}'s number?")
        plain.add_many("u", [{"role": "user", "content": f"unmasked thread {MAIL}"}])
        stored = plain.store.messages("t")
        assert stored[0].content == "連絡先は[PHONE]です" and stored[0].name == "[EMAIL]"
        assert stored[1].content == "mail me at [EMAIL]"
        assert json.loads(stored[2].tool_calls[0]["function"]["arguments"]) == {"to": "[EMAIL]", "card": "[CARD]",
                                                                                "copies": 2}
        assert stored[3].content == "sent to [EMAIL]"
        assert stored[4].verbatim["content"][0]["text"] == "call [PHONE]"
        assert stored[4].verbatim["content"][2]["file"] == {"filename": "[EMAIL]", "file_id": "file-1"}  # .pdf reads as a domain
        (turn,) = plain.store.turns("t")
        assert turn["request"] == "what is [EMAIL]'s number?"
        assert plain.store.messages("u")[0].content == f"unmasked thread {MAIL}"  # a thread of its own
    finally:
        plain.close()
    raw = _raw(tmp_path)
    assert raw.count(MAIL.encode()) == 1 and PHONE.encode() not in raw  # only in thread u


def test_turning_masking_on_later_covers_the_thread_from_then_on(tmp_path):
    history = _history(tmp_path, "off")
    history.add("t", "user", f"before: {MAIL}")
    history.close()
    history = _history(tmp_path, "email")
    history.add("t", "user", f"after: {MAIL}")
    history.close()
    history = _history(tmp_path, "off")
    try:
        history.add("t", "user", f"later: {MAIL}")
        assert [m.content for m in history.store.messages("t")] == [f"before: {MAIL}", "after: [EMAIL]",
                                                                     "later: [EMAIL]"]
        assert history.store.pii("t") == "email"
    finally:
        history.close()


def test_a_masked_thread_sends_the_request_once_and_images_without_personal_links(tmp_path):
    history = _history(tmp_path, "on")
    try:
        request = f"please write to {MAIL}"
        history.add_many("t", [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": f"https://example.com/{MAIL}/card.png"}}]}])
        history.add("t", "user", request)  # a bot stores the message, then asks with it
        sent = history.ask("t", request).prompt.messages
        assert [m["content"] for m in sent].count(request) == 1 and sent[-1]["content"] == request
        assert not any(m["content"] == "please write to [EMAIL]" for m in sent)
        assert {"role": "user", "content": [{"type": "text", "text": "[image: its link held personal data]"}]} in sent
    finally:
        history.close()

