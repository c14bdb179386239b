"""The learned segmenter (`time+learned`): the shipped weights, online decisions equal to the
whole thread's, work per append that does not grow with the thread, and clear refusals."""

import json
from dataclasses import replace
from datetime import datetime, timedelta

import numpy as np
import pytest

from semhist.indexers import segmodel
from semhist.indexers.segment import get_segmenter
from semhist.indexers.segmodel import FEATURES, SHIPPED, BoundaryModel, LearnedSegmenter, load_model
from semhist.kernel.budget import Budget
from semhist.kernel.errors import ConfigError
from semhist.kernel.model import embedding_text

START = datetime(2024, 1, 1, 9, 0, 0)


def squeezed(messages):
    return tuple(replace(m, timestamp=START + timedelta(seconds=i)) for i, m in enumerate(messages))


def test_shipped_weights_are_small_and_name_their_data_and_licence():
    data = json.loads(SHIPPED.read_text(encoding="utf-8"))
    assert SHIPPED.stat().st_size < 1_000_000
    assert "CC BY-SA 4.0" in data["licence"] and any("TIAGE" in d for d in data["data"])
    assert not any("locomo" in d.lower() for d in data["data"])  # CC BY-NC: never in shipped weights
    model = load_model()
    assert model.dim == 512 and model.embedder.startswith("use-m3") and len(model.weights) == len(FEATURES) + 1024


def test_a_conversation_that_changes_subject_is_cut_where_it_changes(engine):
    """Two task dialogues one after the other, no pause between them: a cut at the second's
    first request, none inside the first."""
    said = ["I need a hotel in the centre for two nights.", "The Grand has rooms; shall I book it?",
            "Yes please, for two people.", "Booked: your reference is QX12.", "Great, thank you so much!",
            "You're welcome. Anything else?",
            "Can you find me a train to Cambridge on Friday morning?", "The 9:15 arrives at 10:05.",
            "How much is a ticket?", "It is 23.60 pounds.", "Thanks, that's all.", "Goodbye!"]
    from semhist.kernel.model import Message

    messages = tuple(Message(i, "user" if i % 2 == 0 else "assistant", t, START + timedelta(seconds=i))
                     for i, t in enumerate(said))
    vectors = engine.parts.embedder.embed([embedding_text(m) for m in messages])
    starts = [b.first for b in LearnedSegmenter(max_block_tokens=10**6).segment(messages, vectors)]
    assert 6 in starts and not any(0 < s < 5 for s in starts)


def test_with_a_token_floor_short_runs_between_pauses_stay_whole(engine, ramen):
    """`topic_min_tokens`: no topic cut in a block smaller than the floor, so a thread whose
    pauses already cut it into short runs gets the time-gap segmenter's blocks."""
    vectors = engine.parts.embedder.embed([embedding_text(m) for m in ramen.messages])
    gaps = [b.first for b in get_segmenter("time-gap", max_block_tokens=10**6).segment(ramen.messages, vectors)]
    floored = LearnedSegmenter(max_block_tokens=10**6, min_tokens=10**5).segment(ramen.messages, vectors)
    anywhere = LearnedSegmenter(max_block_tokens=10**6).segment(ramen.messages, vectors)
    assert [b.first for b in floored] == gaps and len(anywhere) > len(gaps)
    assert all(b.cause.startswith("pause:") for b in floored[1:])
    assert any(b.cause.startswith("topic:") for b in anywhere)


def test_online_segmentation_equals_the_whole_threads(engine, ramen):
    """Appending one message at a time and closing all but the open tail's last block cuts
    where segmenting the whole thread does."""
    messages = squeezed(ramen.messages)
    vectors = engine.parts.embedder.embed([embedding_text(m) for m in messages])
    segmenter = LearnedSegmenter(max_block_tokens=400)
    whole = [b.first for b in segmenter.segment(messages, vectors)]
    closed, tail = [], 0
    for end in range(1, len(messages) + 1):
        blocks = segmenter.segment(messages[tail:end], vectors[tail:end])
        for b in blocks[:-1]:
            closed.append(tail + b.first)
        if len(blocks) > 1:
            tail += blocks[-1].first
    assert closed + [tail] == whole and len(whole) > 2


