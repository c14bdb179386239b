"""Requests that name a time ("5月8日に話したこと", "先週の火曜日", "昨日の午後",
"what did we talk about on 8 May 2023", "last week") -> a time range.

Relative expressions resolve against the thread's last message (its own clock and zone),
never against the wall clock: a thread replayed next year must give the same answer.
The matched words are removed from the request so they are never searched as a topic.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, tzinfo

MONTHS = {m: i for i, names in enumerate((
    ("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"), ("may",), ("june", "jun"),
    ("july", "jul"), ("august", "aug"), ("september", "sep", "sept"), ("october", "oct"),
    ("november", "nov"), ("december", "dec")), start=1) for m in names}
WEEKDAYS_EN = {d: i for i, names in enumerate((
    ("monday", "mon"), ("tuesday", "tue", "tues"), ("wednesday", "wed"), ("thursday", "thu", "thurs"),
    ("friday", "fri"), ("saturday", "sat"), ("sunday", "sun"))) for d in names}
WEEKDAYS_JA = {c: i for i, c in enumerate("月火水木金土日")}
PARTS = {  # part of a day -> hours [start, end)
    "morning": (5, 12), "afternoon": (12, 18), "evening": (17, 23), "night": (18, 24), "tonight": (18, 24),
    "午前": (0, 12), "朝": (5, 11), "午後": (12, 24), "昼": (11, 14), "夕方": (16, 19), "夜": (18, 24),
}

_M = "|".join(sorted(MONTHS, key=len, reverse=True))
_WD = "|".join(sorted(WEEKDAYS_EN, key=len, reverse=True))
_ORD = r"(?:st|nd|rd|th)?"
PATTERNS: list[tuple[str, re.Pattern]] = [(name, re.compile(rx, re.I)) for name, rx in (
    ("iso", r"\b(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})\b"),
    ("ja_ymd", r"(\d{4})年\s*(\d{1,2})月\s*(\d{1,2})日"),
    ("ja_md", r"(\d{1,2})月\s*(\d{1,2})日"),
    ("ja_ym", r"(\d{4})年\s*(\d{1,2})月"),
    ("en_dmy", rf"\b(\d{{1,2}}){_ORD}\s+(?:of\s+)?({_M})\.?,?(?:\s+(\d{{4}}))?\b"),
    ("en_mdy", rf"\b({_M})\.?\s+(\d{{1,2}}){_ORD}(?:,?\s+(\d{{4}}))?\b"),
    ("en_my", rf"\b(?:in\s+)?({_M})\s+(\d{{4}})\b"),
    ("ja_last_week_day", r"先週の?([月火水木金土日])曜(?:日)?"),
    ("ja_this_week_day", r"今週の?([月火水木金土日])曜(?:日)?"),
    ("en_last_weekday", rf"\blast\s+({_WD})\b"),
    ("ja_days_ago", r"(\d+)\s*日前"),
    ("en_days_ago", r"\b(\d+|one|two|three|four|five|six|seven)\s+days?\s+ago\b"),
    ("en_weeks_ago", r"\b(\d+|one|two|three|four)\s+weeks?\s+ago\b"),
    ("day_before_yesterday", r"一昨日|おととい|\bthe\s+day\s+before\s+yesterday\b"),
    ("yesterday", r"昨日|きのう|\byesterday\b"),
    ("today", r"今日|きょう|本日|\btoday\b|\bthis\s+(?:morning|afternoon|evening)\b|\btonight\b"),
    ("last_week", r"先週|\blast\s+week\b|\bthe\s+week\s+before\b"),
    ("this_week", r"今週|\bthis\s+week\b"),
    ("last_month", r"先月|\blast\s+month\b"),
    ("this_month", r"今月|\bthis\s+month\b"),
)]
_PART = re.compile(r"(午前|午後|朝|昼|夕方|夜)|\b(morning|afternoon|evening|night|tonight)\b", re.I)
# An hour of the named day: 「21時台」「午後9時ごろ」 "at 9 pm", "around 21:00". Minutes name the
# hour they fall in: the request means the conversations that started then.
_HOUR = re.compile(r"(?:(午前|午後|朝|夜)\s*)?(\d{1,2})\s*時(?!間)(?:\s*(?:台|ごろ|頃|くらい|ぐらい|過ぎ|半))?|"
                   r"\b(?:(?:at|around|about|near|from)\s+)?(\d{1,2})(?::(\d{2}))?\s*(am|pm|a\.m\.|p\.m\.)|"
                   r"\b(?:(?:at|around|about|near|from)\s+)?(\d{1,2}):(\d{2})\b|"
                   r"\b(?:(?:at|around|about)\s+)?(\d{1,2})\s+o'?clock\b", re.I)
_NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}


@dataclass(frozen=True)
class TimeRange:
    """[start, end) in the thread's zone, and the words of the request that named it."""

    start: datetime
    end: datetime
    text: str
    relative: bool = False  # counted back from the thread's last message ("yesterday", "last week")

    def contains(self, moment: datetime | None) -> bool:
        return moment is not None and self.start <= moment < self.end

    def in_zone(self, zone: tzinfo | None) -> TimeRange:
        """The same days and hours on the clocks of another zone."""
        if zone is None or zone == self.start.tzinfo:
            return self
        return TimeRange(self.start.replace(tzinfo=zone), self.end.replace(tzinfo=zone), self.text, self.relative)

    def to_dict(self) -> dict[str, str]:
        return {"start": self.start.isoformat(), "end": self.end.isoformat(), "text": self.text}


