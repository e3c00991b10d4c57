"""`analysis/notebooks/speedup_trajectories.ipynb` runs top to bottom on a run directory named
in its first cell (here the session's small real run), as CI executes it with nbclient."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.analysis_lineages import real_run

NOTEBOOK = Path(__file__).resolve().parents[1] / "analysis/notebooks/speedup_trajectories.ipynb"


@pytest.fixture(scope="session")
def real_dir(ray_cluster, tmp_path_factory) -> str:
    return real_run(tmp_path_factory)


def test_the_notebook_runs_on_a_real_run(real_dir, tmp_path):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    first = nb.cells[0]
    assert first.cell_type == "code" and first.source.lstrip("# ").count("RUN_DIRS = [") == 1
    assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code")  # kept clean
    first.source = f"RUN_DIRS = [{real_dir!r}]"
    NotebookClient(nb, timeout=180, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()  # fmt: skip
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "\n".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in outputs)
    assert "interpreter timings" in text  # the CPU run is named as such
    assert "builtin:matmul" in text and "builtin:scaled_gelu" in text and "fast_1.5" in text
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    # trajectories, fast_p, statuses, two lineage trees, islands and migration
    assert len(images) >= 6, len(images)
    assert "class ModelNew" in text  # the best candidate's source
