"""PII masking rules: what is masked, what is left alone, and plugging in a rule."""

import re

import pytest

from indexers.errors import ConfigError
from indexers.pii import Masker, Rule, luhn, masker_from_setting, register_rule


@pytest.mark.parametrize("text, masked", [
    ("mail taro.yamada@example.co.jp now", "mail [EMAIL] now"),
    ("電話は090-1234-5678です", "電話は[PHONE]です"),
    ("会社 03-1234-5678", "会社 [PHONE]"),
    ("携帯 09012345678", "携帯 [PHONE]"),
    ("ＴＥＬ ０９０－１２３４－５６７８", "ＴＥＬ [PHONE]"),
    ("call +1 (415) 555-0100", "call [PHONE]"),
    ("+81 90-1234-5678", "[PHONE]"),
    ("+44 20 7946 0958", "[PHONE]"),
    ("card 4111 1111 1111 1111.", "card [CARD]."),
    ("カード４１１１１１１１１１１１１１１１", "カード[CARD]"),
    ("5500-0000-0000-0004", "[CARD]"),
])
def test_masks(text, masked):
    assert Masker()(text) == masked


@pytest.mark.parametrize("text", [
    "order 1234 5678 9012 3456",  # not Luhn-valid: an order number, not a card
    "meeting on 2024-05-01 at 10:30",
    "room 101 for 3 people, 2 nights",
    "invoice 12345678",
    "version 3.11.7",
])
def test_leaves_ordinary_numbers_alone(text):
    assert Masker()(text) == text


def test_luhn():
    assert luhn("4111111111111111") and not luhn("4111111111111112") and not luhn("4111")


def test_rules_are_pluggable_and_selectable():
    register_rule(Rule("employee_id", re.compile(r"\bEMP-\d{5}\b"), "[EMPLOYEE]"))
    assert masker_from_setting("employee_id,email")("EMP-12345 a@b.io") == "[EMPLOYEE] [EMAIL]"
    assert masker_from_setting("off") is None and masker_from_setting("") is None
    with pytest.raises(ConfigError, match="valid: .*card"):
        masker_from_setting("passport")
