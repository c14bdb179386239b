"""PII masking rules: what is masked, what is left alone, and plugging in a rule."""

import re
import time

import pytest

from semhist.kernel.errors import ConfigError
from semhist.indexers.pii import (DEFAULT_RULES, RULES, Masker, Rule, luhn, masker_from_setting, my_number_ok, normalize,
                          register_rule)


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


# (id, text, masked): every shape that used to slip through, in Japanese and English sentences
POSITIVES = [
    ("email-punycode", "write to ivan@example.xn--p1ai, thanks", "write to [EMAIL], thanks"),
    ("email-then-dash", "a@example.com- see above", "[EMAIL]- see above"),
    # international numbers glued to Japanese text
    ("intl-after-kana", "連絡先は+81 90 1234 5678です", "連絡先は[PHONE]です"),
    ("intl-fullwidth", "連絡先：＋８１　９０　１２３４　５６７８", "連絡先：[PHONE]"),
    ("intl-en", "Reach me at +81-90-1234-5678 tomorrow.", "Reach me at [PHONE] tomorrow."),
    ("intl-us", "call +1 415 555 0100 now", "call [PHONE] now"),
    ("intl-uk-ja", "ロンドン支社は+44 20 7946 0958です", "ロンドン支社は[PHONE]です"),
    ("us-national", "Call (415) 555-0100 or 415.555.0100.", "Call [PHONE] or [PHONE]."),
    # only phonenumbers knows these (no regex shape): its validation decides
    ("us-national-1", "dial 1-212-555-0100", "dial [PHONE]"),
    ("mixed-separators-ja", "会社は03-1234 5678です", "会社は[PHONE]です"),
    ("half-grouped-ja", "携帯090-12345678まで", "携帯[PHONE]まで"),
    # Japanese shapes
    ("paren-local-ja", "代表は03(1234)5678です", "代表は[PHONE]です"),
    ("paren-local-en", "Office: 03(1234)5678, thanks", "Office: [PHONE], thanks"),
    ("paren-area-ja", "本社（代表）(03)1234-5678まで", "本社（代表）[PHONE]まで"),
    ("paren-area-en", "Fax (03)1234-5678.", "Fax [PHONE]."),
    ("dots-ja", "携帯は090.1234.5678です", "携帯は[PHONE]です"),
    ("dots-en", "mobile 090.1234.5678", "mobile [PHONE]"),
    ("freedial-ja", "フリーダイヤル0120-123-456まで", "フリーダイヤル[PHONE]まで"),
    ("freedial-en", "Our toll-free line is 0120-123-456.", "Our toll-free line is [PHONE]."),
    ("freedial-bare", "お電話は0120123456へ", "お電話は[PHONE]へ"),
    ("0800-ja", "お問い合わせは0800-123-4567へ", "お問い合わせは[PHONE]へ"),
    ("0800-en", "dial 0800-123-4567 free", "dial [PHONE] free"),
    ("ip-phone-ja", "IP電話050-1234-5678", "IP電話[PHONE]"),
    ("ip-phone-en", "VoIP 050-1234-5678", "VoIP [PHONE]"),
    ("mobile-bare-ja", "携帯09012345678に", "携帯[PHONE]に"),
    ("mobile-bare-en", "text 08012345678 please", "text [PHONE] please"),
    ("tel-prefix", "TEL03-1234-5678", "TEL[PHONE]"),
    ("unallocated-range", "TEL:090-0000-0000", "TEL:[PHONE]"),
    # full-width forms
    ("fw-paren-local", "０３（１２３４）５６７８にどうぞ", "[PHONE]にどうぞ"),
    ("fw-paren-area", "（０３）１２３４－５６７８", "[PHONE]"),
    ("fw-dots", "０９０．１２３４．５６７８", "[PHONE]"),
    ("fw-freedial", "０１２０－１２３－４５６です", "[PHONE]です"),
    ("fw-freedial-bare", "０１２０１２３４５６", "[PHONE]"),
    ("fw-0800", "０８００－１２３－４５６７", "[PHONE]"),
    ("fw-ip-phone", "０５０－１２３４－５６７８", "[PHONE]"),
    ("fw-mobile-bare", "携帯０９０１２３４５６７８", "携帯[PHONE]"),
    # dash variants used as hyphens
    ("prolonged-mark", "携帯は090ー1234ー5678です", "携帯は[PHONE]です"),
    ("minus-sign", "携帯は090−1234−5678です", "携帯は[PHONE]です"),
    ("hyphen", "携帯は090‐1234‐5678です", "携帯は[PHONE]です"),
    ("en-dash", "mobile 090–1234–5678", "mobile [PHONE]"),
    ("halfwidth-prolonged", "携帯090ｰ1234ｰ5678", "携帯[PHONE]"),
    ("prolonged-freedial", "フリーダイヤル0120ー123ー456", "フリーダイヤル[PHONE]"),
    # e-mail
    ("email-fw-at-ja", "メールはtaro＠example.comです", "メールは[EMAIL]です"),
    ("email-fw-at-en", "mail taro＠example.com please", "mail [EMAIL] please"),
    ("email-all-fw", "ｔａｒｏ＠ｅｘａｍｐｌｅ．ｃｏｍまで", "[EMAIL]まで"),
    ("email-en", "Reach me at taro@example.com.", "Reach me at [EMAIL]."),
    # cards (Luhn-valid)
    ("card-fw-hyphen", "カード番号は４１１１－１１１１－１１１１－１１１１です", "カード番号は[CARD]です"),
    ("card-fw-space", "カード４１１１　１１１１　１１１１　１１１１", "カード[CARD]"),
    ("card-en", "Card: 4111-1111-1111-1111, exp 12/27", "Card: [CARD], exp 12/27"),
    ("card-amex", "amex 3782 822463 10005", "amex [CARD]"),
    # My Number (check digit valid)
    ("mynumber-bare-ja", "マイナンバーは123456789018です", "マイナンバーは[MYNUMBER]です"),
    ("mynumber-spaces", "個人番号 1234 5678 9018", "個人番号 [MYNUMBER]"),
    ("mynumber-fw", "個人番号は１２３４－５６７８－９０１８です", "個人番号は[MYNUMBER]です"),
    ("mynumber-fw-space", "マイナンバー 1234　5678　9018", "マイナンバー [MYNUMBER]"),
    ("mynumber-en", "My Number: 1234-5678-9018.", "My Number: [MYNUMBER]."),
    # addresses
    ("postal-address", "〒100-0001 東京都千代田区千代田1-1", "[ADDRESS]"),
    ("postal-no-hyphen", "〒1000001東京都千代田区千代田1-1です", "[ADDRESS]です"),
    ("postal-fw", "〒１００－０００１　東京都千代田区千代田１－１", "[ADDRESS]"),
    ("postal-in-brackets", "「〒100-0001 東京都千代田区千代田1-1」", "「[ADDRESS]」"),
    ("postal-then-particle", "〒100-0001東京都千代田区千代田1-1に送ってください", "[ADDRESS]に送ってください"),
    ("postal-only", "送り先は〒100-0001です", "送り先は[ADDRESS]です"),
    ("postal-en", "Ship to 〒100-0001 Tokyo", "Ship to [ADDRESS]"),
    ("address-prefecture", "住所は東京都港区六本木6-10-1です", "住所は[ADDRESS]です"),
    ("address-chome", "大阪府大阪市北区梅田3丁目1番1号に住んでいます", "[ADDRESS]に住んでいます"),
    ("address-hokkaido", "北海道札幌市中央区北1条西2丁目、", "[ADDRESS]、"),
    ("address-hiragana-town", "東京都千代田区霞が関1-3-1", "[ADDRESS]"),
    ("address-hiragana-city", "埼玉県さいたま市浦和区高砂3-15-1。", "[ADDRESS]。"),
    ("address-fw", "住所は東京都港区六本木６－１０－１です", "住所は[ADDRESS]です"),
    # several kinds at once
    ("mixed-ja", "連絡先は taro@example.jp と 090-1234-5678、カードは 4111 1111 1111 1111 です",
     "連絡先は [EMAIL] と [PHONE]、カードは [CARD] です"),
    ("mixed-en", "mail a.b@example.com or call +1 415 555 0100", "mail [EMAIL] or call [PHONE]"),
]

