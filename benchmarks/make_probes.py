"""Writes data/probes/probes.jsonl: threads in which a detail is said once, early and in
passing, then buried under unrelated turns, then needed by the last question.

    python benchmarks/make_probes.py

Each thread is a benchmark thread (see ../shared/data/README.md) whose one query carries the
message index of the detail and `detail`: strings that must appear in the prompt. Four kinds
(the query's category):
- constraint_probe: a statement said in passing;
- request_probe: the detail rides in a request (「予算は3万円なので、…教えてください。」),
  and a plain request said before it, greeting and all ("Morning! Can you recommend…?"),
  must never become a statement (`never_noted`);
- supersession_probe: a detail said, then changed a few turns later ("actually, make it
  Tuesday"): the new value is the detail, the old one is `stale`;
- casual_probe: casual Japanese statements (「甘いのマジ無理なんだよね」).

It also writes data/probes/cjk.jsonl: Chinese and Korean threads whose fact is asked back
(`semhist eval data/probes/cjk.jsonl` scores retrieval on them).
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timedelta, timezone

from common import PROBES as PROBE_DIR, add_out, out_file

PROBES = {
    "ja": [
        ("ところで、うちのサーバーは香港にあるんだ。ログの見方を教えて。", "ログはjournalctlで確認できます。", ["香港"], "サーバーに一番近いCDNのリージョンはどこにすべき？"),
        ("予算は5,000円まででお願いします。同僚へのお礼を考えています。", "承知しました。", ["5,000"], "プレゼントのおすすめを3つ挙げて。"),
        ("辛いものは苦手なんだ。最近料理を始めたよ。", "料理、いいですね。", ["辛"], "今夜の夕食のメニューを提案して。"),
        ("娘の名前はさくらです。来月で7歳になります。", "もうすぐですね。", ["さくら"], "娘への誕生日メッセージを書いて。"),
        ("チームの会議は毎週火曜の10時からです。", "了解しました。", ["火曜"], "来週の会議の準備リマインダーを作って。"),
        ("データベースはPostgreSQLを使うことに決めました。", "良い選択だと思います。", ["PostgreSQL"], "バックアップ手順を教えて。"),
        ("私はベジタリアンなので、肉と魚は食べません。", "わかりました。", ["ベジタリアン"], "京都でおすすめのランチは？"),
        ("旅行は3月15日から3泊の予定です。", "楽しみですね。", ["3月15日"], "ホテルの予約に必要な情報をまとめて。"),
        ("実は猫アレルギーがあります。", "それは大変ですね。", ["猫"], "友達の家に泊まるときの注意点は？"),
        ("使っているPCはMacです。開発を始めたいです。", "いいですね。", ["Mac"], "Pythonのインストール方法を教えて。"),
        ("車は持っていないので、いつも電車です。", "電車は便利ですね。", ["車"], "週末に箱根へ行く方法は？"),
        ("本番環境のURLは api.example.jp です。", "メモしました。", ["api.example.jp"], "ヘルスチェックのcurlコマンドを書いて。"),
    ],
    "en": [
        ("By the way, our servers are in Frankfurt. Anyway, how do I read the logs?", "Use journalctl on the host.", ["Frankfurt"], "Which cloud region should the new database use?"),
        ("My budget is 5,000 yen, no more. I need a thank-you gift.", "Got it.", ["5,000"], "Suggest three gifts for my colleague."),
        ("I can't eat spicy food. I just started cooking at home.", "Cooking at home is great.", ["spicy"], "Plan tonight's dinner menu for me."),
        ("My son's name is Leo. He turns seven next month.", "Nice!", ["Leo"], "Write a short birthday card for my son."),
        ("We decided to ship the release on June 3.", "Noted.", ["June 3"], "Draft the announcement email for the release."),
        ("We use PostgreSQL for everything, not MySQL.", "Understood.", ["PostgreSQL"], "Show me how to add an index to the orders table."),
        ("I'm allergic to peanuts, just so you know.", "Thanks for telling me.", ["peanut"], "Recommend a snack for my hike."),
        ("My flight lands at 6:40 pm on Friday.", "Safe travels.", ["6:40"], "When should the taxi pick me up at the airport?"),
        ("I only have an Android phone.", "Okay.", ["Android"], "How do I set up two-factor authentication for the app?"),
        ("Keep your answers under three sentences, please.", "Will do.", ["three sentences"], "Explain how DNS works."),
        ("The staging server is at 10.0.4.17.", "Noted.", ["10.0.4.17"], "Give me the ssh command for staging."),
        ("I prefer metric units.", "Sure.", ["metric"], "How tall is Mount Fuji?"),
    ],
}

FILLERS = {
    "ja": [
        ("明日の天気はどう？", "晴れの予報です。"), ("おすすめの映画はある？", "『君の名は。』はいかがでしょう。"),
        ("Pythonの勉強方法は？", "小さなプログラムから始めましょう。"), ("最近のAIの話題は？", "大規模言語モデルが注目されています。"),
        ("週末は何をしようかな。", "散歩や読書はいかがですか。"), ("おすすめの本は？", "『アルジャーノンに花束を』が人気です。"),
        ("朝ごはんは何がいい？", "納豆ごはんと味噌汁はどうでしょう。"), ("ジョギングのコツは？", "ゆっくり長く走ることです。"),
        ("部屋の片付けのコツは？", "使わない物から手放しましょう。"), ("おすすめの音楽は？", "ジャズはいかがでしょう。"),
        ("早起きする方法は？", "寝る時間を一定にしましょう。"), ("観葉植物の育て方は？", "水のやりすぎに注意しましょう。"),
    ],
    "en": [
        ("What's the weather tomorrow?", "Sunny, according to the forecast."), ("Any movie you'd recommend?", "Try 'Spirited Away'."),
        ("How should I learn Python?", "Start with small programs."), ("What's new in AI?", "Large language models are everywhere."),
        ("What should I do this weekend?", "A walk or a good book."), ("Any book recommendations?", "'Flowers for Algernon' is popular."),
        ("What's a good breakfast?", "Oatmeal with fruit."), ("Tips for jogging?", "Go slow and long."),
        ("How do I tidy my room?", "Start with what you never use."), ("Any music suggestions?", "Try some jazz."),
        ("How can I wake up early?", "Keep a fixed bedtime."), ("How do I care for houseplants?", "Don't overwater them."),
    ],
}
GREETING = {"ja": ("こんにちは！", "こんにちは。ご用件をどうぞ。"), "en": ("Hi there!", "Hello! How can I help?")}


# (plain request said first, its reply, request that carries the detail, its reply, detail, question)
REQUESTS = {
    "ja": [
        ("こんにちは！おすすめのラーメン屋を教えてください。", "一蘭はいかがでしょう。",
         "予算は3万円なので、ノートPCのおすすめを教えてください。", "いくつか候補を探しますね。", ["3万円"],
         "結局どのノートPCを買えばいい？"),
        ("ねえ、明日の天気を調べてください。", "晴れの予報です。",
         "集合は新宿駅の南口なので、近くのカフェを探して。", "南口の近くにいくつかあります。", ["南口"],
         "待ち合わせ場所の案内文を書いて。"),
        ("Pythonの本を選んでください。", "『退屈なことはPythonにやらせよう』はどうでしょう。",
         "参加者は12人なので、会議室の候補を教えてください。", "探してみます。", ["12人"],
         "会議室の予約メールを書いて。"),
    ],
    "en": [
        ("Morning! Can you recommend a ramen place?", "Ichiran is popular.",
         "Our team is 12 people, so can you suggest a venue for the offsite?", "Let me look.", ["12 people"],
         "Write the booking request for the offsite venue."),
        ("Hi there. Please summarize the weather for tomorrow.", "Sunny all day.",
         "My laptop runs Ubuntu 24.04, so could you tell me how to install Docker?", "Sure, use the apt repository.",
         ["Ubuntu 24.04"], "Which package manager commands do I need for the database client?"),
        ("Tell me a good book on Python.", "'Fluent Python' is a classic.",
         "The deadline is March 31, so can you help me plan the tax filing?", "Happy to help.", ["March 31"],
         "Make me a checklist with dates for the filing."),
    ],
}
# (said, reply, changed a few turns later, its reply, new detail, old detail, question)
SUPERSEDED = {
    "ja": [
        ("定例会議は月曜の10時にしよう。", "月曜10時ですね。", "やっぱり定例会議は火曜にして。", "火曜に変更しました。",
         ["火曜"], ["月曜"], "定例会議の案内メールを書いて。"),
        ("旅行先は京都に決めました。", "京都、いいですね。", "ごめん、旅行先は金沢に変更します。", "金沢ですね。",
         ["金沢"], ["京都"], "旅行の持ち物リストを作って。"),
        ("予算は5万円でお願いします。", "承知しました。", "予算はやっぱり8万円まで出せます。", "8万円ですね。",
         ["8万円"], ["5万円"], "予算内で買えるカメラを提案して。"),
    ],
    "en": [
        ("Let's hold the weekly sync on Monday at 10.", "Monday at 10, noted.", "Actually, make the weekly sync Tuesday.",
         "Moved to Tuesday.", ["Tuesday"], ["Monday"], "Write the invite for the weekly sync."),
        ("We'll deploy to the Frankfurt region.", "Frankfurt it is.", "Change of plan: we deploy to Dublin instead.",
         "Dublin, then.", ["Dublin"], ["Frankfurt"], "Which region should the new database go in?"),
        ("The budget is 500 dollars.", "Got it.", "Scratch that, the budget is 800 dollars now.", "800, noted.",
         ["800"], ["500"], "Suggest a monitor within my budget."),
    ],
}
CASUAL_JA = [
    ("俺、甘いのマジ無理なんだよね。", "そうなんですね。", ["甘い"], "おやつのおすすめある？"),
    ("うちの犬、ポチっていうんだ〜", "かわいい名前ですね。", ["ポチ"], "犬の誕生日カードの文面を考えて。"),
    ("来週から大阪に転勤なんよ。", "新生活ですね。", ["大阪"], "引っ越し前にやることリスト作って。"),
    ("朝はコーヒーしか飲まない派っす。", "コーヒー派なんですね。", ["コーヒー"], "朝ごはんのおすすめは？"),
    ("実家、北海道なんだよね。", "いいところですね。", ["北海道"], "帰省のお土産を選んで。"),
    ("うち、子ども二人いるんで。", "にぎやかですね。", ["二人"], "週末のお出かけ先を提案して。"),
]
# Chinese and Korean: the fact said once, asked back with its own words (「我叫什么名字？」), so
# the lexical side must find it; written for data/probes/cjk.jsonl (`semhist eval` scores it).
CJK = {
    "zh": [
        ("我叫小王，在上海工作。", "你好，小王！", "我叫什么名字？"),
        ("我的猫叫咪咪，今年三岁了。", "好可爱的名字。", "我的猫叫什么？"),
        ("我们的服务器在新加坡机房。", "明白了。", "服务器在哪个机房？"),
        ("下周三下午两点开项目评审会。", "好的，记下了。", "项目评审会是什么时候？"),
        ("我对花生过敏，不能吃。", "谢谢告诉我。", "我对什么过敏？"),
        ("数据库我们决定用PostgreSQL。", "好的选择。", "我们决定用哪个数据库？"),
    ],
    "ko": [
        ("제 이름은 민수예요. 서울에 살아요.", "반가워요, 민수 님!", "제 이름이 뭐예요?"),
        ("우리 강아지 이름은 초코예요.", "귀여운 이름이네요.", "우리 강아지 이름이 뭐였죠?"),
        ("회사 서버는 부산 데이터센터에 있어요.", "알겠습니다.", "서버가 어느 데이터센터에 있다고 했죠?"),
        ("다음 주 목요일 오후 3시에 팀 회의가 있어요.", "메모했어요.", "팀 회의는 언제예요?"),
        ("저는 땅콩 알레르기가 있어요.", "알려 주셔서 감사해요.", "제가 무슨 알레르기가 있다고 했죠?"),
        ("여행은 제주도로 가기로 했어요.", "좋네요!", "여행은 어디로 가기로 했죠?"),
    ],
}
FILLERS["zh"] = [
    ("明天天气怎么样？", "预报说是晴天。"), ("有什么好看的电影推荐吗？", "可以看看《千与千寻》。"),
    ("怎么学习Python？", "从小程序开始写。"), ("最近人工智能有什么新闻？", "大语言模型很受关注。"),
    ("周末做什么好呢？", "散步或者看书都不错。"), ("推荐一本书吧。", "《活着》很受欢迎。"),
    ("早饭吃什么好？", "豆浆和包子怎么样？"), ("跑步有什么技巧？", "慢慢跑，跑得久一点。"),
    ("怎么整理房间？", "先扔掉不用的东西。"), ("推荐点音乐吧。", "试试爵士乐。"),
    ("怎样才能早起？", "每天固定时间睡觉。"), ("绿植怎么养？", "不要浇太多水。"),
]
FILLERS["ko"] = [
    ("내일 날씨 어때요?", "맑을 거라고 해요."), ("볼 만한 영화 있어요?", "'센과 치히로의 행방불명'을 추천해요."),
    ("파이썬은 어떻게 공부해요?", "작은 프로그램부터 만들어 보세요."), ("요즘 AI 소식은요?", "대규모 언어 모델이 화제예요."),
    ("주말에 뭐 할까요?", "산책이나 독서는 어때요?"), ("책 추천해 주세요.", "'아몬드'가 인기 있어요."),
    ("아침으로 뭐 먹을까요?", "토스트와 우유는 어때요?"), ("조깅 요령이 있어요?", "천천히 오래 달리세요."),
    ("방 정리는 어떻게 해요?", "안 쓰는 물건부터 정리하세요."), ("음악 추천해 주세요.", "재즈를 들어 보세요."),
    ("일찍 일어나는 방법은요?", "매일 같은 시간에 주무세요."), ("화분은 어떻게 키워요?", "물을 너무 많이 주지 마세요."),
]
GREETING["zh"] = ("你好！", "你好，有什么可以帮你的？")
GREETING["ko"] = ("안녕하세요!", "안녕하세요. 무엇을 도와드릴까요?")
SOURCE = "semhist probe set (written for this project)"


def _thread(id: str, lang: str, day: int, early: list[tuple[tuple[str, str], int]], fillers_from: int,
            query: dict, exchanges: int = 22) -> dict:
    """`early`: (turn, fillers after it) said first; then fillers up to `exchanges` in all."""
    fillers = FILLERS[lang]
    turns, k = [GREETING[lang]], fillers_from
    for turn, gap in early:
        turns.append(turn)
        turns += [fillers[(k + j) % len(fillers)] for j in range(gap)]
        k += gap
    turns += [fillers[(k + j) % len(fillers)] for j in range(exchanges - len(turns))]
    messages, t = [], datetime(2025, 9, 1, 9, 0, tzinfo=timezone(timedelta(hours=9))) + timedelta(days=day)
    for n, (u, a) in enumerate(turns):
        t += timedelta(minutes=20 if n % 3 == 2 else 1)
        messages.append({"role": "user", "content": u, "timestamp": t.isoformat()})
        messages.append({"role": "assistant", "content": a, "timestamp": (t + timedelta(seconds=30)).isoformat()})
    return {"id": id, "language": lang, "source": SOURCE, "messages": messages, "queries": [query]}


def build() -> list[dict]:
    threads = []
    for lang, probes in PROBES.items():
        for n, (said, reply, detail, question) in enumerate(probes):
            threads.append(_thread(f"probe-{lang}-{n:02d}", lang, n, [((said, reply), 0)], n, {
                "query": question, "relevant_message_indices": [2], "category": "constraint_probe", "detail": detail}))
    for lang, probes in REQUESTS.items():
        for n, (plain, plain_reply, said, reply, detail, question) in enumerate(probes):
            threads.append(_thread(f"probe-{lang}-request-{n:02d}", lang, 20 + n,
                                   [((plain, plain_reply), 1), ((said, reply), 0)], n, {
                "query": question, "relevant_message_indices": [6], "category": "request_probe", "detail": detail,
                "never_noted": [plain]}))
    for lang, probes in SUPERSEDED.items():
        for n, (said, reply, changed, changed_reply, detail, stale, question) in enumerate(probes):
            threads.append(_thread(f"probe-{lang}-superseded-{n:02d}", lang, 30 + n,
                                   [((said, reply), 3), ((changed, changed_reply), 0)], n, {
                "query": question, "relevant_message_indices": [10], "category": "supersession_probe",
                "detail": detail, "stale": stale}))
    for n, (said, reply, detail, question) in enumerate(CASUAL_JA):
        threads.append(_thread(f"probe-ja-casual-{n:02d}", "ja", 40 + n, [((said, reply), 0)], n, {
            "query": question, "relevant_message_indices": [2], "category": "casual_probe", "detail": detail}))
    return threads


def build_cjk() -> list[dict]:
    return [_thread(f"probe-{lang}-{n:02d}", lang, n, [((said, reply), 0)], n, {
        "query": question, "relevant_message_indices": [2], "category": f"{lang}_fact"}, exchanges=80)
        for lang, probes in CJK.items() for n, (said, reply, question) in enumerate(probes)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_out(parser, PROBE_DIR)
    args = parser.parse_args()
    for path, threads in ((out_file(args.out, "probes.jsonl"), build()), (args.out / "cjk.jsonl", build_cjk())):
        with path.open("w", encoding="utf-8") as f:
            for thread in threads:
                f.write(json.dumps(thread, ensure_ascii=False) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
