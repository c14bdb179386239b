import json

from semhist.indexers.loader import loads
from semhist.indexers.segment import TimeGapSegmenter, get_segmenter

import pytest
from semhist.kernel.errors import ConfigError


def thread(rows):
    return loads(json.dumps(rows)).only()


def test_ramen_sample_splits_at_five_minute_gaps(ramen):
    blocks = TimeGapSegmenter(300, 10_000).segment(ramen.messages)
    starts = [b.first for b in blocks]
    # the topics of the worked example: ramen, weather, sightseeing, AI, films, scraping, programming, ramen
    assert starts == [0, 22, 26, 30, 34, 48, 56, 64]
    assert [p for b in blocks for p in b.message_ids] == list(range(68))


def test_max_block_tokens_caps_an_endless_burst():
    rows = [{"role": "user" if i % 2 == 0 else "assistant", "content": "word " * 40,
             "timestamp": 1_700_000_000 + i} for i in range(40)]
    blocks = TimeGapSegmenter(300, 200).segment(thread(rows).messages)
    assert len(blocks) > 5
    assert all(b.tokens <= 200 for b in blocks)


def test_messages_without_timestamps_segment_by_size():
    rows = [{"role": "user" if i % 2 == 0 else "assistant", "content": "token " * 30} for i in range(20)]
    blocks = TimeGapSegmenter(300, 150).segment(thread(rows).messages)
    assert len(blocks) > 1 and blocks[0].start_time is None


def test_system_messages_are_never_in_a_block_and_tool_results_stay_with_calls():
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    rows = [{"role": "system", "content": "be nice"},
            {"role": "user", "content": "x " * 50},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "content": "y " * 80, "tool_call_id": "c1"},
            {"role": "assistant", "content": "done"}]
    blocks = TimeGapSegmenter(300, 60).segment(thread(rows).messages)
    ids = [b.message_ids for b in blocks]
    assert all(0 not in b for b in ids)
    assert any(2 in b and 3 in b for b in ids)


def test_unknown_segmenter_lists_valid_ones():
    with pytest.raises(ConfigError, match="time-gap"):
        get_segmenter("topic-magic", gap_seconds=1, max_block_tokens=1)


def test_without_timestamps_a_users_closing_ends_a_conversation():
    from semhist.indexers.segment import TimeGapSegmenter, closes

    assert closes("特にありません。ありがとうございました。") and closes("Thanks, that's all!")
    assert not closes("ありがとうございます。当日利用できる宿泊施設を探しています。")
    assert not closes("Thanks Mel! I went to the park yesterday and it was lovely, the kids loved it.")
    said = ["京都のホテルを探しています。", "ホテル京都がございます。", "ありがとうございました。", "どういたしまして。",
            "大阪でタクシーを予約したいです。", "何時にしますか？", "10時でお願いします。", "承知しました。"]
    rows = [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(said)]
    blocks = TimeGapSegmenter().segment(loads(json.dumps(rows)).only().messages)
    assert [b.message_ids for b in blocks] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    # with times, the pause decides: a closing followed by a request 30 s later is one conversation
    timed = [{**r, "timestamp": 1_750_000_000 + 30 * i} for i, r in enumerate(rows)]
    assert len(TimeGapSegmenter().segment(loads(json.dumps(timed)).only().messages)) == 1
