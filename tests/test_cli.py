"""The `semhist` command as a user runs it: real process, real files, exit codes."""

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import RAMEN_REQUEST, SAMPLES, SHARED_DATA


def semhist(*args, cache_dir, env=None, check=True):
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "AZURE_OPENAI", "SEMHIST_"))}
    full_env.update({"SEMHIST_CACHE_DIR": str(cache_dir), **(env or {})})
    # a command on the packaged model makes several calls, each within the limit llm_env sized
    limit = 600 + 10 * float(full_env.get("SEMHIST_LLM_TIMEOUT", 0))
    proc = subprocess.run([sys.executable, "-m", "semhist.cli", *args], capture_output=True, text=True,
                          env=full_env, timeout=limit)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def test_ask_prints_keyword_blocks_prompt_and_tokens(cache_dir):
    out = semhist("ask", str(SAMPLES / "ramen.json"), RAMEN_REQUEST, cache_dir=cache_dir).stdout
    assert "keyword: ラーメン" in out and "local: no LLM is configured" in out
    assert "block 0" in out and "cosine" in out and "2025-07-29T09:00:00+09:00" in out
    assert "retrieved_history" in out and "prompt tokens:" in out and "full history:" in out
    assert "ground truth kept: 24/24" in out


def test_ask_json(cache_dir):
    data = json.loads(semhist("ask", str(SAMPLES / "ramen.json"), RAMEN_REQUEST, "--json",
                              cache_dir=cache_dir).stdout)
    assert data["keyword"]["source"] == "local" and data["keyword"]["keywords"] == ["ラーメン"]
    assert data["messages"][-1] == {"role": "user", "content": RAMEN_REQUEST}
    assert data["prompt_tokens"] <= 0.5 * data["full_history_tokens"]
    assert data["evidence_kept"] == {"kept": 24, "of": 24}
    assert all({"score", "start", "end", "message_indices"} <= set(b) for b in data["retrieved"])


def test_ask_english_thread(cache_dir):
    data = json.loads(semhist("ask", str(SAMPLES / "english.json"), "What did we decide about the Hong Kong server?",
                              "--json", cache_dir=cache_dir).stdout)
    assert data["evidence_kept"]["kept"] == data["evidence_kept"]["of"]
    assert "Hong" in data["keyword"]["keywords"]


def test_ask_answer_without_llm_is_a_clear_error(cache_dir):
    proc = semhist("ask", str(SAMPLES / "ramen.json"), RAMEN_REQUEST, "--answer", cache_dir=cache_dir, check=False)
    assert proc.returncode == 3 and "needs an LLM" in proc.stderr and "Traceback" not in proc.stderr


def test_compare_table(cache_dir):
    out = semhist("compare", str(SAMPLES / "ramen.json"), RAMEN_REQUEST, cache_dir=cache_dir).stdout
    lines = {line.split()[0]: line for line in out.splitlines() if len(line.split()) > 1 and line.split()[1].isdigit()}
    for name in ("full", "window", "token-budget", "utterances", "blocks"):
        assert name in lines
    assert "24/24" in lines["blocks"] and "24/24" in lines["full"]
    assert "24/24" not in lines["window"] and "24/24" not in lines["utterances"]
    assert "none configured" in out


def test_index_then_ask_with_it_and_refuse_another_model(cache_dir, tmp_path):
    semhist("index", str(SAMPLES / "ramen.json"), "--out", str(tmp_path / "idx"), cache_dir=cache_dir)
    ok = semhist("ask", str(SAMPLES / "ramen.json"), RAMEN_REQUEST, "--index", str(tmp_path / "idx"), "--json",
                 cache_dir=cache_dir)
    assert json.loads(ok.stdout)["evidence_kept"]["kept"] == 24
    bad = semhist("ask", str(SAMPLES / "ramen.json"), RAMEN_REQUEST, "--index", str(tmp_path / "idx"),
                  "--embedder", "e5-small", cache_dir=cache_dir, check=False)
    assert bad.returncode == 3 and "built with embedder 'use-m3" in bad.stderr and "--embedder use-m3" in bad.stderr