def test_work_per_append_does_not_grow_with_the_thread(make_history, monkeypatch):
    """Gaps scored per append through the real write path: bounded by the open block (which
    the size limit bounds), and no more for appends 300-400 than for appends 100-200."""
    calls = []
    real = segmodel.hand_row
    monkeypatch.setattr(segmodel, "hand_row", lambda *a, **k: calls.append(1) or real(*a, **k))
    history = make_history(segmenter="time+learned", max_block_tokens=300, topic_min_tokens=0)
    said = ["the deploy on Friday needs a rollback plan", "ok, I will write it down", "what about the budget for Q3?",
            "it is due next week", "and the team offsite in May?", "booked for the 12th"]
    per_append = []
    for i in range(400):
        before = len(calls)
        history.add("t", "user" if i % 2 == 0 else "assistant", f"{said[i % 6]} ({i})",
                    timestamp=START + timedelta(seconds=i))
        per_append.append(len(calls) - before)
    early, late = sum(per_append[100:200]), sum(per_append[300:400])
    assert 0 < late <= early * 1.3 and max(per_append) <= 40


def test_other_embedders_vectors_are_refused_with_the_fix():
    model = load_model()
    from semhist.kernel.model import Message

    messages = tuple(Message(i, "user", f"m {i}", START + timedelta(seconds=i)) for i in range(6))
    with pytest.raises(ConfigError, match="--embedder use-m3"):
        LearnedSegmenter(model=model).segment(messages, np.ones((6, 384), dtype=np.float32))


def test_a_model_file_that_is_not_one_is_a_config_error(tmp_path):
    bad = tmp_path / "m.json"
    bad.write_text(json.dumps({"weights": [1, 2]}), encoding="utf-8")
    with pytest.raises(ConfigError, match="not a segmenter model"):
        get_segmenter("time+learned", model=str(bad))
    with pytest.raises(ConfigError, match="cannot read"):
        get_segmenter("time+learned", model=str(tmp_path / "missing.json"))
    binary = tmp_path / "b.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigError, match="cannot read"):
        get_segmenter("time+learned", model=str(binary))
    shipped = json.loads(SHIPPED.read_text(encoding="utf-8"))
    for change, says in [({"features": list(reversed(shipped["features"]))}, "features are not"),
                         ({"lookahead": -1}, "lookahead"), ({"threshold": 0}, "threshold")]:
        bad.write_text(json.dumps({**shipped, **change}), encoding="utf-8")
        load_model.cache_clear()
        with pytest.raises(ConfigError, match=says):
            get_segmenter("time+learned", model=str(bad))
    assert isinstance(load_model(), BoundaryModel)


def test_the_fast_scorer_gives_what_the_full_row_does(engine, ramen):
    """Runtime folds the standardization into the weights and projects the probe once per run:
    the same probability as the row training fits on."""
    messages = squeezed(ramen.messages)
    vectors = engine.parts.embedder.embed([embedding_text(m) for m in messages])
    model = load_model()
    run = segmodel.Run(vectors, [segmodel.Cues.of(m) for m in messages])
    score = model.scorer(run)
    for k, start in [(1, 0), (5, 2), (30, 27), (60, 50)]:
        end = k + model.lookahead + 1
        assert score(k, start, end) == pytest.approx(model.score(segmodel.gap_row(run, k, start, end)), abs=1e-9)


def test_unknown_segmenter_lists_the_learned_one():
    with pytest.raises(ConfigError, match=r"time\+learned"):
        get_segmenter("topic-magic")


