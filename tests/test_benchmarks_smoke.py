"""The benchmark scripts stay runnable: each runs as `python benchmarks/NAME.py` on a tiny input
and writes its result files into a temporary folder (`--out`), never over the published ones;
and they share code through benchmarks/common.py, never by importing another script (a script may
keep a part of its own in a module without a main, as peers.py keeps peers_report.py)."""

from __future__ import annotations

import ast
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import ROOT, SHARED_DATA

BENCHMARKS = ROOT / "benchmarks"
MODULES = sorted(p.stem for p in BENCHMARKS.glob("*.py") if p.stem != "common")
# a script runs as `python benchmarks/NAME.py`; a module without that guard is one script's part
# (peers_report: the tables and plot of peers.py), imported by it
SCRIPTS = [m for m in MODULES if 'if __name__ == "__main__"' in (BENCHMARKS / f"{m}.py").read_text(encoding="utf-8")]
PG = "{postgres_url}"  # an argument replaced by the PostgreSQL fixture's URL
CACHE = "{cache_dir}"  # ... by the session's embedding cache
WORK = "{work}"  # ... by a scratch folder of the test's own

# name: (tiny arguments, the files it writes into --out (None: it takes no --out), needs ../shared/data)
RUNS: dict[str, tuple[list[str], list[str] | None, bool]] = {
    "big_inputs": (["--sizes", "2000", "--whole-sizes", "2000"], ["big_inputs.json", "big_inputs.md"], False),
    "botloop": (["--sizes", "300", "--turns", "6", "--asks-only", "20", "--many-threads", "3", "--many-size", "40",
                 "--pg", PG, "--workdir", WORK, "--cache-dir", CACHE], ["botloop.json", "botloop.md"], True),
    "capacity": (["all", "--disk-threads", "2", "--disk-messages", "60", "--lengths", "40,120", "--repeat", "1",
                  "--ops-length", "100", "--turns", "5", "--miss-ops", "3", "--threads", "10000", "--workdir", WORK,
                  "--cache-dir", CACHE], ["capacity.json", "capacity.md"], True),
    "cache_cost": (["--sets", "locomo", "--conversations", "1", "--turns", "3", "--strategies", "full,blocks",
                    "--variants", "head:2000,cache:1000b"], ["cache_cost.json", "cache_cost.md"], True),
    "cold_thread": (["--sizes", "100,600", "--recall", "1", "--cache-dir", CACHE], ["cold_thread.json", "cold_thread.md"],
                    True),
    "forget_cost": (["--asks", "200", "--repeat", "2"], None, False),
    "horizon": (["--limit", "1", "--queries", "4", "--strategies", "blocks,window", "--budgets", "1000",
                 "--cache-dir", CACHE], ["horizon.json", "horizon.md"], True),
    "limits": (["--limit", "1", "--queries", "3"], ["limits.json", "limits.md"], True),
    "long_thread_view": (["--limit", "1", "--queries", "5", "--cache-dir", CACHE], ["long_thread_view.md"], True),
    "ltr_features": (["--sets", "locomo,jmultiwoz", "--limit", "6", "--queries", "24", "--cache-dir", CACHE],
                     ["features.json", "jmultiwoz_tune.npz", "locomo_held.npz", "locomo_tune.npz"], True),
    "make_probes": ([], ["probes.jsonl", "cjk.jsonl"], False),
    # the embedders part loads two more models (e5-small, all-MiniLM on torch): half a minute more
    "multihop": (["--limit", "1", "--queries", "3", "--parts", "ranks", "variants", "oracle"],
                 ["multihop.json", "multihop.md"], True),
    "partitions": (["--db", PG, "--bots", "3", "--min-messages", "30", "--max-messages", "60"],
                   ["partitions.json", "partitions.md"], True),
    "peers": (["--dataset", "LoCoMo", "--limit", "1", "--queries", "2"], ["peers.json", "peers.md", "peers.png"], True),
    "probes": (["--limit", "2", "--strategy", "window", "--strategy", "blocks"], ["probes.json", "probes.md"], False),
    "routing_load": (["--db", PG, "--bots", "3", "--min-messages", "40", "--max-messages", "80", "--pace", "0.5",
                      "--duration", "3", "--workdir", WORK], ["routing_load.json", "routing_load.md"], True),
    "scale": (["--sizes", "200", "--pg", PG, "--workdir", WORK, "--cache-dir", CACHE], ["scale.json", "scale.md"], True),
    "seg_recall": (["--limit", "1", "--queries", "20", "--sets", "jmultiwoz", "--cache-dir", CACHE],
                   ["seg_recall.json", "seg_recall.md"], True),
    "seg_train": (["--limit", "2", "--no-ablation"], ["seg_train.md", "segmenter.json"], True),
    "segmentation": (["--limit", "2"], ["segmentation.md"], True),
    "service_load": (["--workers", "1", "--bots", "2", "--min-messages", "40", "--max-messages", "80", "--pace", "0.5",
                      "--duration", "3", "--workdir", WORK], ["service_load.json", "service_load.md"], True),
    "strategies": (["--limit", "1", "--budget", "10%"], ["results.json", "results.md", "recall_vs_tokens.png"], True),
    "time_requests": (["--limit", "3"], ["time_requests.jsonl"], True),
    "tool_results": (["--threads", "1"], ["tool_results.json", "tool_results.md"], True),
}
# Scripts whose every result is a model's answer: without one they stop at their check for it
# (the first arguments, or None where there is no check before the first call); with the real
# local model (the llm tier) they run on the second, tiny arguments. "{llm}" is its base URL.
LLM = "{llm}"
NEEDS_LLM: dict[str, tuple[list[str] | None, list[str], list[str]]] = {
    "answers": (["--parts", "samples", "locomo", "--locomo", "1", "--strategies", "window"],
                ["--parts", "locomo", "--locomo", "1", "--strategies", "window"], ["answers.json", "answers.md"]),
    "llm_request": (["--sets", "samples"], ["--sets", "samples"], ["llm_request.json", "llm_request.md"]),
    "sharded": (["--strategies", "window"], ["--strategies", "window", "--limit", "1"], ["sharded.json", "sharded.md"]),
    "tiage_questions": ([], ["--limit", "2"], ["tiage_chats.jsonl.xz"]),
    "proxy_turns": (None, ["--upstream", LLM, "--model", "{model}", "--turns", "1", "--history-tokens", "400",
                           "--max-tokens", "8", "--port", "{port}"], ["proxy_turns.json", "proxy_turns.md"]),
}