# A calendar day lasts from its start at UTC+14 to its end at UTC-12: the talk of a named day,
# on its speakers' own clocks, lies within these of the day's start and end in UTC.
EARLIEST_CLOCK, LATEST_CLOCK = timedelta(hours=14), timedelta(hours=12)
ABSOLUTE = ("iso", "ja_ymd", "ja_md", "ja_ym", "en_dmy", "en_mdy", "en_my")  # dates, not counted back


def _day_range(day: date, zone: tzinfo | None) -> tuple[datetime, datetime]:
    start = datetime.combine(day, time(0), tzinfo=zone)
    return start, start + timedelta(days=1)


def _year_for(month: int, day: int, anchor: date) -> int:
    """A date without a year is the latest such date not after the anchor."""
    try:
        return anchor.year if date(anchor.year, month, day) <= anchor else anchor.year - 1
    except ValueError:
        return anchor.year


def _number(text: str) -> int:
    return _NUMBERS.get(text.lower()) or int(text)


def _resolve(name: str, g: tuple, anchor: date) -> tuple[date, date] | None:
    """[first day, day after last) for one matched pattern."""
    week_start = anchor - timedelta(days=anchor.weekday())
    one = lambda d: (d, d + timedelta(days=1))  # noqa: E731
    if name == "iso" or name == "ja_ymd":
        return one(date(int(g[0]), int(g[1]), int(g[2])))
    if name == "ja_md":
        m, d = int(g[0]), int(g[1])
        return one(date(_year_for(m, d, anchor), m, d))
    if name in ("ja_ym", "en_my"):
        y, m = (int(g[0]), int(g[1])) if name == "ja_ym" else (int(g[1]), MONTHS[g[0].lower()])
        first = date(y, m, 1)
        return first, date(y + (m == 12), m % 12 + 1, 1)
    if name in ("en_dmy", "en_mdy"):
        d, m, y = (g[0], g[1], g[2]) if name == "en_dmy" else (g[1], g[0], g[2])
        month, day = MONTHS[m.lower()], int(d)
        return one(date(int(y) if y else _year_for(month, day, anchor), month, day))
    if name == "ja_last_week_day":
        return one(week_start - timedelta(days=7) + timedelta(days=WEEKDAYS_JA[g[0]]))
    if name == "ja_this_week_day":
        return one(week_start + timedelta(days=WEEKDAYS_JA[g[0]]))
    if name == "en_last_weekday":
        back = (anchor.weekday() - WEEKDAYS_EN[g[0].lower()]) % 7 or 7
        return one(anchor - timedelta(days=back))
    if name in ("ja_days_ago", "en_days_ago"):
        return one(anchor - timedelta(days=_number(g[0])))
    if name == "en_weeks_ago":
        start = week_start - timedelta(days=7 * _number(g[0]))
        return start, start + timedelta(days=7)
    if name == "day_before_yesterday":
        return one(anchor - timedelta(days=2))
    if name == "yesterday":
        return one(anchor - timedelta(days=1))
    if name == "today":
        return one(anchor)
    if name == "last_week":
        return week_start - timedelta(days=7), week_start
    if name == "this_week":
        return week_start, week_start + timedelta(days=7)
    if name == "last_month":
        first = anchor.replace(day=1)
        prev = (first - timedelta(days=1)).replace(day=1)
        return prev, first
    if name == "this_month":
        first = anchor.replace(day=1)
        return first, date(first.year + (first.month == 12), first.month % 12 + 1, 1)
    return None


def _hour_of(m: re.Match) -> int | None:
    """The hour (0-23) an _HOUR match names, or None when it is no clock time."""
    ja_part, ja_h, en_h, _, en_ampm, clock_h, _, oclock_h = m.groups()
    if ja_h is not None:
        h = int(ja_h)
        if ja_part in ("午後", "夜") and h < 12:
            h += 12
    elif en_h is not None:
        h = int(en_h) % 12 + (12 if en_ampm.lower().startswith("p") else 0)
        if int(en_h) > 12:
            return None
    else:
        h = int(clock_h or oclock_h)
    return h if 0 <= h < 24 else None


