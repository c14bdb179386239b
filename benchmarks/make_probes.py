"""Writes data/probes/probes.jsonl: threads in which a detail is said once, early and in
passing, then buried under unrelated turns, then needed by the last question.

    python benchmarks/make_probes.py

Each thread is a benchmark thread (see ../shared/data/README.md) whose one query carries the
message index of the detail and `detail`: strings that must appear in the prompt.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "data" / "probes" / "probes.jsonl"

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


def build() -> list[dict]:
    threads = []
    start = datetime(2025, 9, 1, 9, 0, tzinfo=timezone(timedelta(hours=9)))
    for lang, probes in PROBES.items():
        fillers = FILLERS[lang]
        for n, (said, reply, detail, question) in enumerate(probes):
            turns = [GREETING[lang], (said, reply)]
            turns += [fillers[(n + k) % len(fillers)] for k in range(20)]
            messages, t = [], start + timedelta(days=n)
            for k, (u, a) in enumerate(turns):
                t += timedelta(minutes=20 if k % 3 == 2 else 1)
                messages.append({"role": "user", "content": u, "timestamp": t.isoformat()})
                messages.append({"role": "assistant", "content": a, "timestamp": (t + timedelta(seconds=30)).isoformat()})
            threads.append({"id": f"probe-{lang}-{n:02d}", "language": lang, "source": "semhist probe set (written for this project)",
                            "messages": messages,
                            "queries": [{"query": question, "relevant_message_indices": [2], "category": "constraint_probe",
                                         "detail": detail}]})
    return threads


def main() -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("w", encoding="utf-8") as f:
        for thread in build():
            f.write(json.dumps(thread, ensure_ascii=False) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
