import nbformat
import pytest
from nbclient import NotebookClient

from tests.conftest import ROOT

pytestmark = [pytest.mark.notebook, pytest.mark.slow]


def run_notebook(name: str, cache_dir, monkeypatch):
    """Execute a notebook as a user would; return its text output and whether it drew a picture."""
    monkeypatch.setenv("SEMHIST_CACHE_DIR", str(cache_dir))
    nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    text = "".join(o.get("text", "") for o in outputs)
    return text, any("image/png" in o.get("data", {}) for o in outputs)


def test_worked_example_notebook_runs(cache_dir, monkeypatch):
    text, drew = run_notebook("worked_example.ipynb", cache_dir, monkeypatch)
    assert "blocks" in text and "24/24" in text
    assert drew, "the bar chart was not drawn"


@pytest.mark.shared_data  # it plots LoCoMo and JMultiWOZ
def test_benchmark_curves_notebook_runs(cache_dir, monkeypatch):
    text, drew = run_notebook("benchmark_curves.ipynb", cache_dir, monkeypatch)
    assert "locomo.jsonl" in text and "blocks" in text
    assert drew, "the curves were not drawn"


def test_langchain_memory_notebook_runs(cache_dir, monkeypatch):
    text, _ = run_notebook("langchain_memory.ipynb", cache_dir, monkeypatch)
    assert "kept 24/24 ramen turns" in text
    assert "graph state: 70 messages; semhist thread: 70 messages" in text
    assert "semhist thread 'chain': 4 messages" in text


def test_llamaindex_memory_notebook_runs(cache_dir, monkeypatch):
    text, _ = run_notebook("llamaindex_memory.ipynb", cache_dir, monkeypatch)
    assert text.count("kept 24/24 ramen turns") == 2
    assert "semhist thread: 70 messages" in text


def test_answers_notebook_runs(cache_dir, monkeypatch):
    text, drew = run_notebook("answers.ipynb", cache_dir, monkeypatch)
    assert "ramen.json" in text and "facts" in text and "sharded" in text
    assert drew, "the score-against-tokens plot was not drawn"


def test_openai_agents_session_notebook_runs(cache_dir, monkeypatch):
    text, _ = run_notebook("openai_agents_session.ipynb", cache_dir, monkeypatch)
    assert "kept 24/24 ramen turns" in text
    assert "semhist thread: 70 messages" in text