@pytest.mark.parametrize("content,expect", [
    ("not json at all", "not valid JSON"),
    ('[{"role": "user", "content": "a"}, {"role": "wizard", "content": "b"}]', "message 1, field 'role'"),
    ('[{"role": "user", "content": "a", "timestamp": "2025-01-02"},'
     ' {"role": "user", "content": "b", "timestamp": "2025-01-01"}]', "time goes backwards"),
])
def test_bad_input_is_one_clear_line(cache_dir, tmp_path, content, expect):
    path = tmp_path / "h.json"
    path.write_text(content, encoding="utf-8")
    proc = semhist("ask", str(path), "hi", cache_dir=cache_dir, check=False)
    assert proc.returncode == 2 and expect in proc.stderr and "Traceback" not in proc.stderr


def test_lenient_reports_and_continues(cache_dir, tmp_path):
    path = tmp_path / "h.json"
    path.write_text('[{"role": "user", "content": "ramen?"}, {"role": "wizard", "content": "b"},'
                    ' {"role": "assistant", "content": "ramen!"}]', encoding="utf-8")
    proc = semhist("ask", str(path), "ramen", "--lenient", "--json", cache_dir=cache_dir)
    assert "skipped" in proc.stderr and "message 1" in proc.stderr
    assert len(json.loads(proc.stdout)["messages"]) >= 2


@pytest.mark.parametrize("args,expect", [
    (["--strategy", "magic"], "invalid choice"),
    (["--budget", "lots"], "budget must look like"),
    (["--embedder", "nope"], "unknown embedder"),
])
def test_bad_options(cache_dir, args, expect):
    proc = semhist("ask", str(SAMPLES / "ramen.json"), "x", *args, cache_dir=cache_dir, check=False)
    assert proc.returncode != 0 and expect in proc.stderr and "Traceback" not in proc.stderr


CONTRACT = {"evidence_recall", "all_evidence_rate", "mean_prompt_tokens", "token_ratio", "p50_ms", "p95_ms",
            "n_queries"}


def test_eval_contract_on_the_sample(cache_dir):
    proc = semhist("eval", str(SAMPLES / "ramen.json"), "--strategy", "blocks", "--strategy", "window",
                   "--budget", "50%", "--json", cache_dir=cache_dir)
    report = json.loads(proc.stdout)  # exactly one JSON object on stdout
    assert report["dataset"] == "ramen.json" and set(report["strategies"]) == {"blocks", "window"}
    for metrics in report["strategies"].values():
        assert CONTRACT <= set(metrics) and metrics["n_queries"] == 3
        assert metrics["token_ratio"] <= 0.5
    assert report["strategies"]["blocks"]["evidence_recall"] > report["strategies"]["window"]["evidence_recall"]
    assert "queries" in proc.stderr  # the progress bar goes to stderr


@pytest.mark.slow
@pytest.mark.shared_data
@pytest.mark.parametrize("dataset", ["locomo.jsonl", "jmultiwoz_threads.jsonl"])
def test_eval_contract_on_a_public_benchmark_thread(cache_dir, dataset):
    path = SHARED_DATA / dataset
    proc = semhist("eval", str(path), "--limit", "1", "--strategy", "blocks", "--strategy", "window",
                   "--strategy", "full", "--budget", "10%", "--json", "--quiet", cache_dir=cache_dir)
    report = json.loads(proc.stdout)
    for name, metrics in report["strategies"].items():
        assert CONTRACT <= set(metrics), name
        assert metrics["token_ratio"] <= 0.10 + 1e-9
    assert report["strategies"]["blocks"]["evidence_recall"] > report["strategies"]["window"]["evidence_recall"]


def test_empty_request_and_dataset_without_queries(cache_dir, tmp_path):
    proc = semhist("ask", str(SAMPLES / "ramen.json"), "  ", cache_dir=cache_dir, check=False)
    assert proc.returncode == 2 and "request is empty" in proc.stderr
    path = tmp_path / "noq.jsonl"
    path.write_text(json.dumps({"id": "t", "messages": [{"role": "user", "content": "hi"}]}) + "\n")
    report = json.loads(semhist("eval", str(path), "--json", "--quiet", cache_dir=cache_dir).stdout)
    assert report["strategies"]["blocks"]["n_queries"] == 0 and CONTRACT <= set(report["strategies"]["blocks"])


