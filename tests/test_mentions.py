""""What did we say about X" on a long thread: the blocks that name X rank first (the learned
ranker's cover features; not by dense and BM25 fused alone) and each one's mention of X is packed before any block whole (`mentions_first`);
retrieval/pipeline/mentions.py. Both act on a thread past `view_limit` (a candidate view)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from semhist import Budget

VIEW = 40  # `view_limit`: these threads are asked through a candidate view, as long ones are
START = datetime(2026, 1, 5, 9, tzinfo=timezone.utc)
FILLER = ["the rooms for the spring retreat", "the invoices from March", "the new laptops for the team",
          "lunch options near the office", "the quarterly report's charts", "parking at the new site",
          "the printer on the third floor", "the holiday calendar", "visa letters for the guests",
          "the catering order"]


def _msg(day: datetime, minute: int, who: str, text: str, key: str) -> dict:
    role = "assistant" if who == "bot" else "user"
    row = {"role": role, "timestamp": (day + timedelta(minutes=minute)).isoformat(), "id": key, "content": text}
    return row if role == "assistant" else {**row, "name": who}


def _named_once() -> list[dict]:
    """Weeks that each pair two of the thing's words, over and over; one week, early on, names
    the thing once among other talk."""
    rows, pairs = [], [("Kyoto", "bus"), ("bus", "company"), ("sightseeing", "Kyoto"), ("Kyoto", "company"),
                       ("sightseeing", "bus")]
    for week in range(30):
        day = START + timedelta(days=7 * week)
        if week == 3:
            talk = [f"Week {week}: {FILLER[k]} is settled." for k in range(4)]
            talk.insert(2, NAMED)
        else:
            a, b = pairs[week % len(pairs)]
            talk = [f"{a} and {b}, week {week}: the {a} {b} plan again, {a} {b} options, more {a} {b}.",
                    f"Noted: {a} {b} for week {week}."]
        rows += [_msg(day, k, "Hanako Sato" if k % 2 == 0 else "bot", t, f"w{week}m{k}") for k, t in enumerate(talk)]
    return rows


NAMED = "And we booked the Kyoto Sightseeing Bus Company for the guests, pickup at 9."


@pytest.mark.parametrize("ranker", ["learned", "fused"])
def test_the_block_naming_the_thing_outranks_blocks_with_its_words(make_history, ranker):
    h = make_history(ranker=ranker, mentions_first=False, view_limit=VIEW)
    h.add_many("t", _named_once())
    result = h.ask("t", "What did we say about the Kyoto Sightseeing Bus Company?", budget=Budget.parse("300"))
    kept = [result.thread.messages[p].content for p in result.included]
    assert (NAMED in kept) is (ranker == "learned"), kept  # blocks of two of its words each outrank it, fused


def _long_dialogues(n: int = 6, length: int = 24) -> list[dict]:
    """`n` long days of office talk; each names the Zanzibar ferry once, in its middle."""
    rows = []
    for d in range(n):
        day = START + timedelta(days=3 * d)
        for k in range(length):
            topic = FILLER[(d + k) % len(FILLER)]
            text = (f"About the Zanzibar ferry on day {d}: the 7:30 boat is cancelled, book the 9:00 one."
                    if k == length // 2 else f"Day {d}, item {k}: a short update on {topic}, nothing decided yet.")
            rows.append(_msg(day, 2 * k, "Taro Yamada" if k % 2 == 0 else "bot", text, f"d{d}m{k}"))
    return rows


@pytest.mark.parametrize("first", [True, False])
@pytest.mark.parametrize("listing", [False, True])
def test_every_mention_is_packed_before_any_long_dialogue_whole(make_history, first, listing):
    h = make_history(mentions_first=first, list_stretches=listing, view_limit=VIEW)
    h.add_many("t", _long_dialogues())
    result = h.ask("t", "Summarize what we said about the Zanzibar ferry", budget=Budget.parse("1700"))
    assert result.prompt.tokens <= 1700
    text = str(result.prompt.messages)
    days = {d for d in range(6) if f"Zanzibar ferry on day {d}" in text}
    if first:
        assert days == set(range(6)), days  # every day's mention, with the talk around it:
        groups = [[result.thread.messages[p].content for p in r.message_ids] for r in result.prompt.selection.retrieved]
        said = [row["content"] for row in _long_dialogues()]
        for d in range(6):  # two messages before it (at 12 of 24), five after, packed as one stretch
            assert said[24 * d + 10:24 * d + 18] in groups, (d, groups)
    else:
        assert len(days) < 6, days  # whole days take the room: some mention is left out


def test_blocks_that_fit_whole_are_taken_whole_first(make_history):
    h = make_history(view_limit=VIEW)
    h.add_many("t", _long_dialogues())
    result = h.ask("t", "Summarize what we said about the Zanzibar ferry", budget=Budget.parse("6000"))
    text = str(result.prompt.messages)
    assert all(f"Zanzibar ferry on day {d}" in text for d in range(6))
    groups = [len(r.message_ids) for r in result.prompt.selection.retrieved]
    assert groups.count(24) >= 5, groups  # whole days, not a stretch and then the rest of its day


def test_a_thread_that_fits_whole_finds_the_block_naming_the_thing_too(make_history):
    """The packing levers stay off on a thread within `view_limit` (they cost JMultiWOZ's
    threads alone recall at 25%), but the ranker reads the cover features there too."""
    h = make_history(mentions_first=True)
    h.add_many("t", _named_once())
    result = h.ask("t", "What did we say about the Kyoto Sightseeing Bus Company?", budget=Budget.parse("300"))
    assert NAMED in [result.thread.messages[p].content for p in result.included]


def test_both_lexical_indexes_count_the_words_a_document_holds():
    from semhist.indexers.lexical import BM25, ScanBM25

    docs = [["kyoto", "bus", "bus"], ["kyoto", "compani", "sightse", "bus"], [], ["tea"]]
    query = ["kyoto", "bus", "compani", "sightse", "bus"]
    assert BM25(docs).coverage(query).tolist() == ScanBM25(docs).coverage(query).tolist() == [2, 4, 0, 0]


NAMING_DAYS = range(0, 30, 5)


def _cut_days(n: int = 30, length: int = 24) -> list[dict]:
    """`n` days of talk with no pause, each cut into small blocks for their size
    (`max_block_tokens`); every fifth names the Zanzibar ferry once, the talk going on after it."""
    rows = []
    for d in range(n):
        day = START + timedelta(days=3 * d)
        for k in range(length):
            text = (f"About the Zanzibar ferry on day {d}: the 7:30 boat is cancelled, book the 9:00 one."
                    if k == 12 and d in NAMING_DAYS
                    else f"Day {d}, item {k}: a short update on {FILLER[(d + k) % len(FILLER)]}.")
            rows.append(_msg(day, 2 * k, "Taro Yamada" if k % 2 == 0 else "bot", text, f"c{d}m{k}"))
    return rows


@pytest.mark.parametrize("run_on,next_blocks", [(True, True), (False, True), (True, False)])
def test_the_talk_after_a_mention_goes_on_past_a_block_cut_for_its_size(make_history, monkeypatch, run_on, next_blocks):
    """A block cut for its size leaves the talk after a mention in the next block: when the
    blocks that mention the thing fit whole, the five messages after each mention come too, the
    view holding the block after each of its best full-text blocks (history/views.py)."""
    if not next_blocks:
        monkeypatch.setattr("semhist.history.views.NEXT_BLOCKS", 0)
    h = make_history(mentions_run_on=run_on, view_limit=VIEW, max_block_tokens=150)
    h.add_many("t", _cut_days())
    ends = {}  # per day, how many messages after the mention its block holds
    for block in h.store.blocks("t"):
        said = [m.content for m in h.store.messages("t", ids=list(block.message_ids))]
        for k, text in enumerate(said):
            if "Zanzibar ferry on day" in text:
                ends[int(text.split("day ")[1].split(":")[0])] = len(said) - 1 - k
    assert len(ends) == 6 and min(ends.values()) < 5, ends  # the blocks cut the talk after it
    result = h.ask("t", "Summarize what we said about the Zanzibar ferry", budget=Budget.parse("1400"))
    kept = {result.thread.messages[p].content for p in result.included}
    said = [row["content"] for row in _cut_days()]
    after = {d: all(said[24 * d + k] in kept for k in range(12, 18)) for d in NAMING_DAYS}
    assert all(f"Zanzibar ferry on day {d}" in str(kept) for d in NAMING_DAYS)  # the blocks fit whole
    if run_on and next_blocks:
        assert all(after.values()), after
    else:  # whole blocks cut the talk where they end; or the view lacks the blocks it goes on in
        assert not all(after.values()), after


def test_the_talk_runs_on_no_further_than_a_pause_or_what_the_view_lacks():
    from types import SimpleNamespace

    import numpy as np

    from semhist.pipeline.mentions import _run_on

    # position 0 is an operator message (no row): rows 0-9 are positions 1-10
    stamps = [START] + [START + timedelta(minutes=m) for m in (0, 1, 2, 3, 4, 5, 30, 31, 32, 33)]
    index = SimpleNamespace(rows=list(range(1, 11)), gaps=frozenset(), block_rows=(np.array([0, 3]), np.array([3, 10])),
                            row_block=np.array([0, 0, 0, 1, 1, 1, 1, 1, 1, 1]),
                            messages=[SimpleNamespace(timestamp=t) for t in stamps],
                            blocks=[SimpleNamespace(id=7), SimpleNamespace(id=8)])
    mentioned = np.zeros(10, dtype=bool)
    mentioned[1] = True
    found = lambda pause: _run_on(index, [(0, 1.0)], mentioned, pause)  # noqa: E731
    runs = lambda pause: [c[0][0] for c in found(pause)]  # noqa: E731
    assert runs(300.0) == [(4, 5, 6)]  # five after the mention (rows 2-6) stop at the 25-minute pause
    assert [(c[2], c[3]) for c in found(300.0)] == [(8, None)]  # the next block's, none of them a hit
    assert runs(3600.0) == [(4, 5, 6, 7)]  # which a longer gap_seconds does not call one
    # two reaches: the shorter run of every block first, then the longer (it adds only what is new)
    assert [c[0][0] for c in _run_on(index, [(0, 1.0)], mentioned, 300.0, (2, 5))] == [(4,), (4, 5, 6)]
    index.gaps = frozenset({6})  # the view lacks what comes between rows 4 and 5
    assert runs(3600.0) == [(4, 5)]
    index.gaps, index.rows = frozenset(), [1, 2, 3, 4, 5, 0, 7, 8, 9, 10]  # a late message stamped long ago
    assert runs(3600.0) == [(4, 5)]


def test_when_the_mentions_do_not_fit_the_talk_after_them_still_runs_on(make_history):
    """The stretches around the mentions first (they stop at their block's end), then the talk
    after each mention on into the next block, before any block whole: more of it is kept."""
    said = [row["content"] for row in _cut_days()]
    after = {}
    for run_on in (True, False):
        h = make_history(mentions_run_on=run_on, view_limit=VIEW, max_block_tokens=150)
        h.add_many(f"t{run_on}", _cut_days())
        result = h.ask(f"t{run_on}", "Summarize what we said about the Zanzibar ferry", budget=Budget.parse("600"))
        kept = {result.thread.messages[p].content for p in result.included}
        after[run_on] = sum(said[24 * d + k] in kept for d in NAMING_DAYS for k in range(13, 18))
    assert after[True] > after[False], after  # then the talk on past each block's end


def test_when_the_mention_blocks_fit_whole_the_talk_runs_on_further(make_history, monkeypatch):
    """With room to spare after every block that mentions the thing, the talk after each
    mention runs on RUN_ON_FITS messages rather than MENTION_AFTER: that room would otherwise
    go to blocks that never name it."""
    said = [row["content"] for row in _cut_days()]
    kept_after = {}
    for fits in (10, 5):
        monkeypatch.setattr("semhist.pipeline.mentions.RUN_ON_FITS", fits)
        h = make_history(view_limit=VIEW, max_block_tokens=150)
        h.add_many(f"t{fits}", _cut_days())
        result = h.ask(f"t{fits}", "Summarize what we said about the Zanzibar ferry", budget=Budget.parse("2000"))
        kept = {result.thread.messages[p].content for p in result.included}
        kept_after[fits] = sum(said[24 * d + k] in kept for d in NAMING_DAYS for k in range(18, 23))
    assert kept_after[10] > kept_after[5], kept_after


@pytest.mark.parametrize("budget,more", [(None, False), ("1000b", False), ("1400", True)])
def test_a_view_reads_the_next_blocks_only_for_a_request_packed_to_its_budget(make_history, monkeypatch, budget,
                                                                             more):
    """The blocks after the best full-text blocks serve `mentions_first` alone, which acts
    under a budget the request is packed up to: a request without one, or the cache layout
    going on from its last prompt, reads as many blocks as a view that never reads them."""
    read = {}
    for next_blocks in (8, 0):
        h = make_history(view_limit=VIEW, max_block_tokens=150)
        t = f"t{next_blocks}"
        h.add_many(t, _cut_days())
        if budget == "1000b":  # a first prompt for the cache layout to go on from
            h.ask(t, "Summarize what we said about the Zanzibar ferry", budget=Budget.parse(budget))
        h.parts.executor.submit(lambda: None).result()  # the vectors built in the background: one view
        monkeypatch.setattr("semhist.history.views.NEXT_BLOCKS", next_blocks)
        blocks, counted = h.store.blocks, []
        monkeypatch.setattr(h.store, "blocks", lambda *a, **k: counted.append(len(a[1])) or blocks(*a, **k))
        h.ask(t, "Summarize what we said about the Zanzibar ferry",
              budget=None if budget is None else Budget.parse(budget))
        read[next_blocks] = sum(counted)
    assert (read[8] > read[0] > 0) if more else (read[8] == read[0] > 0), read
