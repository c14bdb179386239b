"""Answer scoring: LoCoMo's F1, coverage of the evidence, prefix reuse, sampling."""

import pytest

from semhist.indexers.loader import load
from semhist.evaluate import sample_queries
from semhist.scoring import answer_f1, coverage, prefix_reuse, salient, token_f1

from .conftest import SAMPLES


@pytest.mark.parametrize("prediction,gold,expected", [
    ("7 May 2023", "7 May 2023", 1.0),
    ("She went on 7 May 2023.", "7 May 2023", 2 / 3),  # precision 3/6: "she went on" dilutes
    ("The painting of a sunrise", "painted sunrise", 2 * (2 / 3) * 1 / (2 / 3 + 1)),  # stems: paint, sunris
    ("I don't know", "2022", 0.0),
    ("", "2022", 0.0),
])
def test_token_f1_uses_locomos_normalisation(prediction, gold, expected):
    assert token_f1(prediction, gold) == pytest.approx(expected)


def test_multi_hop_answers_are_scored_part_by_part():
    assert answer_f1("pottery, camping", "camping, pottery, painting", "locomo_cat1") == pytest.approx(2 / 3)
    assert answer_f1("pottery, camping", "camping, pottery, painting") == pytest.approx(0.8)  # one bag of words


def test_coverage_counts_names_numbers_and_times():
    evidence = ["Decided: primary server in Hong Kong, fallback in Singapore.",
                "Start with 8 vCPUs and 32 GB RAM."]
    assert {"Hong Kong", "Singapore", "8", "32"} <= salient(" ".join(evidence))
    # Hong Kong, Singapore, GB RAM, 8, 32: the answer names two of five
    assert coverage("Hong Kong is the primary; Singapore the fallback.", evidence) == pytest.approx(2 / 5)
    assert coverage("anything", ["ok."]) is None  # nothing to look for
    assert "21:00" in salient("一蘭は21:00まで営業しています。")


def test_prefix_reuse_is_the_share_of_tokens_a_cache_would_read():
    system = {"role": "system", "content": "You are the ops bot. " * 20}
    one = [system, {"role": "user", "content": "question one"}]
    two = [system, {"role": "user", "content": "question one"}, {"role": "assistant", "content": "answer"},
           {"role": "user", "content": "question two"}]
    assert prefix_reuse(None, one) == 0.0
    assert 0.7 < prefix_reuse(one, two) < 1.0
    moved = [{"role": "system", "content": "new instruction"}, *two]
    assert prefix_reuse(two, moved) < 0.05  # an instruction put first invalidates everything after it


def test_sample_queries_is_even_and_stable():
    threads = [load(SAMPLES / "english.json").only(), load(SAMPLES / "ramen.json").only()]
    picked = sample_queries(threads, 2)
    assert sum(len(t.queries) for t in picked) == 2
    assert [q.text for t in picked for q in t.queries] == [q.text for t in sample_queries(threads, 2) for q in t.queries]
    assert {t.id for t in picked} == {t.id for t in threads}  # spread over both threads


@pytest.mark.parametrize("reply,expected", [
    ('{"reason": "The answer is not correct: it names Paris", "label": "WRONG"}', False),
    ('{"reason": "saying it does not know would be wrong, but it names the date", "label": "CORRECT"}', True),
    ('Label: correct', True),
    ("WRONG", False),
])
def test_the_judge_is_read_by_its_label(reply, expected):
    from semhist.scoring import judge_label
    assert judge_label(reply) is expected


def test_a_judge_without_a_label_is_an_error():
    from semhist.kernel.errors import BackendError
    from semhist.scoring import judge_label
    with pytest.raises(BackendError):
        judge_label("I think it is fine")