NEGATIVES = [
    # Teams ids: a channel's (and its reply chains') are no e-mail address, so a thread can be
    # placed in its channel with masking on
    ("teams-channel-id", "19:launch@thread.tacv2;messageid=501"),
    ("teams-chat-id", "19:abc@thread.v2"),
    ("teams-classic-channel", "19:abc@thread.skype"), ("teams-space", "19:abc@unq.gbl.spaces"),
    ("date-iso", "meeting on 2024-05-01 at 10:30"),
    ("date-slash", "2024/05/01に会議"),
    ("date-ja", "2024年5月1日に会議"),
    ("date-compact", "日付は20240501です"),
    ("date-dmy", "due 01-02-2024"),
    ("datetime", "2024-05-01T10:30:00Z"),
    ("datetime-compact", "ts 2024050112"),
    ("time", "10:30に集合"),
    ("time-range", "21:00〜22:30の予定"),
    ("time-range-en", "open 12:00-13:00"),
    ("version", "version 3.11.7"),
    ("version-v", "リリース v1.2.3.4 を公開"),
    ("order-ja", "注文番号 1234-5678-9012"),
    ("order-ja-prolonged", "注文番号：1234ー5678ー9012"),
    ("order-bad-mynumber", "order #123456789012"),
    ("order-not-luhn", "order 1234 5678 9012 3456"),
    ("invoice", "invoice 12345678"),
    ("price-yen-sign", "価格は¥12,800です"),
    ("price-yen", "合計1,234,567円"),
    ("price-usd", "only $1,299.99 today"),
    ("room-people", "room 101 for 3 people, 2 nights"),
    ("room-ja", "3LDK 101号室に2名"),
    ("isbn", "ISBN 978-4-00-000000-0"),  # Luhn-valid: the card rule took it until grouping was required
    ("ip", "サーバーは192.168.1.10です"),
    ("ip-en", "host 192.168.1.10 is down"),
    ("postal-without-mark", "郵便番号100-0001"),
    ("postal-sapporo", "060-0001"),
    ("unix-time", "unix 1714521600"),
    ("ten-digits", "id 1234567890"),
    ("zeros", "0000012345"),
    ("hex", "sha 0123456789abcdef"),
    ("katakana", "ラーメンとコーヒーとサーバー"),
    ("katakana-digits", "ラーメン2杯とコーヒー3杯"),
    ("prolonged-range", "10ー20人"),
    ("prolonged-date", "2024ー05ー01"),
    ("katakana-date", "ユーザー2024-05-01"),
    ("prefecture-only", "東京都に行きました"),
    ("prefecture-sentence", "東京都港区で3-4人と会った"),
    ("prefecture-market", "東京都の市場で3-4個買った"),
    ("prefecture-no-city", "東京都内3-4ヶ所"),
    ("too-many-groups", "03-1234-5678-9012"),
]


