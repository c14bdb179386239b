"""The learned ranker (retrieval/pipeline/ranker.py): what it ranks first, what it reads, the
model files it accepts. On a thread of many conversations, a request that names a person ranks
the stretches where that person speaks first, which dense and BM25 fused alone do not."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from semhist import Budget

PAIRS = [("Caroline", "Melanie"), ("Jon", "Gina"), ("Hanako Sato", "Taro Yamada"), ("Nate", "Joanna")]


def _thread() -> list[dict]:
    """Four pairs of people, each talking about their pottery class in turn, weeks apart."""
    t, rows = datetime(2026, 2, 2, 18, tzinfo=timezone.utc), []
    for week in range(3):
        for k, (a, b) in enumerate(PAIRS):
            at = t + timedelta(days=7 * week + k)
            rows += [{"role": "user", "name": a, "content": f"I went to my pottery class again, week {week}.",
                      "timestamp": at.isoformat()},
                     {"role": "assistant", "name": b, "content": f"Nice! What did you make in pottery this time, {a}?",
                      "timestamp": (at + timedelta(minutes=1)).isoformat()},
                     {"role": "user", "name": a, "content": f"A bowl with a blue glaze ({a.split()[0]}'s week {week}).",
                      "timestamp": (at + timedelta(minutes=2)).isoformat()}]
    return rows


def _first_speaker(result) -> str:
    context = next(m["content"] for m in result.prompt.messages if "<retrieved_history>" in str(m["content"]))
    first = next(line for line in context.splitlines()[2:] if not line.startswith("["))
    return first.split(":", 1)[0]


def test_a_named_person_s_stretches_rank_first(make_history):
    on, off = make_history(), make_history(ranker="fused")
    for h in (on, off):
        h.add_many("t", _thread())
    request = "What did Jon make in his pottery class?"
    boosted = on.ask("t", request, budget=Budget.parse("400"), log_turn=False)
    speakers = {line.split(":", 1)[0] for m in boosted.prompt.messages if "<retrieved_history>" in str(m["content"])
                for line in m["content"].splitlines()[2:] if ":" in line and not line.startswith("[")}
    assert speakers <= {"Jon", "Gina"}, speakers  # only Jon's conversation fits, and it is Jon's
    plain = off.ask("t", request, budget=Budget.parse("400"), log_turn=False)
    assert {line.split(":", 1)[0] for m in plain.prompt.messages if "<retrieved_history>" in str(m["content"])
            for line in m["content"].splitlines()[2:] if ":" in line and not line.startswith("[")} - {"Jon", "Gina"}


def test_a_conversation_between_two_people_is_not_reranked(make_history):
    """Every stretch has both speakers: naming one of them says nothing about where to look."""
    from semhist.pipeline.search import author_blocks

    h = make_history()
    h.add_many("t", [r for r in _thread() if r["name"] in PAIRS[0]])
    index = h.index("t")
    assert author_blocks(index, ["carolin", "potteri"]) is None


def test_the_shipped_model_reads_the_features_this_version_computes_and_names_its_licences():
    import json
    from importlib.resources import files

    from semhist.pipeline.features import NAMES
    from semhist.pipeline.ranker import load_model

    text = files("semhist.pipeline").joinpath("ranker.json").read_text(encoding="utf-8")
    model = json.loads(text)
    assert len(text.encode()) < 8_000  # a small file, read once per process
    assert set(model["features"]) <= set(NAMES)
    assert not any("LoCoMo" in d for d in model["data_licences"]), model["data_licences"]  # CC BY-NC: never shipped
    assert all(split == "tune" for split in model["trained_on"].values())
    assert load_model() is load_model()


@pytest.mark.parametrize("text, says", [
    ("{", "not JSON"), ("[1, 2]", "not a model file"), ('{"features": ["bm25"]}', "not a model file"),
    ('{"features": ["bm25", "bogus"], "mean": [0, 0], "std": [1, 1], "weights": [1, 1]}', "bogus"),
    ('{"features": ["bm25"], "mean": [0], "std": [0], "weights": [1]}', "do not line up"),
    ('{"features": ["bm25"], "mean": [0, 1], "std": [1], "weights": [1]}', "do not line up"),
    ('{"features": [], "mean": [], "std": [], "weights": []}', "do not line up"),
    ('{"features": ["bm25"], "mean": [NaN], "std": [1], "weights": [1]}', "do not line up"),
])
def test_a_bad_model_file_is_a_config_error_naming_the_file(tmp_path, text, says):
    from semhist.kernel.errors import ConfigError
    from semhist.pipeline.ranker import get_ranker

    path = tmp_path / "mine.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=f"mine.json.*{says}"):
        get_ranker("learned", str(path))
    with pytest.raises(ConfigError, match="nowhere.json"):
        get_ranker("learned", str(tmp_path / "nowhere.json"))


def test_an_unknown_ranker_lists_the_valid_ones():
    from semhist import Settings
    from semhist.kernel.errors import ConfigError
    from semhist.pipeline.ranker import get_ranker

    with pytest.raises(ConfigError, match="learned, fused"):
        get_ranker("bm25")
    with pytest.raises(ConfigError, match="learned"):
        Settings.load(env={"SEMHIST_RANKER": "bm25"})


def test_a_model_of_ones_own_is_read_from_ranker_model(make_history, tmp_path):
    """A user's model file (as benchmarks/ltr_train.py writes it) orders the candidates: one that
    reads BM25 alone, inverted, ranks the message with the request's words last."""
    import json

    path = tmp_path / "inverted.json"
    path.write_text(json.dumps({"features": ["bm25"], "mean": [0.0], "std": [1.0], "weights": [-1.0]}))
    rows = _thread()
    for h, first in ((make_history(), True), (make_history(ranker_model=str(path)), False)):
        h.add_many("t", rows)
        result = h.ask("t", "What glaze did Jon's bowl have?", budget=Budget.parse("200"), log_turn=False)
        kept = [result.thread.messages[p].content for p in result.included]
        assert any("Jon's week" in k for k in kept) is first, kept


