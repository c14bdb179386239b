"""`semhist ask --answer` against an endpoint that misbehaves (a real HTTP server on 127.0.0.1):
the prompt and what was retrieved are printed, then one line of error, exit 4; never a traceback."""

from __future__ import annotations

import json

import pytest

from retrieval.cli.main import main

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
