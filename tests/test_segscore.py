"""`semhist eval FILE --segmentation`: Pk/WindowDiff of the configured segmenter against a
file's topic_segments, through the same store-and-segment path as every ask."""

import json
from datetime import datetime, timedelta

import pytest

from semhist.segscore import pk_window_diff
from tests.conftest import SAMPLES, SHARED_DATA
from tests.test_cli import semhist


def test_pk_and_window_diff_by_hand():
    assert pk_window_diff([0, 4], [0, 4], 8) == (0.0, 0.0)
    # k = 2: windows (i, i+2) for i in 0..5; the reference changes segment across (2,4) and (3,5)
    assert pk_window_diff([0, 4], [0], 8) == (2 / 6, 2 / 6)
    # a cut one message early: two windows disagree on "same segment", two on the count of cuts
    assert pk_window_diff([0, 4], [0, 3], 8) == (2 / 6, 2 / 6)
    # a cut everywhere: every window of the reference's first and second halves is wrong
    pk, wd = pk_window_diff([0, 4], list(range(8)), 8)
    assert pk == 4 / 6 and wd == 1.0
    assert pk_window_diff([0], [0], 1) == (0.0, 0.0)  # too short to have a window


def _thread(tid: str, topics: list[list[str]], start: datetime) -> dict:
    """Topics an hour apart, their messages a minute apart: time gaps find every boundary."""
    messages, segments, t = [], [], start
    for words in topics:
        first = len(messages)
        for n, text in enumerate(words):
            messages.append({"role": "user" if n % 2 == 0 else "assistant", "content": text,
                             "timestamp": t.isoformat()})
            t += timedelta(minutes=1)
        segments.append([first, len(messages), f"topic {len(segments)}"])
        t += timedelta(hours=1)
    return {"id": tid, "language": "en", "messages": messages, "queries": [], "topic_segments": segments}


@pytest.fixture
def annotated(tmp_path):
    ramen = ["Where should we eat ramen?", "Ichiran is close.", "What toppings?", "Egg and pork.",
             "Is it open late?", "Until two."]
    deploy = ["When do we deploy?", "Friday at ten.", "Who is on call?", "Aiko.", "Rollback plan?", "Blue-green."]
    films = ["Any film tonight?", "Perfect Days.", "Where is it on?", "The Ginza cinema.", "Tickets?", "Online."]
    path = tmp_path / "annotated.jsonl"
    rows = [_thread("t1", [ramen, deploy, films], datetime(2025, 5, 1, 9)),
            _thread("t2", [deploy, films], datetime(2025, 5, 2, 9)),
            {"id": "no-gold", "language": "en", "messages": [{"role": "user", "content": "hi"}], "queries": []}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_eval_segmentation_json_contract(annotated, cache_dir):
    report = json.loads(semhist("eval", str(annotated), "--segmentation", "--json", "--quiet",
                                cache_dir=cache_dir).stdout)
    assert report["dataset"] == "annotated.jsonl"
    seg = report["segmentation"]
    assert seg["segmenter"] == "time-gap" and seg["n_threads"] == 2  # the thread without gold is left out
    assert seg["pk"] == 0.0 and seg["window_diff"] == 0.0  # the hour gaps are the topic boundaries
    assert {"no cut", "fixed 3 messages", "fixed 6 messages"} <= set(seg["baselines"])
    assert all(set(b) == {"pk", "window_diff"} for b in seg["baselines"].values())
    assert seg["baselines"]["no cut"]["pk"] > 0.3


def test_eval_segmentation_follows_the_settings(annotated, cache_dir):
    """A gap longer than the pauses makes one block a thread: only topic sub-segments cut."""
    report = json.loads(semhist("eval", str(annotated), "--segmentation", "--json", "--quiet", "--gap", "86400",
                                cache_dir=cache_dir).stdout)
    seg = report["segmentation"]
    assert seg["params"]["gap_seconds"] == 86400
    assert seg["baselines"]["blocks without sub-segments"] == seg["baselines"]["no cut"]
    assert seg["pk"] > 0
    text = semhist("eval", str(annotated), "--segmentation", "--quiet", cache_dir=cache_dir).stdout
    assert "time-gap (configured)" in text and "no cut" in text


def test_eval_segmentation_without_topic_segments_is_one_line(cache_dir):
    proc = semhist("eval", str(SAMPLES / "ramen.json"), "--segmentation", cache_dir=cache_dir, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "no thread with topic_segments" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow
@pytest.mark.shared_data
def test_eval_segmentation_on_tiage_matches_the_benchmark(cache_dir):
    """The same figures as benchmarks/segmentation.md (whole-thread segmentation) for the first
    100 TIAGE threads: the online path cuts as the offline one does."""
    report = json.loads(semhist("eval", str(SHARED_DATA / "tiage.jsonl"), "--segmentation", "--json", "--quiet",
                                "--limit", "100", cache_dir=cache_dir).stdout)
    seg = report["segmentation"]
    assert seg["n_threads"] == 100
    assert 0.3 < seg["baselines"]["no cut"]["pk"] < 0.5
    assert seg["pk"] != seg["baselines"]["blocks without sub-segments"]["pk"]  # sub-segments are counted
