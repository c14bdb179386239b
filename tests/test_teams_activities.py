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


def _in(conversation: str, kind: str, channel: str | None, text: str, id: str) -> dict:
    body = copy.deepcopy(ACTIVITY)
    body.update(id=id, text=text)
    body["conversation"] = {"id": conversation, "conversationType": kind, "tenantId": "contoso"}
    body["channelData"] = {"tenant": {"id": "contoso"}, **({"teamsChannelId": channel, "channel": {"id": channel},
                                                           "team": {"id": "19:team@thread.tacv2"}} if channel else {})}
    return body


def test_a_channels_reply_chains_reach_each_other_and_nothing_further(agent):
    launch, other = "19:launch@thread.tacv2", "19:other@thread.tacv2"
    said = [(f"{launch};messageid=501", "channel", launch, "We decided the launch is on June 4."),
            (f"{other};messageid=601", "channel", other, "Our launch is on September 9."),
            ("a:1on1-taro", "personal", None, "My own launch note: October 1."),
            (f"{launch};messageid=502", "channel", launch, "What did we decide about the launch in this channel?")]
    for i, (conversation, kind, channel, text) in enumerate(said):
        assert httpx.post(agent.url + "/api/messages", json=_in(conversation, kind, channel, text, f"scope-{i}"),
                          timeout=60).status_code == 200
    data = agent.log.parent / "data"
    from semhist.indexers.store import open_store

    store = open_store(f"sqlite:///{data / 'semhist.sqlite3'}")
    try:
        places = {c: store.place_of(c) for c, *_ in said}
        asked = store.turns(f"{launch};messageid=502")[-1]
    finally:
        store.close()
    assert places[f"{launch};messageid=501"].channel == launch and places["a:1on1-taro"].channel is None
    assert {p.tenant for p in places.values()} == {"contoso"}
    assert [e["thread"] for e in asked["elsewhere"]] == [f"{launch};messageid=501"]  # not the other channel's