@pytest.mark.parametrize("text, masked", [p[1:] for p in POSITIVES], ids=[p[0] for p in POSITIVES])
def test_masks_corpus(text, masked):
    assert Masker()(text) == masked


@pytest.mark.parametrize("text", [n[1] for n in NEGATIVES], ids=[n[0] for n in NEGATIVES])
def test_leaves_ordinary_numbers_alone(text):
    assert Masker()(text) == text


def test_normalization_is_one_to_one():
    text = "ｔａｒｏ＠ｅｘ．ｃｏｍ　０９０ー１２３４－５６７８ ラーメン（０３）−‐‑–—ｰ"
    assert len(normalize(text)) == len(text)
    assert normalize(text) == "taro@ex.com 090-1234-5678 ラ-メン(03)------"


def test_luhn():
    assert luhn("4111111111111111") and not luhn("4111111111111112") and not luhn("4111")


def test_my_number_check_digit():
    assert my_number_ok("123456789018") and my_number_ok("1234-5678-9018")
    assert not any(my_number_ok(f"12345678901{d}") for d in "012345679")
    assert not my_number_ok("12345678901")


def test_default_rules_order():
    assert DEFAULT_RULES[0] == "email" and set(DEFAULT_RULES) <= set(RULES)
    assert DEFAULT_RULES.index("card") < DEFAULT_RULES.index("phone_jp")
    assert DEFAULT_RULES.index("mynumber") < DEFAULT_RULES.index("phone_jp")
    assert {"mynumber", "address"} <= set(DEFAULT_RULES)


def test_rules_are_pluggable_and_selectable():
    register_rule(Rule("employee_id", re.compile(r"\bEMP-\d{5}\b"), "[EMPLOYEE]"))
    assert masker_from_setting("employee_id,email")("EMP-12345 a@b.io") == "[EMPLOYEE] [EMAIL]"
    assert masker_from_setting("off") is None and masker_from_setting("") is None
    with pytest.raises(ConfigError, match="valid: .*card"):
        masker_from_setting("passport")


def test_a_rule_may_bring_its_own_finder():
    def tickets(text):
        return [m.span() for m in re.finditer("T-[0-9]+", text)]

    register_rule(Rule("ticket", None, "[TICKET]", finder=tickets))
    assert Masker(["ticket", "phone_jp"])("チケットＴ－４２、電話090-1234-5678") == "チケット[TICKET]、電話[PHONE]"


def test_a_megabyte_is_masked_quickly():
    # every chunk has its own numbers, so phonenumbers' cache of recent numbers cannot help
    chunk = ("昨日は東京都に行きました。注文番号 1234-5678-9012、価格は¥12,800でした。連絡先は090-1234-{0:04d}、"
             "メールは taro{0}@example.com です。meeting on 2024-05-01 at 10:30, version 3.11.7, "
             "call +1 (415) 555-{0:04d}. "
             "〒100-0001 東京都千代田区千代田1-1 ラーメン2杯 (212) 555-{0:04d} room 101 for 3 people\n")
    text = "".join(chunk.format(i) for i in range(1_000_000 // len(chunk) + 1))
    masker = Masker()
    started = time.perf_counter()
    masked = masker(text)
    assert time.perf_counter() - started < 10
    assert masked.count("[PHONE]") == 3 * (1_000_000 // len(chunk) + 1) and "555-" not in masked
    for pathological in ("1" * 1_000_000, "1 " * 500_000, "a@" + "a." * 499_999, "東京都港区" * 200_000):
        started = time.perf_counter()
        masker(pathological)
        assert time.perf_counter() - started < 10
