import pytest

from indexers.lexical import BM25, tokenize
from retrieval.pipeline.keyword import FACT, TOPIC, local_intent, local_plan


def test_japanese_tokens_are_content_words_in_base_form():
    assert tokenize("前に京都観光バス株式会社について何と言っていたか教えて。") == ["京都", "観光", "バス", "株式会社"]
    assert "探す" not in tokenize("札幌で宿泊施設を探したときの話")


def test_english_tokens_are_stemmed_without_stopwords():
    assert tokenize("What did Caroline research about adoption agencies?") == ["carolin", "research", "adopt", "agenc"]


def test_bm25_prefers_the_rarer_term():
    docs = [tokenize(t) for t in ["I love ramen", "ramen and sushi", "the server is in Hong Kong", "sushi again"]]
    scores = BM25(docs).scores(tokenize("Hong Kong ramen"))
    assert scores.argmax() == 2 and scores[3] == 0


@pytest.mark.parametrize("text,intent", [
    ("この履歴からラーメンの話題について要約してください。", TOPIC),
    ("前に那覇の天気を聞いたとき、何て言ってた？", TOPIC),
    ("前に東京でショッピング施設を探したときの話、どうなったっけ？", TOPIC),
    ("サーバーはどこにある？", FACT),
    ("Summarize what we said about lunch on Friday.", TOPIC),
    ("What did we decide about the Hong Kong server?", TOPIC),
    ("When did Caroline go to the LGBTQ support group?", FACT),
    ("What did Caroline research?", FACT),
])
def test_intent(text, intent):
    assert local_intent(text) == intent


def test_plan_removes_time_and_meta_words_from_the_search():
    from datetime import datetime, timezone
    plan = local_plan("What did Caroline and Melanie talk about on 8 May 2023? Summarize it.",
                      datetime(2023, 10, 1, tzinfo=timezone.utc))
    assert plan.time_range.start.date().isoformat() == "2023-05-08"
    assert plan.terms == ["carolin", "melani"]
    assert plan.intent == TOPIC


def test_tokenize_is_safe_across_threads():
    """A service tokenizes in several request threads at once (the shared Snowball stemmer
    raised IndexError under load)."""
    import random
    from concurrent.futures import ThreadPoolExecutor

    rng = random.Random(3)
    words = ("running generously organizational happily relational conditioning hopefulness nationalization "
             "rationalize sensational communications ラーメンを食べに行きました 来週の定例は火曜です").split()
    texts = [" ".join(rng.choices(words, k=12)) for _ in range(400)]
    expected = [tokenize(t) for t in texts]
    with ThreadPoolExecutor(8) as pool:
        for _ in range(3):
            assert list(pool.map(tokenize, texts)) == expected