def _env(tmp_path: Path, cache_dir: Path) -> dict[str, str]:
    """No LLM, store or display of the developer's shell; data and embedding cache in tmp folders;
    the benchmark data where the tests found it (the scripts read SEMHIST_SHARED_DATA too)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OPENAI_", "AZURE_OPENAI_", "SEMHIST_")) and k not in ("DISPLAY", "MPLBACKEND")}
    return {**env, "SEMHIST_DATA_DIR": str(tmp_path / "data"), "SEMHIST_CACHE_DIR": str(cache_dir),
            "SEMHIST_SHARED_DATA": str(SHARED_DATA)}


def _run(name: str, args: list[str], tmp_path: Path, cache_dir: Path, timeout: float = 300):
    return subprocess.run([sys.executable, f"benchmarks/{name}.py", *args], cwd=ROOT, env=_env(tmp_path, cache_dir),
                          capture_output=True, text=True, timeout=timeout)


# Scripts that read what ltr_features.py wrote: run after it, in its folder (the test below).
AFTER_FEATURES: dict[str, list[str]] = {
    "ltr_train": ["--train", "locomo,jmultiwoz"],
    "ltr_eval": ["--sets", "locomo,jmultiwoz", "--train", "locomo,jmultiwoz", "--ablate", "author"],
    "ltr_trees": ["--sets", "locomo,jmultiwoz", "--train", "locomo,jmultiwoz", "--rounds", "5,10"],
}


def test_every_script_is_smoke_tested_or_said_to_need_an_llm():
    assert sorted([*RUNS, *NEEDS_LLM, *AFTER_FEATURES]) == SCRIPTS


@pytest.mark.slow
def test_the_ranker_scripts_run_on_the_features_they_write(tmp_path, cache_dir):
    """ltr_features -> ltr_train -> ltr_eval in one folder: features of the tune and held
    splits, a model fitted on tune alone, held recall with one ablation."""
    if not SHARED_DATA.exists():
        pytest.skip(f"benchmark data not found at {SHARED_DATA}")
    work = tmp_path / "ltr"
    args = [a.replace(CACHE, str(cache_dir)) for a in RUNS["ltr_features"][0]]
    for name, more in [("ltr_features", args), *AFTER_FEATURES.items()]:
        place = ["--out", str(work)] + (["--features", str(work)] if name != "ltr_features" else [])
        done = _run(name, [*more, *place], tmp_path, cache_dir)
        assert done.returncode == 0, f"{name}.py:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    model = json.loads((work / "ranker.json").read_text(encoding="utf-8"))
    assert model["features"] and len(model["weights"]) == len(model["features"])
    assert "learned" in (work / "ltr_eval.md").read_text(encoding="utf-8")
    assert "trees, 10 rounds" in (work / "ltr_trees.md").read_text(encoding="utf-8")


@pytest.mark.slow
@pytest.mark.parametrize("name", [s for s in SCRIPTS if s not in AFTER_FEATURES])
def test_benchmark_runs_on_a_tiny_input(name, tmp_path, cache_dir, request):
    if name in NEEDS_LLM:  # as far as it goes without a model: imports, arguments, its check
        args = NEEDS_LLM[name][0]
        if args is None:
            pytest.skip(f"{name}.py calls its upstream from the first turn: run with the model below")
        out = tmp_path / "out"
        done = _run(name, [*args, "--out", str(out)], tmp_path, cache_dir, timeout=120)
        assert done.returncode == 1 and "no LLM configured" in done.stderr, done.stderr[-3000:]
        assert not out.exists()
        return
    args, files, needs_data = RUNS[name]
    if needs_data and not SHARED_DATA.exists():
        pytest.skip(f"benchmark data not found at {SHARED_DATA}")
    out = tmp_path / "out"
    fill = {CACHE: str(cache_dir), WORK: str(tmp_path / "work")}
    if PG in args:
        fill[PG] = request.getfixturevalue("postgres_url")
    args = [fill.get(a, a) for a in args] + (["--out", str(out)] if files is not None else [])
    start = time.perf_counter()
    done = _run(name, args, tmp_path, cache_dir)
    took = time.perf_counter() - start
    assert done.returncode == 0, f"{name}.py {' '.join(args)} ({took:.0f} s):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    if files is None:
        assert done.stdout.strip(), "it printed nothing"
        return
    assert sorted(p.name for p in out.iterdir()) == sorted(files)
    for f in files:
        assert (out / f).stat().st_size > 0, f
        if f.endswith(".json"):
            json.loads((out / f).read_text(encoding="utf-8"))
    if name == "make_probes":  # the generator still writes the checked-in probe sets
        for f in files:
            assert (out / f).read_bytes() == (ROOT / "data" / "probes" / f).read_bytes(), f
    if name in ("scale", "botloop"):  # each case on SQLite and on PostgreSQL
        rows = json.loads((out / f"{name}.json").read_text())
        assert {r["backend"] for r in rows} == {"sqlite", "postgresql"}


@pytest.mark.llm
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(NEEDS_LLM))
def test_benchmark_with_the_local_model_runs_on_a_tiny_input(name, tmp_path, cache_dir, llm_env):
    """The scripts whose results are answers, against the packaged model: one or two answers each."""
    if name in ("answers", "proxy_turns", "tiage_questions") and not SHARED_DATA.exists():  # LoCoMo, TIAGE
        pytest.skip(f"benchmark data not found at {SHARED_DATA}")
    _, args, files = NEEDS_LLM[name]
    fill = {LLM: llm_env["OPENAI_BASE_URL"], "{model}": llm_env["SEMHIST_LLM_MODEL"], "{port}": str(_free_port())}
    out = tmp_path / "out"
    env = {**_env(tmp_path, cache_dir), **llm_env}
    done = subprocess.run([sys.executable, f"benchmarks/{name}.py", *[fill.get(a, a) for a in args], "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{name}.py:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    assert sorted(p.name for p in out.iterdir()) == sorted(files)
    for f in files:
        if f.endswith(".json"):
            json.loads((out / f).read_text(encoding="utf-8"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- the scripts share code through common.py only ------------------------------------------------
def _tree(name: str) -> ast.Module:
    return ast.parse((BENCHMARKS / f"{name}.py").read_text(encoding="utf-8"))


def test_scripts_import_no_other_script_and_keep_no_paths_of_their_own():
    common_names = {n.id for node in _tree("common").body if isinstance(node, (ast.Assign, ast.AnnAssign))
                    for n in ast.walk(node.targets[0] if isinstance(node, ast.Assign) else node.target)
                    if isinstance(n, ast.Name)}
    common_names |= {node.name for node in _tree("common").body
                     if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))}
    bad = []
    for name in MODULES:
        for node in ast.walk(_tree(name)):
            where = f"benchmarks/{name}.py:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Import):
                bad += [f"{where} imports {a.name}" for a in node.names if a.name.split(".")[0] in SCRIPTS]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                top = (node.module or "").split(".")[0]
                if top in SCRIPTS:
                    bad.append(f"{where} imports from {node.module}")
                elif top == "common":
                    bad += [f"{where} imports {a.name}, which common.py does not define" for a in node.names
                            if a.name not in common_names]
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                bad += [f"{where} defines {n.id}" for t in targets for n in ast.walk(t)
                        if isinstance(n, ast.Name) and n.id in ("ROOT", "DATA")]
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Path"
                  and any(isinstance(a, ast.Name) and a.id == "__file__" for a in node.args)):
                bad.append(f"{where} finds its own paths (Path(__file__)): they are in common.py")
            elif isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", "") == "sys":
                bad.append(f"{where} changes sys.path: `python benchmarks/NAME.py` puts common.py on it")
    assert not bad, "\n".join(bad)
