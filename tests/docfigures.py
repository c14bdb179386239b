"""What the docs quote from a benchmark, checked against what the benchmark wrote.

A *unit* of a page is a table row, a list item or a paragraph. A unit that names a benchmark
(`benchmarks/NAME.md` or `benchmarks/NAME.py`) quotes it, and so do the rows of a table that a
paragraph naming one introduces: every figure in it (a decimal such as
0.865, or a number with thousands separators such as 9,635) must be a rounding of a number in
that benchmark's output files (`benchmarks/NAME*.md`, `benchmarks/NAME*.json`). A figure that is
a setting, not a result, is written without a decimal point or separators (`2000 characters`)."""

from __future__ import annotations

import json
import re
from pathlib import Path

FIGURE = re.compile(r"(?<![\w.])\d[\d,]*\.\d+|(?<![\w.])\d{1,3}(?:,\d{3})+(?![\d.])")
ANY_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?")
CITED = re.compile(r"benchmarks/(\w+)\.(?:md|py)")
IGNORED = re.compile(r"127\.0\.0\.1|\d+\.\d+\.\d+|`[^`]*`")  # addresses, versions, code spans


def units(text: str) -> list[tuple[int, str]]:
    """(line number, text) of each table row, list item and paragraph."""
    out, current, start = [], [], 0
    for number, line in enumerate(text.splitlines() + [""], 1):
        new_item = re.match(r"\s*(- |\d+\. )", line) or line.startswith("|")
        if (not line.strip() or new_item) and current:
            out.append((start, "\n".join(current)))
            current = []
        if line.startswith("|"):
            out.append((number, line))
        elif line.strip():
            if not current:
                start = number
            current.append(line)
    return out


def _numbers(value, found: list[float]) -> None:
    if isinstance(value, dict):
        for v in value.values():
            _numbers(v, found)
    elif isinstance(value, list):
        for v in value:
            _numbers(v, found)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        found.extend((float(value), float(value) * 100))  # shares are also quoted as percentages


def source_numbers(benchmarks: Path, name: str) -> list[float]:
    found: list[float] = []
    for md in benchmarks.glob(f"{name}*.md"):
        found.extend(float(n) for n in ANY_NUMBER.findall(md.read_text(encoding="utf-8").replace(",", "")))
    for js in benchmarks.glob(f"{name}*.json"):
        try:
            _numbers(json.loads(js.read_text(encoding="utf-8")), found)
        except ValueError:
            pass
    return found


def unbacked(page: Path, benchmarks: Path) -> list[str]:
    """The figures of `page` that no output file of the benchmark they cite holds."""
    problems = []
    cache: dict[str, list[float]] = {}
    introduced: list[str] = []  # what the paragraph before a table cites: its rows quote it too
    for line, unit in units(page.read_text(encoding="utf-8")):
        cited = sorted(set(CITED.findall(unit)))
        if unit.startswith("|"):
            cited = cited or introduced
        else:
            introduced = cited
        if not cited:
            continue
        numbers = [n for name in cited for n in cache.setdefault(name, source_numbers(benchmarks, name))]
        for figure in FIGURE.findall(IGNORED.sub("", unit)):
            decimals = len(figure.split(".")[1]) if "." in figure else 0
            value, slack = float(figure.replace(",", "")), 0.5 * 10 ** -decimals + 1e-9
            if not any(abs(value - n) <= slack for n in numbers):
                problems.append(f"{page.name}:{line}: {figure} is in none of {', '.join(cited)}'s outputs")
    return problems
