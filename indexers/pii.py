"""Optional PII masking, applied before a message is stored or embedded.

Rules are pluggable: each is a name, a pattern, a replacement and an optional check on the
match (credit-card numbers must pass the Luhn test, so order numbers stay readable).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .errors import ConfigError


@dataclass(frozen=True)
class Rule:
    name: str
    pattern: re.Pattern[str]
    replacement: str
    check: Callable[[str], bool] | None = None

    def apply(self, text: str) -> str:
        def sub(match: re.Match[str]) -> str:
            return self.replacement if self.check is None or self.check(match.group(0)) else match.group(0)

        return self.pattern.sub(sub, text)


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


_D = r"[0-9０-９]"  # full-width digits are common in Japanese text
RULES: dict[str, Rule] = {}


def register_rule(rule: Rule) -> None:
    """Add or replace a masking rule; `Masker(["name", ...])` then can use it."""
    RULES[rule.name] = rule


for _rule in (
    Rule("card", re.compile(rf"(?<![0-9０-９])(?:{_D}[ -]?){{12,18}}{_D}(?![0-9０-９])"), "[CARD]",
         lambda s: luhn(s.translate(str.maketrans("０１２３４５６７８９", "0123456789")))),
    Rule("email", re.compile(r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}"), "[EMAIL]"),
    # +81 90-1234-5678, +1 (415) 555-0100, +44 20 7946 0958
    Rule("phone_intl", re.compile(r"(?<![\w+])\+\d{1,3}[ \-.]?(?:\(\d{1,4}\)[ \-.]?)?\d{1,4}(?:[ \-.]?\d{2,4}){2,3}(?!\d)"),
         "[PHONE]"),
    # 03-1234-5678, 090-1234-5678, 09012345678, ０９０－１２３４－５６７８, (03) 1234-5678
    Rule("phone_jp", re.compile(rf"(?<![0-9０-９])(?:[(（]?[0０]{_D}{{1,4}}[)）]?[-－ ]?{_D}{{1,4}}[-－ ]{_D}{{4}}"
                                rf"|[0０][789７８９][0０]{_D}{{8}})(?![0-9０-９])"), "[PHONE]"),
):
    register_rule(_rule)

DEFAULT_RULES = ("card", "email", "phone_intl", "phone_jp")


class Masker:
    """Applies rules in order; cards first, so a card number is not half-read as a phone."""

    def __init__(self, names: Iterable[str] = DEFAULT_RULES):
        names = list(names)
        unknown = [n for n in names if n not in RULES]
        if unknown:
            raise ConfigError(f"unknown PII rule(s) {', '.join(unknown)}; valid: {', '.join(sorted(RULES))}")
        self.rules = [RULES[n] for n in names]

    def __call__(self, text: str) -> str:
        for rule in self.rules:
            text = rule.apply(text)
        return text


def masker_from_setting(value: str | None) -> Masker | None:
    """The `pii` setting: empty/off = no masking, "on"/"default" = every built-in rule,
    else a comma-separated list of rule names."""
    if not value or value.lower() in ("off", "0", "false", "no", "none"):
        return None
    if value.lower() in ("on", "1", "true", "yes", "default"):
        return Masker()
    return Masker(n.strip() for n in value.split(",") if n.strip())