def test_the_rows_flags_kept_by_appends_are_the_ones_read_whole(make_history):
    """features.ThreadRows is kept as messages arrive; after appends it holds what it would
    hold were the thread read whole."""
    from semhist.pipeline.features import ThreadRows

    rows = _thread()
    h = make_history()
    h.add_many("t", rows[:10])
    index = h.index("t")
    index.derived("ranking rows", ThreadRows)  # made now, extended by the appends below
    for r in rows[10:]:
        h.add_many("t", [r])
    index = h.index("t")
    kept = index.derived("ranking rows", ThreadRows)
    fresh = ThreadRows()
    fresh.extend(index.messages, 0)
    assert [a.tolist() for a in kept] == [a.tolist() for a in fresh.value(index)]
    assert kept[0].sum() == 12 and kept[1].sum() == len(rows) - 1  # a question each exchange; every turn replies


def test_the_shipped_training_threads_are_the_ones_their_data_card_names():
    """data/benchmarks/tiage_chats.jsonl.xz, what the shipped weights were fitted on besides
    JMultiWOZ: the checksum its README gives, tune and held threads, no gold outside a thread."""
    import hashlib
    import json
    import lzma
    import re

    from .conftest import ROOT

    folder = ROOT / "data" / "benchmarks"
    text = lzma.open(folder / "tiage_chats.jsonl.xz").read()
    card = (folder / "README.md").read_text(encoding="utf-8")
    row = next(line for line in card.splitlines() if line.startswith("| `tiage_chats.jsonl.xz`"))
    assert hashlib.sha256(text).hexdigest() == re.search(r"`([0-9a-f]{64})`", row).group(1)
    threads = [json.loads(line) for line in text.decode("utf-8").splitlines()]
    assert {t["split"] for t in threads} == {"tune", "held"}
    for t in threads:
        assert all(0 <= i < len(t["messages"]) for q in t["queries"] for i in q["relevant_message_indices"])
        assert all(m["speaker"] for m in t["messages"])


@pytest.mark.slow
def test_the_shipped_weights_are_what_the_training_command_fits(tmp_path, cache_dir):
    """The two commands of docs/guides/strategies.md ("The learned ranker") fit the shipped file
    again, from the data a clone has (JMultiWOZ and TIAGE's chats ship in data/benchmarks/)."""
    import json
    import os
    import subprocess
    import sys

    from .conftest import ROOT

    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "SEMHIST_"))}
    env.update({"SEMHIST_DATA_DIR": str(tmp_path / "data"), "SEMHIST_CACHE_DIR": str(cache_dir)})
    sets = "jmultiwoz,jmultiwoz_joined,tiage"
    for script, args in (("ltr_features", ["--sets", sets, "--cache-dir", str(cache_dir)]),
                         ("ltr_train", ["--features", str(tmp_path), "--train", sets])):
        done = subprocess.run([sys.executable, f"benchmarks/{script}.py", *args, "--out", str(tmp_path)], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=1200)
        assert done.returncode == 0, done.stderr[-3000:]
    fitted = json.loads((tmp_path / "ranker.json").read_text(encoding="utf-8"))
    shipped = json.loads((ROOT / "retrieval" / "pipeline" / "ranker.json").read_text(encoding="utf-8"))
    assert fitted["features"] == shipped["features"] and fitted["trained_on"] == shipped["trained_on"]
    assert max(abs(a - b) for a, b in zip(fitted["weights"], shipped["weights"])) < 0.01
