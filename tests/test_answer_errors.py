"""`semhist ask --answer` against an endpoint that misbehaves (a real HTTP server on 127.0.0.1):
the prompt and what was retrieved are printed, then one line of error, exit 4; never a traceback."""

from __future__ import annotations

import json

import pytest

from semhist.cli.main import main

from .conftest import RAMEN_REQUEST, SAMPLES
from .servers import BadLLM


@pytest.fixture(scope="module")
def bad_llm():
    server = BadLLM("html", delay=20)
    yield server
    server.close()


@pytest.mark.parametrize("mode", ["html", "not_json", "not_utf8", "truncated", "no_choices", "error500", "slow"])
def test_a_failed_answer_keeps_the_prompt_and_says_why(mode, bad_llm, cache_dir, monkeypatch, capsys):
    bad_llm.mode = mode
    for name, value in {"OPENAI_BASE_URL": bad_llm.url, "OPENAI_API_KEY": "x", "SEMHIST_LLM_MODEL": "bad",
                        "SEMHIST_CACHE_DIR": str(cache_dir), "SEMHIST_KEYWORD": "local"}.items():
        monkeypatch.setenv(name, value)
    code = main(["ask", str(SAMPLES / "ramen.json"), RAMEN_REQUEST, "--answer", "--llm-timeout", "2", "--json"])
    out, err = capsys.readouterr()
    assert code == 4, err
    data = json.loads(out)  # the prompt, whole, on stdout
    assert data["evidence_kept"] == {"kept": 24, "of": 24} and data["messages"]
    assert "answer" not in data and data["answer_error"]
    assert err.startswith("semhist: error: no answer:") and err.count("\n") == 1 and "--llm-timeout" in err
    assert "Traceback" not in err


def _bad_env(bad_llm, cache_dir, monkeypatch, **extra):
    for name, value in {"OPENAI_BASE_URL": bad_llm.url, "OPENAI_API_KEY": "x", "SEMHIST_LLM_MODEL": "bad",
                        "SEMHIST_CACHE_DIR": str(cache_dir), "SEMHIST_DATA_DIR": str(cache_dir / "data"),
                        **extra}.items():
        monkeypatch.setenv(name, value)


def test_compare_marks_every_strategy_whose_llm_step_failed(bad_llm, cache_dir, monkeypatch, capsys):
    bad_llm.mode = "html"
    _bad_env(bad_llm, cache_dir, monkeypatch, SEMHIST_KEYWORD="local")
    code = main(["compare", str(SAMPLES / "ramen.json"), RAMEN_REQUEST, "--strategy", "summary",
                 "--strategy", "structured", "--strategy", "blocks", "--budget", "30%", "--llm-timeout", "2"])
    out, err = capsys.readouterr()
    assert code == 0, err
    failed = [line for line in out.splitlines() if "LLM step failed" in line]
    assert {line.split(":")[0] for line in failed} == {"summary", "structured"}, out
    assert all("compaction failed" in line for line in failed)


def test_eval_counts_failed_answers_and_llm_analyses(bad_llm, cache_dir, monkeypatch, capsys):
    bad_llm.mode = "not_json"
    _bad_env(bad_llm, cache_dir, monkeypatch, SEMHIST_KEYWORD="llm")
    code = main(["eval", str(SAMPLES / "english.json"), "--answer", "--judge-model", "none", "--llm-timeout", "2",
                 "--json", "--details", "--quiet"])
    out, err = capsys.readouterr()
    assert code == 0, err
    report = json.loads(out)
    blocks = report["strategies"]["blocks"]
    assert blocks["llm_failures"] == blocks["n_queries"] == 2 and blocks["evidence_recall"] > 0.5
    assert "request analysis" in report["llm_failures"]["blocks"][0]
    analysis = report["queries"][0]["analysis"]
    assert analysis["source"] == "local" and analysis["from"]["keywords"] == "local" and analysis["rejected"]
    assert report["queries"][0]["answers"]["blocks"]["answer"] is None  # failed: scored as an empty answer


def test_one_deadline_covers_the_analysis_and_the_answer(bad_llm, cache_dir, monkeypatch, capsys):
    """A hanging model used to be waited for twice --llm-timeout: once for the request
    analysis, once for the answer."""
    import time

    bad_llm.mode = "slow"
    _bad_env(bad_llm, cache_dir, monkeypatch, SEMHIST_KEYWORD="llm")
    began = time.perf_counter()
    code = main(["ask", str(SAMPLES / "ramen.json"), RAMEN_REQUEST, "--answer", "--llm-timeout", "3", "--json"])
    waited = time.perf_counter() - began
    out, err = capsys.readouterr()
    assert code == 4 and "deadline" in json.loads(out)["answer_error"], err
    assert waited < 3 * 1.7, waited  # one timeout and the work around it, not two timeouts
