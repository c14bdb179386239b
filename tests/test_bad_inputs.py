"""The bad-input corpus (tests/bad_inputs/, one file per kind, expectations in cases.json),
through the CLI and the library: one line naming the message and field, exit 2, nothing
stored, never a traceback. And the valid OpenAI shapes that used to be refused or flattened."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from semhist.kernel.errors import BackendError, InputError
from semhist.indexers.loader import load
from semhist.kernel.settings import Settings
from semhist.cli.main import main
from semhist.history import History

CORPUS = Path(__file__).parent / "bad_inputs"
CASES = json.loads((CORPUS / "cases.json").read_text(encoding="utf-8"))


@pytest.fixture
def cli(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SEMHIST_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SEMHIST_CACHE_DIR", str(tmp_path / "cache"))

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        rc = main([str(a) for a in argv])
        out, err = capsys.readouterr()
        return rc, out, err
    return run


def _one_line(err: str, case: dict) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    line = lines[0]
    assert line.startswith("semhist: error: ") and case["message"] in line, line
    if case["index"] is not None:
        assert f"message {case['index']}, field '{case['field']}'" in line, line
    return line


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_cli_refuses_each_bad_input_in_one_line_and_stores_nothing(name, cli):
    case, path = CASES[name], CORPUS / name
    extra = case.get("args", [])
    for command in (["ingest", path, "--thread", "t", "--quiet"], ["ask", path, "hello"]):
        rc, _, err = cli(*command, *extra)
        assert rc == 2, err
        _one_line(err, case)
    rc, out, _ = cli("threads", "--json")
    assert rc == 0 and json.loads(out) == []


@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if c["index"] is not None))
def test_lenient_skips_the_bad_message_and_says_so(name, cli, caplog):
    case, path = CASES[name], CORPUS / name
    rc, out, err = cli("ingest", path, "--thread", "t", "--quiet", "--lenient", *case.get("args", []))
    total = len(json.loads(path.read_text(encoding="utf-8")))
    if total == 1:  # nothing usable is left: refused like the strict run, no empty thread
        assert rc == 2 and "no usable messages" in err
        assert json.loads(cli("threads", "--json")[1]) == []
    else:
        assert rc == 0, err
        assert any(f"message {case['index']}, field '{case['field']}'" in r.getMessage() for r in caplog.records)
        (info,) = json.loads(cli("threads", "--json")[1])
        assert info["messages"] == total - 1


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_library_raises_input_errors_naming_index_and_field(name, tmp_path):
    case, path = CASES[name], CORPUS / name
    max_chars = int(case["args"][1]) if case.get("args") else 1_000_000
    with pytest.raises(InputError) as caught:
        load(path, max_chars=max_chars)
    assert (caught.value.index, caught.value.field) == (case["index"], case["field"])
    assert case["message"] in str(caught.value)
    if case["index"] is None:
        return
    history = History(Settings.load(data_dir=tmp_path, cache_dir=tmp_path, max_message_chars=max_chars))
    raw = json.loads(path.read_text(encoding="utf-8"))
    try:
        with pytest.raises(InputError) as caught:
            history.add_many("t", raw)
        assert (caught.value.index, caught.value.field) == (case["index"], case["field"])
        assert not history.store.has_thread("t")
    finally:
        history.close()


def _prompt(cli, tmp_path, messages, request="what did I send?", *args) -> dict:
    path = tmp_path / "thread.json"
    path.write_text(json.dumps(messages, ensure_ascii=False), encoding="utf-8")
    rc, out, err = cli("ask", path, request, "--json", *args)
    assert rc == 0, err
    return json.loads(out)


def test_openai_shapes_are_taken_as_they_are(cli, tmp_path):
    image = {"type": "image_url", "image_url": {"url": "https://example.com/receipt.png", "detail": "low"}}
    audio = {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}
    messages = [
        {"role": "developer", "content": "Answer in one sentence."},
        {"role": "user", "content": [{"type": "text", "text": "here is the receipt"}, image], "timestamp": 1753747200000},
        {"role": "assistant", "content": "Got it: 1,280 yen.", "timestamp": 1753747260000},
        {"role": "user", "content": [image]},
        {"role": "user", "content": [audio]},
        {"role": "assistant", "content": ""},
    ]
    out = _prompt(cli, tmp_path, messages)
    sent = out["messages"]
    assert sent[0] == {"role": "developer", "content": "Answer in one sentence."}
    assert {"role": "user", "content": [{"type": "text", "text": "here is the receipt"}, image]} in sent
    assert {"role": "user", "content": [image]} in sent and {"role": "user", "content": [audio]} in sent
    assert {"role": "assistant", "content": ""} in sent  # an empty turn is kept, as `add` keeps it
    # milliseconds since 1970: 2025-07-29, not "year 56544"
    rc, log_out, _ = cli("ingest", tmp_path / "thread.json", "--thread", "shapes", "--quiet")
    assert rc == 0
    rc, shown, _ = cli("threads", "--json")
    assert json.loads(shown)[0]["first"].startswith("2025-07-29")


def test_a_bom_is_read_past(cli, tmp_path):
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps([{"role": "user", "content": "BOM first"}]).encode())
    rc, out, err = cli("ask", path, "hello", "--json")
    assert rc == 0 and json.loads(out)["messages"][0]["content"] == "BOM first"


def test_prompts_keep_tool_calls_and_results_in_pairs(cli, tmp_path):
    call = {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\": \"Tokyo\"}"}}
    orphan_result = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                     {"role": "tool", "tool_call_id": "call_9", "content": "sunny"}]
    out = _prompt(cli, tmp_path, orphan_result)
    assert [m["role"] for m in out["messages"]] == ["user", "assistant", "user"]
    assert any("tool result" in n for n in out["notes"])
    # a window that would start at the result takes its call with it
    cut = [{"role": "user", "content": "weather?"}, {"role": "assistant", "content": None, "tool_calls": [call]},
           {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}, {"role": "assistant", "content": "Sunny."}]
    out = _prompt(cli, tmp_path, cut, "and tomorrow?", "--strategy", "window", "--window", "2")
    assert [m["role"] for m in out["messages"]][-4:] == ["assistant", "tool", "assistant", "user"]
    whole = _prompt(cli, tmp_path, cut, "and tomorrow?", "--strategy", "window", "--window", "4")
    assert [m["role"] for m in whole["messages"]] == ["user", "assistant", "tool", "assistant", "user"]
    assert whole["messages"][1]["tool_calls"] == [call]


class _RemoteEmbedderDown:
    """A user's own embedder (the registry is public) whose service is down: it fails after
    the thread's manifest would have been written."""

    id, dim = "remote@1", 512

    def embed(self, texts, kind="passage"):
        raise ConnectionError("embedding service unreachable")


