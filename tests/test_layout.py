"""The house rules, checked on the import graph: one installed name, a kernel at the bottom, the
write path and the store never reaching up into the query path or the front ends."""

from __future__ import annotations

import ast
import json
from functools import lru_cache
from pathlib import Path

import pytest

import semhist

tomllib = pytest.importorskip("tomllib")  # Python 3.11+, as CI

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"semhist": ROOT / "retrieval", "semhist.indexers": ROOT / "indexers"}


def module_name(path: Path) -> str:
    """The installed name of a source file (retrieval/ is `semhist`, indexers/ `semhist.indexers`)."""
    for name, folder in sorted(FOLDERS.items(), key=lambda kv: -len(kv[0])):
        if path.is_relative_to(folder):
            parts = [name, *path.relative_to(folder).with_suffix("").parts]
            return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    raise ValueError(path)


def sources() -> list[Path]:
    return sorted(p for folder in FOLDERS.values() for p in folder.rglob("*.py"))


def imported(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of every import of a source file, relative ones resolved."""
    inside = any(path.is_relative_to(folder) for folder in FOLDERS.values())
    name = module_name(path) if inside else ".".join(path.relative_to(ROOT).with_suffix("").parts)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found += [(node.lineno, module if node.module else f"{module}.{a.name}") for a in node.names]
    return found


@lru_cache(maxsize=1)
def graph() -> dict[str, list[tuple[int, str]]]:
    return {module_name(p): [(line, m) for line, m in imported(p) if m.split(".")[0] == "semhist"]
            for p in sources()}


def within(module: str, room: str) -> bool:
    return module == room or module.startswith(room + ".")


def test_pyproject_installs_every_package_and_only_under_semhist():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = {module_name(p) for p in sources() if p.name == "__init__.py"}
    assert set(config["packages"]) == on_disk
    assert {k: ROOT / v for k, v in config["package-dir"].items()} == FOLDERS


def test_no_code_imports_the_folders_by_their_own_names():
    """`retrieval` and `indexers` are folders, not installed names: an import of them works only
    from the repository's root, never for a user."""
    scanned = [*sources(), *(ROOT / "tests").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py"),
               *(ROOT / ".ci").glob("*.py")]
    bad = [f"{p.relative_to(ROOT)}:{line} imports {m}" for p in scanned for line, m in imported(p)
           if m.split(".")[0] in ("retrieval", "indexers")]
    for nb in (ROOT / "notebooks").glob("*.ipynb"):
        for cell in json.loads(nb.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] == "code":
                tree = ast.parse("".join(line for line in cell["source"] if not line.startswith(("%", "!"))))
                bad += [f"{nb.name} imports {a.name}" for node in ast.walk(tree) if isinstance(node, ast.Import)
                        for a in node.names if a.name.split(".")[0] in ("retrieval", "indexers")]
                bad += [f"{nb.name} imports {node.module}" for node in ast.walk(tree)
                        if isinstance(node, ast.ImportFrom) and node.level == 0
                        and (node.module or "").split(".")[0] in ("retrieval", "indexers")]
    assert not bad


def test_the_kernel_imports_nothing_above_it():
    bad = [f"{m}:{line} imports {t}" for m, targets in graph().items() if within(m, "semhist.kernel")
           for line, t in targets if not within(t, "semhist.kernel")]
    assert not bad


def test_the_write_path_and_store_never_import_the_query_path_or_front_ends():
    bad = [f"{m}:{line} imports {t}" for m, targets in graph().items() if within(m, "semhist.indexers")
           for line, t in targets if not (within(t, "semhist.indexers") or within(t, "semhist.kernel"))]
    assert not bad


def test_one_import_gives_the_public_api():
    for name in ("History", "Engine", "Settings", "Budget", "SemhistError", "InputError", "Message",
                 "Thread", "load"):
        assert name in semhist.__all__
    undocumented = [n for n in semhist.__all__ if not isinstance(getattr(semhist, n), (str, tuple, dict))
                    and not (getattr(semhist, n).__doc__ or "").strip()]
    assert not undocumented


FRONT_ENDS = ("semhist.cli", "semhist.service", "semhist.agent", "semhist.integrations", "semhist.mcpserver")
# What a front end may import besides the public API (`semhist`), the kernel and the front ends:
# the presentation of results they share, and what the CLI's commands run.
FRONT_END_MAY_USE = {
    "semhist.render": "every front end shows results the same way",
    "semhist.llm": "the LLM clients and the packaged model server (`semhist llm-server`)",
    "semhist.evaluate": "`semhist eval`",
    "semhist.scoring": "`semhist eval --answer`",
    "semhist.segscore": "`semhist eval --segments`",
    "semhist.stats": "`semhist stats`",
    "semhist.searching": "the inspector's search box (both scores of the hybrid search)",
}


def test_front_ends_use_only_the_public_api_and_the_kernel():
    """The CLI, the service, the agent and the adapters reach the engine the way a user's code
    does: through `import semhist` (plus the kernel), so one request takes one path whichever
    front end it comes from, and the internals can move without breaking them."""
    allowed = ("semhist.kernel", *FRONT_ENDS, *FRONT_END_MAY_USE)

    def ok(target: str) -> bool:
        parent, _, name = target.rpartition(".")
        return (target == "semhist" or (parent == "semhist" and name in semhist.__all__)
                or any(within(target, room) for room in allowed))

    bad = [f"{m}:{line} imports {t}" for m, targets in graph().items()
           if any(within(m, room) for room in FRONT_ENDS) for line, t in targets if not ok(t)]
    assert not bad


BACKEND = {"close", "migrate", "applied_migrations", "dialect", "placeholder", "types", "url", "partitions",
           "raise_partitions"}
READ_ONLY = ["retrieval/history/states.py", "retrieval/history/timeview.py", "retrieval/history/views.py",
             "retrieval/stats.py", "indexers/index/vectors.py"]


def protocol_members(protocol: type) -> set[str]:
    return {n for n in vars(protocol) if not n.startswith("_")}


def test_the_store_interface_is_split_by_what_callers_need(tmp_path):
    """Every public member of SQLStore belongs to exactly one of reader, writer, forgetter (or is
    the backend's own: connection, migrations), and SQLStore satisfies all three."""
    from semhist.indexers.store import SQLStore, StoreForgetter, StoreReader, StoreWriter, open_store

    groups = [protocol_members(p) for p in (StoreReader, StoreWriter, StoreForgetter)] + [BACKEND]
    public = {n for n in dir(SQLStore) if not n.startswith("_")}
    assert sorted(public - set().union(*groups)) == []
    assert sum(len(g) for g in groups) == len(set().union(*groups))  # no member in two groups
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    assert all(isinstance(store, p) for p in (StoreReader, StoreWriter, StoreForgetter))
    store.close()


@pytest.mark.parametrize("path", READ_ONLY)
def test_code_typed_as_a_store_reader_only_reads(path):
    """What these modules call on a store is StoreReader's: they cannot write or forget."""
    from semhist.indexers.store import StoreReader

    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    called = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
              and ((isinstance(node.value, ast.Name) and node.value.id == "store")
                   or (isinstance(node.value, ast.Attribute) and node.value.attr in ("store", "_store")))}
    assert called and called <= protocol_members(StoreReader), called - protocol_members(StoreReader)


