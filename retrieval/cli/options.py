"""Command-line options derived from the settings: each field's flag, type, choices, help and
default come from `indexers.settings`, so the CLI cannot drift from the code."""

from __future__ import annotations

import argparse
from dataclasses import MISSING, Field

from semhist.kernel.settings import (ANSWER, CACHE, EMBED, INPUT, KEYWORD, MEMORY, SEARCH, SEGMENT, SERVE, SERVICE,
                               STORE, WRITE, Settings, settings_fields)

GROUP_TITLES = {
    EMBED: "embedding", SEGMENT: "segmentation (recorded with a stored thread)", SEARCH: "selection",
    KEYWORD: "request analysis", ANSWER: "answers", MEMORY: "summary and structured memory", INPUT: "reading history files",
    STORE: "store", WRITE: "writing to the store", SERVE: "stored threads in memory", CACHE: "caches",
    SERVICE: "HTTP service limits",
}
# what each command uses
FILES = (EMBED, SEGMENT, SEARCH, KEYWORD, ANSWER, MEMORY, INPUT, CACHE)
ASKING = FILES + (STORE, WRITE, SERVE)
WRITING = (EMBED, SEGMENT, INPUT, STORE, WRITE, CACHE)
READING = (STORE,)
SERVING = ASKING + (SERVICE,)


def _flag(f: Field) -> str:
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def _default(f: Field):
    if f.metadata.get("shown"):
        return f.metadata["shown"]
    if isinstance(f.default, bool):
        return "on" if f.default else "off"
    return "off" if f.default is None or f.default is MISSING else f.default


def _type(f: Field):
    kind = str(f.type)
    if kind.startswith("float"):
        return float
    if kind.startswith("int"):
        return int
    return str


def add_settings(parser: argparse.ArgumentParser, groups: tuple[str, ...]) -> None:
    """Add the options of these setting groups (explicit flags beat SEMHIST_* variables)."""
    made: dict[str, argparse._ArgumentGroup] = {}
    for f in settings_fields(set(groups)):
        group_name = f.metadata["group"]
        if group_name not in made:
            made[group_name] = parser.add_argument_group(GROUP_TITLES[group_name])
        help_text = f"{f.metadata['help']} (default: {_default(f)}; SEMHIST_{f.name.upper()})"
        options = {"dest": f.name, "default": None, "help": help_text.replace("%", "%%")}
        if str(f.type).startswith("bool"):
            options["action"] = argparse.BooleanOptionalAction
        else:
            options["type"] = _type(f)
            options["metavar"] = {int: "N", float: "NUMBER"}.get(options["type"], "TEXT")
            if f.metadata.get("choices"):
                options["choices"] = f.metadata["choices"]
        made[group_name].add_argument(_flag(f), **options)


def settings_from(args: argparse.Namespace) -> Settings:
    """Settings from the options given (None: not given), the environment and the defaults."""
    return Settings.load(**{f.name: getattr(args, f.name, None) for f in settings_fields()})