def test_a_failed_write_leaves_no_empty_thread(tmp_path, monkeypatch):
    from semhist.indexers.embed import EMBEDDERS

    monkeypatch.setitem(EMBEDDERS, "remote", _RemoteEmbedderDown)
    history = History(Settings.load(data_dir=tmp_path, cache_dir=tmp_path, embedder="remote"))
    try:
        with pytest.raises(BackendError, match="embedding service unreachable"):
            history.add("t", "user", "hello")
        assert not history.store.has_thread("t") and history.store.threads() == []
    finally:
        history.close()


@pytest.mark.slow
def test_long_requests_come_from_stdin_or_a_file_and_bad_bytes_are_one_line(tmp_path):
    sample = Path(__file__).parent.parent / "data" / "samples" / "ramen.json"
    request = "ラーメンの話をまとめて。" + "資料の本文です。" * 124_000  # 3 MB of UTF-8, just under the limit of 1,000,000 characters
    env_args = ["--data-dir", str(tmp_path), "--cache-dir", str(tmp_path)]
    cmd = [sys.executable, "-m", "semhist.cli", "ask", str(sample), "-", "--json", "--budget", "3000", *env_args]
    done = subprocess.run(cmd, input=request.encode(), capture_output=True, timeout=600)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    out = json.loads(done.stdout)
    assert out["messages"][-1]["content"] == request
    (tmp_path / "request.txt").write_text(request, encoding="utf-8")
    from_file = subprocess.run([*cmd[:5], "--request-file", str(tmp_path / "request.txt"), "--json", *env_args],
                               capture_output=True, timeout=600)
    assert from_file.returncode == 0 and json.loads(from_file.stdout)["keyword"] == out["keyword"]
    bad = subprocess.run([*cmd[:5], "-", *env_args], input="ラーメン".encode("shift_jis"), capture_output=True,
                         timeout=300)
    err = bad.stderr.decode()
    assert bad.returncode == 2 and "not valid UTF-8" in err and "Traceback" not in err
    argv = subprocess.run([sys.executable, "-m", "semhist.cli", "ask", str(sample), b"\xff\xfe".decode(
        "utf-8", "surrogateescape"), *env_args], capture_output=True, timeout=300)
    assert argv.returncode == 2 and "not valid UTF-8" in argv.stderr.decode()


