"""Stored-thread commands as a user runs them: real processes, a real SQLite file, exit codes."""

import json

import pytest

from tests.conftest import RAMEN_REQUEST, SAMPLES
from tests.test_cli import semhist


@pytest.fixture
def run(tmp_path, cache_dir):
    db = f"sqlite:///{tmp_path / 'bot.sqlite3'}"

    def go(*args, check=True, env=None):
        return semhist(*args, cache_dir=cache_dir, check=check,
                       env={"SEMHIST_DB": db, "SEMHIST_DATA_DIR": str(tmp_path / "data"), **(env or {})})
    return go


def test_ingest_add_ask_log_threads_forget(run):
    first = run("ingest", str(SAMPLES / "ramen.json"), "--thread", "19:team@thread.v2")
    assert "68 added, 0 already stored, 68 in the thread" in first.stdout
    assert "ingesting" in first.stderr  # the progress bar
    again = run("ingest", str(SAMPLES / "ramen.json"), "--thread", "19:team@thread.v2", "--quiet")
    assert "0 added, 68 already stored, 68 in the thread" in again.stdout

    out = run("add", "--thread", "19:team@thread.v2", "--role", "user", "次はつけ麺の店も知りたい",
              "--time", "2025-07-29T11:00:00+09:00").stdout
    assert "message 69 stored" in out

    data = json.loads(run("ask", "--thread", "19:team@thread.v2", RAMEN_REQUEST, "--json").stdout)
    assert data["keyword"]["keywords"] == ["ラーメン"]
    assert data["messages"][-1] == {"role": "user", "content": RAMEN_REQUEST}
    assert data["messages"][-2]["content"] == "次はつけ麺の店も知りたい"
    assert data["retrieved"] and data["prompt_tokens"] < data["full_history_tokens"]

    log = json.loads(run("log", "--thread", "19:team@thread.v2", "--json").stdout)
    assert len(log) == 1 and log[0]["keyword"] == ["ラーメン"] and log[0]["retrieved"]
    text_log = run("log", "--thread", "19:team@thread.v2").stdout
    assert "keyword [ラーメン]" in text_log and "retrieved store ids" in text_log

    threads = json.loads(run("threads", "--json").stdout)
    assert threads == [{"thread": "19:team@thread.v2", "messages": 69, "first": "2025-07-29T09:00:00+09:00",
                        "last": "2025-07-29T11:00:00+09:00", "retention_days": None}]

    gone = run("forget", "--thread", "19:team@thread.v2", "--before", "2025-07-29T09:30:00+09:00").stdout
    assert "forgot" in gone
    left = json.loads(run("threads", "--json").stdout)[0]["messages"]
    assert 0 < left < 69
    run("forget", "--thread", "19:team@thread.v2")
    assert json.loads(run("threads", "--json").stdout) == []
    missing = run("ask", "--thread", "19:team@thread.v2", RAMEN_REQUEST, check=False)
    assert missing.returncode == 2 and "no stored thread" in missing.stderr


def test_bad_ids_urls_and_embedder_changes_are_clear_errors(run):
    bad = run("add", "--thread", "../../etc/passwd", "x", check=False)
    assert bad.returncode == 2 and "invalid thread id" in bad.stderr and "Traceback" not in bad.stderr
    spaced = run("ingest", str(SAMPLES / "ramen.json"), "--thread", "bad id", check=False)
    assert spaced.returncode == 2 and "invalid thread id" in spaced.stderr and "ingesting" not in spaced.stderr
    assert json.loads(run("threads", "--json").stdout) == []  # nothing was stored
    url = run("threads", env={"SEMHIST_DB": "mysql://x/y"}, check=False)
    assert url.returncode == 3 and "valid: postgres://, postgresql://, sqlite://" in url.stderr
    run("ingest", str(SAMPLES / "ramen.json"), "--thread", "t1", "--quiet")
    mismatch = run("ask", "--thread", "t1", RAMEN_REQUEST, "--embedder", "e5-small", check=False)
    assert mismatch.returncode == 3 and "semhist reindex --thread t1 --embedder e5-small" in mismatch.stderr
    done = run("reindex", "--thread", "t1", "--embedder", "e5-small", "--quiet").stdout
    assert "68 messages embedded with" in done
    assert run("ask", "--thread", "t1", RAMEN_REQUEST, "--embedder", "e5-small").returncode == 0


def test_pii_flag_masks_what_is_stored(run):
    run("add", "--thread", "p", "--pii", "on", "mail a.b@example.com or call +1 415 555 0100")
    data = json.loads(run("ask", "--thread", "p", "what is the contact?", "--json").stdout)
    assert data["messages"][-2]["content"] == "mail [EMAIL] or call [PHONE]"


def test_retention_command(run):
    run("add", "--thread", "r", "old news", "--time", "2020-01-01T00:00:00Z")
    run("add", "--thread", "r", "fresh news")
    out = run("retention", "--thread", "r", "--days", "30").stdout
    assert "retention 30 days; 1 messages forgotten now" in out
    assert json.loads(run("threads", "--json").stdout)[0]["retention_days"] == 30
    bad = run("retention", "--thread", "r", "--days", "a month", check=False)
    assert bad.returncode == 2 and "--days must be" in bad.stderr
