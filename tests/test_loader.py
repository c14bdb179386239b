import json
from datetime import datetime, timedelta, timezone

import pytest

from semhist.kernel.errors import InputError
from semhist.indexers.loader import load, loads, parse_timestamp
from semhist.kernel.validate import resolve_zone
from tests.conftest import SAMPLES

UTC = timezone.utc


def write(tmp_path, name, obj):
    path = tmp_path / name
    path.write_text(obj if isinstance(obj, str) else json.dumps(obj), encoding="utf-8")
    return path


MSGS = [{"role": "user", "content": "hi", "timestamp": "2025-07-29T09:00:00+09:00"},
        {"role": "assistant", "content": "hello", "timestamp": "2025-07-29T09:00:30+09:00"}]


def test_all_formats_load_the_same_thread(tmp_path):
    variants = {
        "list.json": MSGS,
        "obj.json": {"messages": MSGS},
        "lines.jsonl": "\n".join(json.dumps(m) for m in MSGS) + "\n",
        "bench.jsonl": json.dumps({"id": "t1", "messages": MSGS, "queries": []}) + "\n",
    }
    contents = []
    for name, data in variants.items():
        thread = load(write(tmp_path, name, data)).only()
        contents.append([(m.role, m.content, m.timestamp) for m in thread.messages])
    assert all(c == contents[0] for c in contents)
    assert contents[0][0][2] == datetime(2025, 7, 29, 0, 0, tzinfo=UTC)


def test_benchmark_file_keeps_queries_and_several_threads(tmp_path):
    lines = [json.dumps({"id": f"t{i}", "messages": MSGS,
                         "queries": [{"query": "q", "relevant_message_indices": [1]}]}) for i in range(3)]
    result = load(write(tmp_path, "b.jsonl", "\n".join(lines)))
    assert [t.id for t in result.threads] == ["t0", "t1", "t2"]
    assert result.threads[1].queries[0].relevant == (1,)
    with pytest.raises(InputError, match="choose one with --thread"):
        result.only()
    assert result.only("t2").id == "t2"


@pytest.mark.parametrize("text,expected", [
    ("2025-07-29T09:00:00+09:00", datetime(2025, 7, 29, 0, 0, tzinfo=UTC)),
    ("2025-07-29T09:00:00Z", datetime(2025, 7, 29, 9, 0, tzinfo=UTC)),
    ("2025-07-29 09:00", datetime(2025, 7, 29, 0, 0, tzinfo=UTC)),  # naive: Asia/Tokyo
    (1753747200, datetime(2025, 7, 29, 0, 0, tzinfo=UTC)),
    ("1753747200", datetime(2025, 7, 29, 0, 0, tzinfo=UTC)),
])
def test_timestamps(text, expected):
    assert parse_timestamp(text, resolve_zone("Asia/Tokyo")) == expected


def test_naive_time_takes_the_configured_zone(tmp_path):
    path = write(tmp_path, "n.json", [{"role": "user", "content": "x", "timestamp": "2025-07-29T09:00"}])
    tokyo = load(path, timezone_name="Asia/Tokyo").only().messages[0].timestamp
    utc = load(path).only().messages[0].timestamp
    assert utc - tokyo == timedelta(hours=9)


@pytest.mark.parametrize("raw,field", [
    ([{"role": "user", "content": "ok"}, {"role": "robot", "content": "x"}], "role"),
    ([{"role": "user", "content": "ok"}, {"role": "user", "content": 5}], "content"),
    ([{"role": "user", "content": "ok"}, {"role": "user", "content": "x", "timestamp": "yesterday-ish"}], "timestamp"),
    ([{"role": "user", "content": "ok", "timestamp": "2025-01-02"},
      {"role": "user", "content": "x", "timestamp": "2025-01-01"}], "timestamp"),
    ([{"role": "user", "content": "ok"}, "just a string"], "message"),
    ([{"role": "user", "content": "ok"}, {"role": "tool", "content": "42"}], "tool_call_id"),
])
def test_bad_message_names_index_and_field(tmp_path, raw, field):
    with pytest.raises(InputError) as err:
        load(write(tmp_path, "bad.json", raw))
    assert "message 1" in str(err.value) and f"field '{field}'" in str(err.value)