@pytest.mark.slow
@pytest.mark.shared_data
def test_the_shipped_weights_are_what_the_training_command_fits(tmp_path, cache_dir):
    """`python benchmarks/seg_train.py --out DIR` (docs/guides/strategies.md) fits the shipped
    file again: the same choices, the same weights."""
    import os
    import subprocess
    import sys

    from .conftest import ROOT

    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "SEMHIST_"))}
    env.update({"SEMHIST_DATA_DIR": str(tmp_path / "data"), "SEMHIST_CACHE_DIR": str(cache_dir)})
    done = subprocess.run([sys.executable, "benchmarks/seg_train.py", "--no-ablation", "--out", str(tmp_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    fitted = json.loads((tmp_path / "segmenter.json").read_text(encoding="utf-8"))
    shipped = json.loads(SHIPPED.read_text(encoding="utf-8"))
    for key in ("features", "data", "licence", "threshold", "min_segment", "lookahead", "l2", "dim"):
        assert fitted[key] == shipped[key], key
    assert max(abs(a - b) for a, b in zip(fitted["weights"], shipped["weights"])) < 0.01


def test_a_thread_stored_with_one_token_floor_is_refused_with_another(make_history, ramen):
    from semhist.kernel.errors import IndexMismatchError

    make_history(segmenter="time+learned").ingest("r", ramen)
    other = make_history(segmenter="time+learned", topic_min_tokens=400)
    with pytest.raises(IndexMismatchError, match="--topic-min-tokens 400"):
        other.ask("r", "ramen?")


def test_the_index_and_the_store_say_why_each_block_starts(make_history, ramen):
    """Each block's cause, decided when the block before it closed, is stored on that block
    (`cut`) and read back as the next block's `cause` by a process that loads the thread."""
    make_history(segmenter="time+learned", topic_min_tokens=0).ingest("r", ramen)
    again = make_history(segmenter="time+learned", topic_min_tokens=0)  # reads the store afresh
    blocks = again.index("r").blocks
    stored = again.store.blocks("r")
    assert blocks[0].why == {"kind": "start"} and len(stored) >= 3
    assert {b.why["kind"] for b in blocks[1:]} <= {"pause", "topic", "size"}
    assert {"pause", "topic"} <= {b.why["kind"] for b in blocks[1:]}
    assert [s.cut for s in stored] == [b.cause for b in blocks[1:len(stored) + 1]]


def test_a_long_threads_view_logs_why_its_retrieved_blocks_start(make_history, ramen):
    """A thread past `view_limit` is searched through a view of a few blocks: each still says
    why it starts (the store keeps a block's own cause, not only the next one's)."""
    make_history(segmenter="time+learned", topic_min_tokens=0).ingest("r", ramen)
    viewed = make_history(segmenter="time+learned", topic_min_tokens=0, view_limit=20, log_prompts=True)
    viewed.ask("r", "ラーメンのおすすめは？", budget=Budget.parse("300"))
    retrieved = viewed.log("r", limit=1)[-1]["retrieved"]
    assert retrieved and all(r["block_starts"]["kind"] in ("start", "pause", "topic", "size") for r in retrieved)
    assert any(r["block_starts"]["kind"] != "start" for r in retrieved)


def test_the_fix_for_a_thread_stored_with_ones_own_weights_names_no_none(make_history, ramen, tmp_path):
    from semhist.indexers.index import manifest
    from semhist.kernel.errors import IndexMismatchError

    own = tmp_path / "mine.json"
    own.write_text(SHIPPED.read_text(encoding="utf-8"), encoding="utf-8")
    make_history(segmenter="time+learned", segmenter_model=str(own)).ingest("r", ramen)
    shipped = make_history(segmenter="time+learned")
    with pytest.raises(IndexMismatchError, match=r"run: semhist reindex --thread r$") as refused:
        shipped.ask("r", "ramen?")
    assert "None" not in str(refused.value)
    wanted = make_history().parts.wanted_manifest  # time-gap: no learned keys to wait for
    assert manifest.complete({**wanted}, wanted) and "model" not in wanted