def test_eval_of_a_missing_file_is_one_sentence_saying_where_the_sets_come_from(cache_dir, tmp_path):
    proc = semhist("eval", str(tmp_path / "locomo.jsonl"), cache_dir=cache_dir, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [f"semhist: error: {tmp_path / 'locomo.jsonl'}: no such file; the "
                                                "evaluation guide (docs/guides/evaluation.md, 'Benchmark files') says "
                                                "where each benchmark file comes from"]


def test_eval_of_an_llm_strategy_without_llm_fails_before_any_work(cache_dir):
    proc = semhist("eval", str(SAMPLES / "ramen.json"), "--strategy", "summary", cache_dir=cache_dir, check=False)
    assert proc.returncode == 3 and "needs an LLM" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("argv,expected", [
    (["ask", "f.json", "--budget", "10%", "the request"], {"file": "f.json", "request": "the request", "budget": "10%"}),
    (["ask", "--thread", "t1", "--budget", "2000", "the request", "--json"],
     {"file": "the request", "request": None, "thread": "t1", "json": True}),
    (["ask", "f.json", "--thread", "c2", "the request", "--strategy", "window"],
     {"file": "f.json", "request": "the request", "thread": "c2", "strategy": "window"}),
    (["compare", "f.json", "--budget", "10%", "the request", "--strategy", "full"],
     {"file": "f.json", "request": "the request", "strategy": ["full"]}),
    (["eval", "--budget", "10%", "data.jsonl", "--limit", "2"], {"dataset": "data.jsonl", "limit": 2}),
    (["ingest", "--thread", "t1", "chat.json", "--quiet"], {"file": "chat.json", "thread": "t1", "quiet": True}),
])
def test_options_go_anywhere_on_the_line(argv, expected):
    """An option between FILE and REQUEST used to end in 'unrecognized arguments' (exit 2)."""
    from semhist.cli.main import build_parser

    args = vars(build_parser().parse_args(argv))
    assert {k: args[k] for k in expected} == expected


def test_ask_with_an_option_between_file_and_request(cache_dir):
    data = json.loads(semhist("ask", str(SAMPLES / "ramen.json"), "--budget", "50%", RAMEN_REQUEST, "--json",
                              cache_dir=cache_dir).stdout)
    assert data["messages"][-1]["content"] == RAMEN_REQUEST and data["budget_tokens"]


@pytest.mark.parametrize("layout", ["head", "cache"])
def test_ask_says_when_the_budget_left_no_room_for_retrieval(cache_dir, layout):
    """Issue 54: at 10% the ramen topic's best block (cosine 0.59, retrieved at 25%) did not
    fit, and the CLI said "nothing scored high enough" with no note."""
    ask = ("ask", str(SAMPLES / "ramen.json"), "ラーメンの話題は？", "--budget", "10%", "--layout", layout)
    data = json.loads(semhist(*ask, "--json", cache_dir=cache_dir).stdout)
    room = [n for n in data["notes"] if n.startswith("the budget left no room for retrieved history")]
    assert not data["retrieved"] and len(room) == 1, data["notes"]
    needed, left = (int(w) for w in room[0].replace("(", " ").replace(",", " ").split() if w.isdigit())
    assert needed > left == data["budget_tokens"] - data["prompt_tokens"]
    text = semhist(*ask, cache_dir=cache_dir).stdout
    assert f"retrieved: nothing: {room[0]}" in text and "scored high enough" not in text
    # nothing above the threshold is the other cause, and says so
    text = semhist(*ask, "--min-score", "0.95", cache_dir=cache_dir).stdout
    assert "retrieved: nothing scored high enough" in text and "no room" not in text


def test_ask_sends_a_thread_that_fits_the_budget_whole(cache_dir):
    """Issue 54: at 2000 tokens blocks sent the ramen thread (1,392 tokens whole) as 1,440, framed."""
    ask = ("ask", str(SAMPLES / "ramen.json"), "ラーメンの話題は？", "--budget", "2000")
    data = json.loads(semhist(*ask, "--json", cache_dir=cache_dir).stdout)
    assert data["whole_thread"] and not data["retrieved"] and data["prompt_tokens"] == data["full_history_tokens"]
    assert "retrieved: none needed: the whole thread fits the budget" in semhist(*ask, cache_dir=cache_dir).stdout