def test_the_facade_stays_small_enough_to_read_in_one_sitting():
    """History holds what a bot does (add, ask, forget, ...); the parts it wires live in
    `History.parts`, made on first use, so the facade does not grow a member per part."""
    public = [n for n in dir(semhist.History) if not n.startswith("_")]
    assert len(public) <= 19, public  # 18th: edit, a message's new version (a Teams edit); 19th: place (tenant, channel)
    # one request's work is in request.py, not in the facade
    assert len((ROOT / "retrieval" / "history" / "facade.py").read_text(encoding="utf-8").splitlines()) <= 250


def test_engine_is_a_history_not_a_second_facade():
    """Engine only chooses where the store lives: every way of asking is History's."""
    assert issubclass(semhist.Engine, semhist.History)
    assert {n for n in dir(semhist.Engine) if not n.startswith("_")} == \
        {n for n in dir(semhist.History) if not n.startswith("_")}
    added = {n for n in vars(semhist.Engine) if not n.startswith("__")}
    assert added <= {"close", "_scratch"}, added


def test_the_layout_the_bots_guide_draws_is_the_codes():
    """docs/guides/bots.md draws the rooms: every subpackage and module of both folders is in
    it, and the facade's member count is the facade's."""
    guide = (ROOT / "docs" / "guides" / "bots.md").read_text(encoding="utf-8")
    drawing = guide[guide.index("retrieval/    installed as"):]
    drawing = drawing[:drawing.index("```")]
    for folder in (ROOT / "retrieval", ROOT / "indexers"):
        for child in folder.iterdir():
            if child.is_dir() and (child / "__init__.py").exists():
                assert f"{child.name}/" in drawing, child
            elif child.suffix == ".py" and child.name != "__init__.py":
                assert child.name in drawing, child
    public = [n for n in dir(semhist.History) if not n.startswith("_")]
    assert f"History, the one facade ({len(public)} members)" in drawing


def test_dir_of_the_package_is_its_public_api():
    assert sorted(dir(semhist)) == sorted(semhist.__all__)