@pytest.mark.slow
def test_a_five_megabyte_message_costs_a_few_hundred_megabytes(tmp_path):
    script = """
import resource, sys
from semhist.kernel.settings import Settings
from semhist.history import History
h = History(Settings.load(data_dir=sys.argv[1], cache_dir=sys.argv[1], max_message_chars=6_000_000))
h.add("t", "user", "warm up"); h.ask("t", "warm up")
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
text = ("今日はラーメンを食べに行きました。とても美味しかったです。" * 180_000)[:5_000_000]
h.add("t", "user", text)
h.ask("t", "ラーメンの話は？")
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) // 1024)
"""
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    grown_mb = int(done.stdout.split()[-1])
    assert grown_mb < 400, f"a 5 MB message grew the process by {grown_mb} MB"
    over = subprocess.run([sys.executable, "-m", "semhist.cli", "add", "--thread", "t", "-", "--data-dir",
                           str(tmp_path), "--cache-dir", str(tmp_path)], input="x" * 1_000_001, capture_output=True,
                          text=True, timeout=300)
    assert over.returncode == 2 and "the most a message may hold is 1,000,000" in over.stderr


def test_names_go_out_as_the_api_accepts_them(cli, tmp_path):
    out = _prompt(cli, tmp_path, [{"role": "user", "content": "hi", "name": "Taro Yamada"},
                                  {"role": "assistant", "content": "hello", "name": "Help <desk>"}])
    assert [m.get("name") for m in out["messages"][:2]] == ["Taro_Yamada", "Help_desk"]


def test_caller_ids_and_system_prompts_are_checked_like_texts(tmp_path):
    history = History(Settings.load(env={}, data_dir=tmp_path, cache_dir=tmp_path))
    try:
        for key in ("\ud800", "a\x00b", "line\nbreak"):
            with pytest.raises(InputError) as caught:
                history.add_many("t", [{"role": "user", "content": "hi", "id": key}])
            assert (caught.value.index, caught.value.field) == (0, "id")
        assert not history.store.has_thread("t")
        history.add("t", "user", "hi")
        with pytest.raises(InputError, match="system prompt is not valid UTF-8"):
            history.ask("t", "hello", system_prompt="be \udc80 nice")
    finally:
        history.close()


def test_json_lines_may_hold_unicode_line_separators(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"role": "user", "content": "a\u2028b\u0085c"}, ensure_ascii=False) + "\n"
                    + json.dumps({"role": "assistant", "content": "ok"}) + "\n", encoding="utf-8")
    assert [m.content for m in load(path).threads[0].messages] == ["a\u2028b\u0085c", "ok"]


def test_alternation_merges_content_parts_too(cli, tmp_path):
    image = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
    out = _prompt(cli, tmp_path, [{"role": "user", "content": [image]}, {"role": "user", "content": "this one"},
                                  {"role": "assistant", "content": "nice"}], "and now?", "--alternate")
    roles = [m["role"] for m in out["messages"]]
    assert all(a != b for a, b in zip(roles, roles[1:]) if a in ("user", "assistant")), roles
    assert out["messages"][0]["content"] == [image, {"type": "text", "text": "this one"}]


def test_commands_with_odd_arguments_answer_in_one_line(cli, tmp_path):
    sample = Path(__file__).parent.parent / "data" / "samples" / "ramen.json"
    rc, _, err = cli("compare", sample, "hello", "--strategy", "summary", "--strategy", "structured")
    assert rc == 3 and "need an LLM" in err and len(err.strip().splitlines()) == 1
    assert cli("ingest", sample, "--thread", "t", "--quiet")[0] == 0
    rc, _, err = cli("forget", "--thread", "t", "--message", str(2**64))
    assert rc == 2 and "below 2^63" in err
    rc, _, err = cli("add", "--thread", "t\n", "hi")
    assert rc == 2 and "invalid thread id" in err
    rc, _, err = cli("ask", sample, "hello", "--system-prompt", "be \udcff nice")
    assert rc == 3 and "system_prompt must be UTF-8 text" in err


def test_duplicate_tool_ids_go_out_once(cli, tmp_path):
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    out = _prompt(cli, tmp_path, [{"role": "user", "content": "go"},
                                  {"role": "assistant", "content": None, "tool_calls": [call, call]},
                                  {"role": "tool", "tool_call_id": "c1", "content": "one"},
                                  {"role": "tool", "tool_call_id": "c1", "content": "one again"}])
    sent = out["messages"]
    assert sent[1]["tool_calls"] == [call] and [m["content"] for m in sent if m["role"] == "tool"] == ["one"]

