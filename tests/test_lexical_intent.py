import pytest

from semhist.indexers.lexical import BM25, tokenize
from semhist.pipeline.keyword import FACT, TOPIC, local_intent, local_plan


def test_japanese_tokens_are_content_words_in_base_form():
    assert tokenize("前に京都観光バス株式会社について何と言っていたか教えて。") == ["京都", "観光", "バス", "株式会社"]
    assert "探す" not in tokenize("札幌で宿泊施設を探したときの話")


def test_english_tokens_are_stemmed_without_stopwords():
    assert tokenize("What did Caroline research about adoption agencies?") == ["carolin", "research", "adopt", "agenc"]


def test_bm25_prefers_the_rarer_term():
    docs = [tokenize(t) for t in ["I love ramen", "ramen and sushi", "the server is in Hong Kong", "sushi again"]]
    scores = BM25(docs).scores(tokenize("Hong Kong ramen"))
    assert scores.argmax() == 2 and scores[3] == 0


def test_chinese_and_korean_facts_share_terms_with_the_question_that_asks_them_back():
    # Chinese went through janome (the request's one "keyword" was the whole sentence) and
    # Korean yielded no term at all: BM25 contributed nothing for either.
    for said, asked in [("我叫小王，在上海工作。", "我叫什么名字？小王是谁？"),
                        ("数据库我们决定用PostgreSQL。", "我们决定用哪个数据库？"),
                        ("제 이름은 민수예요.", "민수가 누구예요? 제 이름이 뭐예요?"),
                        ("우리 강아지 이름은 초코예요.", "우리 강아지 이름이 뭐였죠?")]:
        assert set(tokenize(said)) & set(tokenize(asked)), (said, asked)
    assert "postgresql" in tokenize("数据库我们决定用PostgreSQL。")
    assert not {"什么", "我", "吗"} & set(tokenize("我叫什么名字吗？"))
    assert tokenize("제 이름이 뭐예요?")[0] == "이름"


def test_bm25_finds_the_chinese_and_korean_fact():
    history = ["你好！", "我叫小王，在上海工作。", "明天天气怎么样？", "推荐一本书吧。", "我的猫叫咪咪。"]
    scores = BM25([tokenize(t) for t in history]).scores(tokenize("我叫什么名字？"))
    assert scores[1] > 0 and not scores[[0, 2, 3]].any()  # 「我的猫叫咪咪」 shares 叫: the dense side decides
    history = ["안녕하세요!", "제 이름은 민수예요.", "내일 날씨 어때요?", "책 추천해 주세요.", "우리 강아지 이름은 초코예요."]
    assert BM25([tokenize(t) for t in history]).scores(tokenize("우리 강아지 이름이 뭐였죠?")).argmax() == 4


@pytest.mark.parametrize("request_text,keywords", [
    ("我叫什么名字？", ("名字",)),
    ("我们决定用哪个数据库？", ("决定用", "数据库")),
    ("제 이름이 뭐예요?", ("이름",)),
    ("서버가 어느 데이터센터에 있다고 했죠?", ("서버", "데이터센터")),
])
def test_chinese_and_korean_local_keywords_are_words_not_the_sentence(request_text, keywords):
    assert local_plan(request_text, None).keywords == keywords


@pytest.mark.parametrize("text,intent", [
    ("我们之前聊了什么关于旅行的？", TOPIC),
    ("总结一下我们关于服务器的讨论。", TOPIC),
    ("我对什么过敏？", FACT),
    ("여행에 대해 얘기한 내용을 요약해 주세요.", TOPIC),
    ("팀 회의는 언제예요?", FACT),
])
def test_chinese_and_korean_intent(text, intent):
    assert local_intent(text) == intent


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