def parse_time_range(request: str, anchor: datetime | None) -> tuple[TimeRange | None, str]:
    """The time range a request names, if any, and the request without those words.

    `anchor` is the time of the thread's last message; without one, only absolute dates
    with a year can be resolved.
    """
    text = unicodedata.normalize("NFKC", request)
    for name, pattern in PATTERNS:
        match = pattern.search(text)
        if not match:
            continue
        if anchor is None and not (name in ("iso", "ja_ymd", "ja_ym", "en_my")
                                   or (name in ("en_dmy", "en_mdy") and match.group(3))):
            continue
        ref = anchor.date() if anchor else date.today()
        try:
            days = _resolve(name, match.groups(), ref)
        except (ValueError, KeyError):
            continue
        if days is None:
            continue
        zone = anchor.tzinfo if anchor else None
        start, end = _day_range(days[0], zone)[0], _day_range(days[1] - timedelta(days=1), zone)[1]
        rest = text[:match.start()] + " " + text[match.end():]
        spans = [match.group(0)]
        one_day = days[1] - days[0] == timedelta(days=1)
        hour = _HOUR.search(rest) if one_day else None
        if hour and _hour_of(hour) is not None:
            start = start + timedelta(hours=_hour_of(hour))
            end = start + timedelta(hours=1)
            rest = rest[:hour.start()] + " " + rest[hour.end():]
            spans.append(hour.group(0).strip())
            return TimeRange(start, end, " ".join(spans), name not in ABSOLUTE), re.sub(r"\s+", " ", rest).strip()
        part = _PART.search(rest)
        if part and one_day:
            lo, hi = PARTS[(part.group(1) or part.group(2)).lower()]
            start, end = start + timedelta(hours=lo), start + timedelta(hours=hi)
            rest = rest[:part.start()] + " " + rest[part.end():]
            spans.append(part.group(0))
        return TimeRange(start, end, " ".join(spans), name not in ABSOLUTE), re.sub(r"\s+", " ", rest).strip()
    return None, request


# Broader than PATTERNS: any wording that names a time, resolvable or not ("去年の夏",
# "two months ago", "in 2022"). An LLM's time range is only believed when the request has one:
# asked "When did Caroline go to the support group?", the packaged model answered with the day
# of the thread's last message, and the search was confined to that day.
_M_NOT_MAY = "|".join(m for m in sorted(MONTHS, key=len, reverse=True) if m != "may")
_NAMES_TIME = re.compile(
    r"(\d+|[一二三四五六七八九十数何]+)\s*(年|月|日|週間?|時(?!的)|時間|か月|ヶ月|カ月)|"
    r"昨日|きのう|今日|きょう|本日|明日|一昨日|おととい|おととし|先週|今週|来週|先々週|先月|今月|来月|先々月|"
    r"去年|昨年|今年|[月火水木金土日]曜|午前|午後|夕方|週末|年末|年始|正月|ゴールデンウィーク|お盆|"
    r"[春夏冬]休み|"
    r"\b(january|february|march|april|june|july|august|september|october|november|december|"
    r"(monday|tuesday|wednesday|thursday|friday|saturday|sunday)s?)\b|"
    rf"\b({_M})\.?\s*\d|\d(st|nd|rd|th)?\s+(of\s+)?({_M_NOT_MAY})\b|\d(st|nd|rd|th|\s+of)\s+may\b|"
    r"\b(in|during|since|until|by|of|early|late|mid|last|next|this)[\s-]+may\b|"
    r"\b(yesterday|today|tonight|tomorrow|ago|weekend)\b|"
    r"\b(last|this|next|past|previous)\s+(week|month|year|summer|winter|spring|autumn|fall|morning|"
    r"afternoon|evening|night|time)\b|"
    r"\b(in|since|during|of|over|by)\s+(the\s+)?(\d{4}|summer|winter|spring|autumn|fall)\b|"
    r"\b(early|late|mid)[\s-]+(\d{4}|summer|winter|spring|autumn|fall)\b|"
    r"\b\d{1,2}(:\d{2})?\s*(am|pm)\b|\b\d{1,2}:\d{2}\b|\b\d{1,2}/\d{1,2}\b", re.I)


def names_time(request: str) -> bool:
    """Does the request name a time at all (whether or not the local parser can resolve it)?"""
    return bool(_NAMES_TIME.search(unicodedata.normalize("NFKC", request)))


def without_time_words(text: str) -> str:
    """The text with every wording that names a time removed."""
    return _NAMES_TIME.sub(" ", unicodedata.normalize("NFKC", text))
