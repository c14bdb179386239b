import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.notebook, pytest.mark.slow]


def test_worked_example_notebook_runs(cache_dir, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("SEMHIST_CACHE_DIR", str(cache_dir))
    nb = nbformat.read(ROOT / "notebooks" / "worked_example.ipynb", as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "blocks" in text and "24/24" in text
    images = [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert images, "the bar chart was not drawn"


def test_benchmark_curves_notebook_runs(cache_dir, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("SEMHIST_CACHE_DIR", str(cache_dir))
    nb = nbformat.read(ROOT / "notebooks" / "benchmark_curves.ipynb", as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "locomo.jsonl" in text and "blocks" in text
    assert any("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))
