"""Every third-party import of semhist is declared in pyproject.toml: by the core dependencies,
or by the extra that the importing module names in its error for a missing package. The test
extra does not count: CI installs it, users do not (a proxy that imported httpx, which only the
test extra declared, answered 500 to every request on a plain `semhist[service]` install)."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from functools import lru_cache
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+, as CI

ROOT = Path(__file__).resolve().parents[1]
OWN = ("retrieval", "indexers")  # the folders installed as `semhist`
NOT_FOR_USERS = {"test"}
NAMED_IN_TEXT = re.compile(r"semhist\[([a-z0-9-]+)\]")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@lru_cache(maxsize=1)
def declared() -> tuple[frozenset[str], dict[str, frozenset[str]]]:
    """The core dependencies and each user-facing extra's, as normalized distribution names."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]

    def names(requirements: list[str]) -> frozenset[str]:
        return frozenset(_norm(re.match(r"[A-Za-z0-9._-]+", r.strip()).group()) for r in requirements)

    extras = {e: names(r) for e, r in project["optional-dependencies"].items() if e not in NOT_FOR_USERS}
    return names(project["dependencies"]), extras


@lru_cache(maxsize=1)
def distributions() -> dict[str, frozenset[str]]:
    return {top: frozenset(_norm(d) for d in dists)
            for top, dists in importlib.metadata.packages_distributions().items()}


def modules() -> list[Path]:
    return sorted(p for package in OWN for p in (ROOT / package).rglob("*.py"))


def third_party_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, top-level name) of every import that is neither the standard library nor ours."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top not in sys.stdlib_module_names and top != "semhist":
                found.append((node.lineno, top))
    return found


def missing_extra_calls(tree: ast.AST) -> list[tuple[int, str, str]]:
    """(line, package, extra) of every `missing_extra("package", "extra")`."""
    return [(node.lineno, node.args[0].value, node.args[1].value) for node in ast.walk(tree)
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "missing_extra"
            and len(node.args) == 2 and all(isinstance(a, ast.Constant) for a in node.args)]


def extras_named(path: Path, root: Path = ROOT) -> set[str]:
    """The extras a module tells users to install: its missing_extra calls and the
    `pip install 'semhist[...]'` of its messages, and the missing_extra calls of the packages
    it lives in (retrieval/service/__init__.py guards the whole service)."""
    named: set[str] = set()
    for source in [path, *(p / "__init__.py" for p in path.parents if root in p.parents)]:
        if not source.exists():
            continue
        tree = ast.parse(source.read_text(encoding="utf-8"))
        named |= {extra for _, _, extra in missing_extra_calls(tree)}
        if source == path:  # a package's docstring naming an extra guards nothing
            named |= {m for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
                      and "pip install" in node.value for m in NAMED_IN_TEXT.findall(node.value)}
    return named


def providers(top: str, where: str) -> frozenset[str]:
    dists = distributions().get(top)
    if not dists:
        pytest.fail(f"{where} imports {top}, which no installed distribution provides: declare it in "
                    "pyproject.toml and install it", pytrace=False)
    return dists


def undeclared(path: Path, root: Path = ROOT) -> list[str]:
    """The imports of one module that neither the core nor a user extra declares."""
    core, extras = declared()
    anywhere = core.union(*extras.values())
    out = []
    for line, top in third_party_imports(ast.parse(path.read_text(encoding="utf-8"))):
        where = f"{path.relative_to(root)}:{line}"
        dists = providers(top, where)
        if not dists & anywhere:
            out.append(f"{where} imports {top} ({', '.join(sorted(dists))}), which neither the dependencies "
                       "nor a user extra of pyproject.toml declare")
    return out


def outside_its_extra(path: Path, root: Path = ROOT) -> list[str]:
    """The imports of one module that the core and the extras it names do not declare."""
    core, extras = declared()
    named = extras_named(path, root)
    allowed = core.union(*(extras.get(e, frozenset()) for e in named))
    out = []
    for line, top in third_party_imports(ast.parse(path.read_text(encoding="utf-8"))):
        where = f"{path.relative_to(root)}:{line}"
        dists = providers(top, where)
        if not dists & allowed:
            owners = sorted(e for e, reqs in extras.items() if dists & reqs)
            out.append(f"{where} imports {top}: declared by {owners or 'no user extra'}, but the module names "
                       f"{sorted(named) or 'no extra'}, which may install without it")
    return out


def test_every_third_party_import_is_declared_by_the_core_or_an_extra():
    problems = [p for path in modules() for p in undeclared(path)]
    assert not problems, "\n".join(problems)


def test_an_optional_import_is_declared_by_the_extra_its_module_names():
    problems = [p for path in modules() for p in outside_its_extra(path)]
    assert not problems, "\n".join(problems)


def test_every_missing_extra_error_names_an_extra_that_declares_the_package():
    _, extras = declared()
    wrong = []
    for path in modules():
        for line, package, extra in missing_extra_calls(ast.parse(path.read_text(encoding="utf-8"))):
            if _norm(package) not in extras.get(extra, frozenset()):
                wrong.append(f"{path.relative_to(ROOT)}:{line}: missing_extra({package!r}, {extra!r}), but "
                             f"extra {extra!r} does not declare {package}")
    assert not wrong, "\n".join(wrong)


def test_the_audit_catches_what_it_is_for(tmp_path):
    """An import only the test extra declares (pytest), and an optional one in a module that
    names no extra, are both caught; the same import behind its extra's error is not."""
    package = tmp_path / "retrieval"
    package.mkdir()
    (package / "__init__.py").write_text("")
    ours = "import json\nfrom semhist import History\nfrom . import chat\n"
    test_only, bare, guarded = (package / "a.py", package / "b.py", package / "c.py")
    test_only.write_text(ours + "import pytest\n")
    bare.write_text(ours + "import fastapi\n")
    guarded.write_text(ours + "try:\n    import fastapi\nexcept ImportError as exc:\n"
                       "    raise missing_extra('fastapi', 'service') from exc\n")
    assert [p.split(" (")[0] for p in undeclared(test_only, tmp_path)] == ["retrieval/a.py:4 imports pytest"]
    assert undeclared(bare, tmp_path) == [] and outside_its_extra(bare, tmp_path) != []
    assert outside_its_extra(guarded, tmp_path) == []
