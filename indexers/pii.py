"""Optional PII masking, applied before a message is stored or embedded.

Rules are pluggable: each is a name, a pattern (and/or a finder), a replacement and an optional
check on the match (credit-card numbers must pass the Luhn test, so order numbers stay readable).

Rules match on a normalized copy of the text (full-width ASCII, the ideographic space and dash
variants folded to ASCII, one character for one character), so a rule written for ASCII also
catches ０９０ー１２３４ー５６７８; the spans found there are replaced in the original text.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from semhist.kernel.errors import ConfigError
from semhist.kernel.model import Message

_DASHES = "\u30fc\uff0d\u2212\u2010\u2011\u2013\u2014\uff70"  # ー － − ‐ ‑ – — ｰ
_NORMALIZE = str.maketrans({**{chr(c): chr(c - 0xFEE0) for c in range(0xFF01, 0xFF5F)},
                            "\u3000": " ", **dict.fromkeys(_DASHES, "-")})


def normalize(text: str) -> str:
    """Same length as `text`, so offsets found here are offsets in `text`."""
    return text.translate(_NORMALIZE)


@dataclass(frozen=True)
class Rule:
    """`pattern`, `check` and `finder` all see the normalized text (ASCII digits, '-' for dashes)."""

    name: str
    pattern: re.Pattern[str] | None
    replacement: str
    check: Callable[[str], bool] | None = None  # applied to each `pattern` match (normalized text)
    finder: Callable[[str], Iterable[tuple[int, int]]] | None = None  # extra spans, no check

    def spans(self, normalized: str) -> Iterator[tuple[int, int]]:
        if self.finder is not None:
            yield from self.finder(normalized)
        if self.pattern is not None:
            for match in self.pattern.finditer(normalized):
                if self.check is None or self.check(match.group(0)):
                    yield match.span()

    def merged_spans(self, normalized: str) -> list[tuple[int, int]]:
        merged: list[tuple[int, int]] = []
        for start, end in sorted(self.spans(normalized)):  # finder and pattern may overlap
            if merged and start <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
            elif end > start:
                merged.append((start, end))
        return merged

    def apply(self, text: str) -> str:
        return _replace(text, self.merged_spans(normalize(text)), self.replacement)


def _replace(text: str, spans: list[tuple[int, int]], replacement: str) -> str:
    out, pos = [], 0
    for start, end in spans:
        out += (text[pos:start], replacement)
        pos = end
    return "".join(out) + text[pos:] if out else text


def luhn(number: str) -> bool:
    digits = [int(c) for c in number if c.isdigit()]
    if not 13 <= len(digits) <= 19:
        return False
    total = 0
    for i, d in enumerate(reversed(digits)):
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def my_number_ok(number: str) -> bool:
    """The check digit of a Japanese individual number (個人番号, "My Number")."""
    digits = [int(c) for c in number if c.isdigit()]
    if len(digits) != 12:
        return False
    body = digits[10::-1]  # P_1 .. P_11: counted from the right, excluding the check digit
    r = sum(p * (n + 1 if n <= 6 else n - 5) for n, p in enumerate(body, 1)) % 11
    return digits[11] == (0 if r <= 1 else 11 - r)


def _digits(s: str) -> str:
    return re.sub(r"[^0-9]", "", s)


def _jp_phone_shape(s: str) -> bool:
    # Mobile/IP/M2M (0X0) and 0800 numbers have 11 digits, everything else 10; this is what
    # keeps dates such as 05-01-2024 and short codes out of the loose grouping patterns.
    d = _digits(s)
    if d.startswith("00"):
        return False
    return len(d) == (11 if d[:3] in ("020", "050", "060", "070", "080", "090") or d[:4] == "0800" else 10)


# ASCII-only boundaries: kana/kanji glued to a number must not hide it, but a number that is
# part of a longer ASCII token (v1.2.3, 12-090-..., abc0901234) is not a phone/card of its own.
_B = r"(?<![0-9A-Za-z+])(?<![0-9][-.])"
_E = r"(?![0-9A-Za-z])(?![-.][0-9])"
_D = r"(?=[0-9])" + _B  # the lookahead first lets the engine skip non-digits fast
_BEFORE, _AFTER = re.compile(_B), re.compile(_E)
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")

_JP_PHONE = re.compile(
    r"(?=[0(])(?:(?<=(?i:tel|fax))|" + _B + r")(?:"
    r"0[0-9]{1,4}([-. ])[0-9]{1,4}\1[0-9]{3,4}"  # 03-1234-5678, 090.1234.5678, 0120 123 456
    r"|\(0[0-9]{1,4}\) ?[0-9]{1,4}[- ]?[0-9]{4}"  # (03)1234-5678
    r"|0[0-9]{1,4} ?\([0-9]{1,4}\) ?[0-9]{4}"  # 03(1234)5678
    r"|0[5789]0[0-9]{8}|0120[0-9]{6}|0800[0-9]{7})" + _E)
_INTL_PHONE = re.compile(r"(?=\+)" + _B + r"\+[0-9]{1,3}[ \-.]?(?:\([0-9]{1,4}\)[ \-.]?)?[0-9]{1,4}"
                         r"(?:[ \-.]?[0-9]{2,4}){2,3}" + _E)
# Shapes phonenumbers may know better than the regexes above; it decides which are phones.
_JP_LOOSE = re.compile(r"(?=[0(])" + _B + r"\(?0[0-9]{0,10}(?:[-. ()]{1,2}[0-9]{1,8}){0,3}(?![0-9])")
_INTL_LOOSE = re.compile(r"(?=[+(1-9])" + _B + r"(?:\+[0-9]{1,4}(?:[-. ()]{1,3}[0-9]{1,8}){0,5}"
                         r"|(?:1[-. ]?)?\(?[2-9][0-9]{2}\)?[-. ]{0,2}[2-9][0-9]{2}[-. ]{0,2}[0-9]{4})(?![0-9])")


@lru_cache(maxsize=4096)  # chat threads repeat the same few numbers, and each parse costs ~0.3 ms
def _validated(window: str, region: str) -> tuple[tuple[int, int, bool], ...]:
    import phonenumbers  # a core dependency, but only masking needs it

    return tuple((m.start, m.end, m.raw_string.isdigit())
                 for m in phonenumbers.PhoneNumberMatcher(window, region, leniency=phonenumbers.Leniency.VALID))


def _phones(region: str, regex: re.Pattern[str], shape: Callable[[str], bool], loose: re.Pattern[str],
            lo: int, hi: int, grouped_only: bool = False) -> Callable[[str], Iterator[tuple[int, int]]]:
    """A finder: the `regex` numbers that have the right `shape`, plus the `loose` candidates
    they leave (with lo..hi digits) that phonenumbers, for region `region`, finds valid.

    phonenumbers only sees a small window around each candidate: its matcher is pure Python
    and slices the rest of the text for some candidates, which made a 1 MB text take minutes.
    """
    def find(normalized: str) -> Iterator[tuple[int, int]]:
        found = [m.span() for m in regex.finditer(normalized) if shape(m.group())]
        yield from found
        starts = [s for s, _ in found]
        for cand in loose.finditer(normalized):
            start, end = cand.span()
            if not lo <= len(_digits(cand.group())) <= hi:
                continue
            i = bisect_right(starts, start) - 1
            if i >= 0 and found[i][1] >= end:
                continue
            # One character before (a letter there voids a match) and a few after (10:30 after
            # a date voids it); blanking non-ASCII keeps offsets and gives the matcher plain
            # boundaries around numbers glued to Japanese text.
            offset = max(0, start - 1)
            window = _NON_ASCII.sub(lambda m: " " * len(m.group()), normalized[offset:end + 4])
            for s, e, bare in _validated(window, region):
                s, e = offset + s, offset + e
                # A bare 10-digit run is a valid US number far too often (2024050112 is a timestamp).
                if grouped_only and bare:
                    continue
                if s < end and e > start and _BEFORE.match(normalized, s) and _AFTER.match(normalized, e):
                    yield s, e

    return find


_PREFECTURES = (
    "北海道|青森県|岩手県|宮城県|秋田県|山形県|福島県|茨城県|栃木県|群馬県|埼玉県|千葉県|東京都|神奈川県|新潟県|富山県"
    "|石川県|福井県|山梨県|長野県|岐阜県|静岡県|愛知県|三重県|滋賀県|京都府|大阪府|兵庫県|奈良県|和歌山県|鳥取県|島根県"
    "|岡山県|広島県|山口県|徳島県|香川県|愛媛県|高知県|福岡県|佐賀県|長崎県|熊本県|大分県|宮崎県|鹿児島県|沖縄県")
_STOP = r"\s。、，,.?!？！「」『』()\[\]【】〔〕〈〉《》<>\"'"
_KANJI = r"\u4e00-\u9fff々〇"
_CH = rf"[^{_STOP}ぁ-ゖ]"  # an address character: anything but a stop or hiragana (particles end it)
_BLOCK = r"[0-9]+(?:丁目|番地|番|号|-[0-9])"
_ADDRESS = re.compile(
    "(?=[〒" + "".join(sorted({p[0] for p in _PREFECTURES.split("|")})) + "])(?:"  # lets the engine skip ahead
    # 〒 + code, then the address up to its last digit and a non-hiragana tail (building, 3F)
    rf"〒 ?[0-9]{{3}}-?[0-9]{{4}}(?![0-9])(?: ?(?:[^{_STOP}]{{0,60}}[0-9]{_CH}{{0,40}}|{_CH}{{1,40}}))?"
    # no 〒: prefecture, a municipality before any hiragana (except さいたま市-style names),
    # then the town, which may hold hiragana only inside a name (霞が関, ひばりが丘), and a block
    rf"|(?:{_PREFECTURES})(?=[^{_STOP}]{{0,45}}?[0-9])"
    rf"(?:[^{_STOP}ぁ-ゖ0-9]|[ぁ-ゖ]{{1,7}}(?=[市町村郡])){{0,12}}?[市区町村郡]"
    rf"(?:{_CH}|(?<=[{_KANJI}])[ぁ-ゖ](?=[{_KANJI}])|[ぁ-ゖ]{{2,}}(?=[^{_STOP}ぁ-ゖ0-9])){{0,30}}?"
    rf"{_BLOCK}{_CH}{{0,40}})")

RULES: dict[str, Rule] = {}


def register_rule(rule: Rule) -> None:
    """Add or replace a masking rule; `Masker(["name", ...])` then can use it."""
    RULES[rule.name] = rule


for _rule in (
    Rule("email", re.compile(r"(?<![A-Za-z0-9._%+])[A-Za-z0-9][A-Za-z0-9._%+\-]{0,63}@"
                             # Teams conversation and channel ids are no address (19:x@thread.tacv2)
                             r"(?!thread\.(?:tacv2|skype|v2)\b|unq\.gbl\.spaces\b)[A-Za-z0-9\-]{1,63}"
                             # the top-level domain (letters, or punycode) ends its label
                             r"(?:\.[A-Za-z0-9\-]{1,63}){0,8}\.(?:xn--[A-Za-z0-9\-]{1,59}|[A-Za-z]{2,24})(?![A-Za-z0-9])"),
         "[EMAIL]"),
    # ungrouped, or grouped the way cards are printed (4-4-4-4, 4-6-5, 4-4-4-4-3): loose
    # grouping would also take ISBNs such as 978-4-00-000000-0, which can pass Luhn too
    Rule("card", re.compile(_D + r"(?:[0-9]{13,19}|[0-9]{4}([ -])[0-9]{4,6}\1[0-9]{4,5}(?:\1[0-9]{1,4}){0,2})"
                            + _E), "[CARD]", luhn),
    Rule("mynumber", re.compile(_D + r"[0-9]{4}([ -]?)[0-9]{4}\1[0-9]{4}" + _E), "[MYNUMBER]", my_number_ok),
    Rule("address", _ADDRESS, "[ADDRESS]"),
    # +81 90-1234-5678, +1 (415) 555-0100, +44 20 7946 0958, (415) 555-0100
    Rule("phone_intl", None, "[PHONE]", finder=_phones(
        "US", _INTL_PHONE, lambda s: 8 <= len(_digits(s)) <= 15, _INTL_LOOSE, 8, 17, grouped_only=True)),
    # 03-1234-5678, 090ー1234ー5678, 0120-123-456, (03)1234-5678, 03(1234)5678, 09012345678
    Rule("phone_jp", None, "[PHONE]", finder=_phones("JP", _JP_PHONE, _jp_phone_shape, _JP_LOOSE, 10, 11)),
):
    register_rule(_rule)

# Order matters: an e-mail can hold digits, and a card or My Number must be gone before the
# phone rules could read part of it as a phone number.
DEFAULT_RULES = ("email", "card", "mynumber", "address", "phone_intl", "phone_jp")


class Masker:
    """Applies rules in the given order, each to the output of the previous one."""

    def __init__(self, names: Iterable[str] = DEFAULT_RULES):
        names = list(names)
        unknown = [n for n in names if n not in RULES]
        if unknown:
            raise ConfigError(f"unknown PII rule(s) {', '.join(unknown)}; valid: {', '.join(sorted(RULES))}")
        self.rules = [RULES[n] for n in names]

    def __call__(self, text: str) -> str:
        normalized = normalize(text)  # kept in step with `text`, so it is computed only once
        for rule in self.rules:
            spans = rule.merged_spans(normalized)
            if spans:
                text = _replace(text, spans, rule.replacement)
                normalized = _replace(normalized, spans, normalize(rule.replacement))
        return text


def masker_from_setting(value: str | None) -> Masker | None:
    """The `pii` setting: empty/off = no masking, "on"/"default" = every built-in rule,
    else a comma-separated list of rule names."""
    if not value or value.lower() in ("off", "0", "false", "no", "none"):
        return None
    if value.lower() in ("on", "1", "true", "yes", "default"):
        return Masker()
    return Masker(n.strip() for n in value.split(",") if n.strip())


def mask_message(msg: Message, masker: Masker) -> Message:
    """The message with its text, name, tool-call names and arguments and its parts masked.
    Of its tool calls and parts only the fields the chat-completions API defines are kept: a
    field semhist does not know (a provider's extension, a field added later) cannot be told
    free of personal data, so it is dropped, never stored as sent. Identifiers (`identifiers`)
    stay as they are: they pair a call with its result, so the store refuses one that holds
    personal data (ingest.check_identifiers) instead of masking it."""
    calls = tuple(_mask_call(c, masker) for c in msg.tool_calls) if msg.tool_calls else None
    verbatim = msg.verbatim
    if verbatim and "content" in verbatim:
        parts = _mask_parts(verbatim["content"], masker)
        verbatim = {**{k: v for k, v in verbatim.items() if k != "content"}, **({"content": parts} if parts else {})} \
            or None
    return Message(msg.index, msg.role, masker(msg.content), msg.timestamp,
                   masker(msg.name) if msg.name else msg.name, calls, msg.tool_call_id, verbatim, writer=msg.writer)


def identifiers(msg: Message) -> Iterator[tuple[str, str]]:
    """(field, value) of every identifier a message carries: its tool calls' ids, the id of the
    call a tool result answers, the files its parts name. Masking keeps these as sent (a masked
    id would no longer pair, and two ids masked alike would be one), so each passes the one
    identifier rule instead. A field that names something is listed here, or mask_message
    does not keep it."""
    for n, call in enumerate(msg.tool_calls or ()):
        if isinstance(call.get("id"), str):
            yield f"tool_calls[{n}].id", call["id"]
    if isinstance(msg.tool_call_id, str):
        yield "tool_call_id", msg.tool_call_id
    for n, part in enumerate((msg.verbatim or {}).get("content", ())):
        inner = part.get("file") if part.get("type") == "file" else None
        if isinstance(inner, dict) and isinstance(inner.get("file_id"), str):
            yield f"content[{n}].file.file_id", inner["file_id"]


def _mask_call(call: dict, masker: Masker) -> dict:
    """{"id", "type", "function": {"name", "arguments"}} and nothing else (validation made sure
    they are there), the name and the arguments masked."""
    fn = call.get("function") if isinstance(call.get("function"), dict) else {}
    function = {}
    if isinstance(fn.get("name"), str):  # a tool named after someone
        function["name"] = masker(fn["name"])
    if isinstance(fn.get("arguments"), str):
        function["arguments"] = _mask_arguments(fn["arguments"], masker)
    return {**{k: call[k] for k in ("id", "type") if isinstance(call.get(k), str)}, "function": function}


def _mask_arguments(raw: str, masker: Masker) -> str:
    try:  # value by value, so {"card": 4111111111111111} stays JSON
        parsed = json.loads(raw)
        masked = _mask_value(parsed, masker)
        return raw if masked == parsed else json.dumps(masked, ensure_ascii=False)  # untouched: as sent
    except (ValueError, RecursionError):
        return masker(raw)


def _mask_value(value: Any, masker: Masker) -> Any:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            masked, n = masker(key), 1
            while masked in out:  # {"a@x.jp": 1, "b@y.jp": 2}: two keys masked alike keep both values
                n += 1
                masked = f"{masker(key)} ({n})"
            out[masked] = _mask_value(item, masker)
        return out
    if isinstance(value, list):
        return [_mask_value(v, masker) for v in value]
    if isinstance(value, str):
        return masker(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        masked = masker(str(value))
        return value if masked == str(value) else masked
    return value


INLINE_NOTE = "inline data, not kept with masking on"


def _mask_parts(parts: list[dict], masker: Masker) -> list[dict] | None:
    """The parts masked, those masking cannot keep left out; None when only text is left (the
    message's content then is its text, and the prompt knows the stored request by it: a note
    beside it would make it another message, sent twice). A message left with no part keeps
    a note saying what was there (its content cannot be empty)."""
    masked = [_mask_part(p, masker) for p in parts]
    kept = [p for p in masked if isinstance(p, dict)]
    if not kept:
        return [{"type": "text", "text": " ".join(p for p in masked if isinstance(p, str))}]
    return None if all(p["type"] in ("text", "refusal") for p in kept) else kept


def _mask_part(part: dict, masker: Masker) -> dict | str:
    """A part as the API defines it, masked: text; an image by its link; a file by its id (an
    identifier) and its masked name. Inline data (a `data:` URL, a file's bytes, a recording)
    is not kept: no rule can read it for personal data. A part not kept is a note saying what
    was there."""
    kind = part.get("type")
    if kind in ("text", "refusal"):
        return {"type": kind, kind: masker(part[kind])}
    inner = part.get(kind) if isinstance(part.get(kind), dict) else {}
    label = str(kind).removesuffix("_url").removeprefix("input_")
    if kind == "image_url" and isinstance(inner.get("url"), str):
        url = inner["url"]
        if url.lstrip().lower().startswith("data:"):
            return f"[{label}: {INLINE_NOTE}]"
        if masker(url) != url:  # a masked link fetches nothing
            return f"[{label}: its link held personal data]"
        detail = {"detail": masker(inner["detail"])} if isinstance(inner.get("detail"), str) else {}
        return {"type": kind, kind: {"url": url, **detail}}
    if kind == "file":
        name = {"filename": masker(inner["filename"])} if isinstance(inner.get("filename"), str) else {}
        if isinstance(inner.get("file_id"), str):
            return {"type": kind, kind: {"file_id": inner["file_id"], **name}}
        return f"[file {name['filename']}: {INLINE_NOTE}]" if name else f"[{label}: {INLINE_NOTE}]"
    return f"[{label}: {INLINE_NOTE}]"  # a recording (input_audio), or a part not in the API's form