def test_time_going_backwards_is_reported_as_such(tmp_path):
    raw = [{"role": "user", "content": "a", "timestamp": "2025-01-02"},
           {"role": "user", "content": "b", "timestamp": "2025-01-01"}]
    with pytest.raises(InputError, match="backwards"):
        load(write(tmp_path, "b.json", raw))


def test_lenient_mode_skips_and_reports_keeping_original_indices(tmp_path):
    raw = [{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}, {"role": "assistant", "content": "c"}]
    result = load(write(tmp_path, "l.json", raw), lenient=True)
    thread = result.only()
    assert [m.content for m in thread.messages] == ["a", "c"]
    assert [m.index for m in thread.messages] == [0, 2]
    assert len(result.problems) == 1 and result.problems[0].index == 1 and result.problems[0].field == "role"


@pytest.mark.parametrize("text", ["", "not json", "[1, 2", '{"no": "messages"}', "42", '{"messages": 3}'])
def test_unusable_files_raise_input_error(tmp_path, text):
    with pytest.raises(InputError):
        load(write(tmp_path, "x.json", text))


def test_bad_jsonl_line_is_named(tmp_path):
    with pytest.raises(InputError, match="line 2"):
        load(write(tmp_path, "x.jsonl", json.dumps(MSGS[0]) + "\n{oops\n"))


def test_missing_file_and_unknown_zone(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load(tmp_path / "nope.json")
    with pytest.raises(InputError, match="time zone"):
        load(SAMPLES / "ramen.json", timezone_name="Mars/Olympus")


def test_tool_calls_are_kept_as_they_are():
    call = {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\": \"Tokyo\"}"}}
    text = json.dumps([{"role": "user", "content": "weather?"},
                       {"role": "assistant", "content": None, "tool_calls": [call]},
                       {"role": "tool", "content": "sunny", "tool_call_id": "call_1"}])
    thread = loads(text).only()
    assert thread.messages[1].to_openai()["tool_calls"] == [call]
    assert thread.messages[2].to_openai() == {"role": "tool", "content": "sunny", "tool_call_id": "call_1"}


def test_speaker_becomes_name():
    thread = loads(json.dumps([{"role": "user", "content": "hey", "speaker": "Caroline"}])).only()
    assert thread.messages[0].to_openai()["name"] == "Caroline"


@pytest.mark.parametrize("suffix,compress", [(".gz", "gzip"), (".xz", "lzma")])
def test_a_compressed_benchmark_file_loads_as_the_plain_one(tmp_path, suffix, compress):
    """The Japanese long-thread set ships as .xz; `semhist eval` reads it as it is."""
    import importlib

    from semhist.segscore import gold_starts

    text = json.dumps({"id": "t1", "messages": MSGS, "queries": [{"query": "q", "relevant_message_indices": [1]}],
                       "topic_segments": [[0, 1, "a"], [1, 2, "b"]]}, ensure_ascii=False) + "\n"
    packed = tmp_path / f"bench.jsonl{suffix}"
    packed.write_bytes(importlib.import_module(compress).compress(text.encode("utf-8")))
    plain = load(write(tmp_path, "bench.jsonl", text)).only()
    assert load(packed).only() == plain
    assert gold_starts(packed) == {"t1": [0, 1]}
    single = tmp_path / f"chat.json{suffix}"  # a file's one thread is named after it, less the suffixes
    single.write_bytes(importlib.import_module(compress).compress(json.dumps(MSGS).encode("utf-8")))
    assert load(single).only().id == "chat"


def test_a_broken_compressed_file_is_an_input_error(tmp_path):
    (tmp_path / "bad.jsonl.xz").write_bytes(b"not xz at all")
    with pytest.raises(InputError, match=r"bad\.jsonl\.xz: not a readable \.xz file"):
        load(tmp_path / "bad.jsonl.xz")
    import gzip

    (tmp_path / "cut.jsonl.gz").write_bytes(gzip.compress(b'{"id": "t"}\n' * 50)[:30])
    with pytest.raises(InputError, match=r"cut\.jsonl\.gz: not a readable \.gz file"):
        load(tmp_path / "cut.jsonl.gz")
