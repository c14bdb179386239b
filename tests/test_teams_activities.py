"""The Teams activity corpus (tests/teams/activities.json) replayed through `semhist agent`
over HTTP: what each kind of activity stores and what the agent answers."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import httpx
import pytest

from .test_agent import ACTIVITY, start_agent, stored

pytestmark = pytest.mark.slow

@pytest.fixture(scope="module")
def agent(tmp_path_factory, cache_dir):
    server = start_agent(tmp_path_factory.mktemp("teams"), cache_dir)
    yield server
    server.stop()


CASES = json.loads((Path(__file__).parent / "teams" / "activities.json").read_text(encoding="utf-8"))["cases"]


def _activity(case: dict, fields: dict) -> dict:
    body = copy.deepcopy(ACTIVITY)
    body["id"] = f"act-{case['id']}"
    body.update(copy.deepcopy(fields))
    body["conversation"]["id"] = f"19:teams-{case['id'].replace('_', '-')}@thread.tacv2"
    return {k: v for k, v in body.items() if v is not None or k == "timestamp"}


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_each_activity_kind_is_stored_and_answered_as_meant(agent, case):
    for before in case.get("before", ()):  # the messages an edit or a delete is about
        assert httpx.post(agent.url + "/api/messages", json=_activity(case, before), timeout=60).status_code == 200
    body = _activity(case, case["activity"])
    answer = httpx.post(agent.url + "/api/messages", json=body, timeout=60)
    assert answer.status_code == case.get("status", 200), answer.text
    if answer.status_code == 400:
        assert "timestamp" in answer.json()["error"] and "\n" not in answer.json()["error"]
    replies = [a.get("text") or "" for a in (answer.json().get("activities") or [])
               if a.get("type") == "message"] if case.get("status", 200) == 200 and "reply" in case else []
    if case.get("reply"):
        assert replies and case["reply"].lower() in replies[0].lower(), replies
    elif "reply" in case:
        assert replies == [], replies
    thread = body["conversation"]["id"]
    assert [f"{m.role}: {m.content}" for m in stored(agent, thread)] == case["stored"]
    assert "Traceback" not in agent.output()


def test_the_agents_health_probe_says_only_ok(agent):
    assert httpx.get(agent.url + "/healthz", timeout=30).json() == {"status": "ok"}
