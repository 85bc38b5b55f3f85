"""Stage milestone notebooks: in sync with their example scripts (jupytext), and they run.

The notebook runs with nbclient on a python3 kernel of this interpreter (ipykernel), on the final reference
tree, the way `make lab` would run it: PYTHONPATH = the assembled tree + the repository root.
"""

from __future__ import annotations

import nbformat
import pytest

from tools import notebooks
from tools.course import assemble, tree_env
from tools.tree import ROOT, all_chapters

FINAL = all_chapters()[-1].number
STAGES = [p.stem for p in notebooks.sources()]


def test_notebooks_in_sync():
    assert STAGES, "no examples/stage*.py"
    problems = notebooks.out_of_sync()
    assert not problems, "run `make notebooks` and commit:\n" + "\n".join(problems)


def test_sync_check_matches_jupytext_cli(tmp_path):
    """The stored notebook has the cells `jupytext --to ipynb` makes of the script."""
    import subprocess
    import sys

    for name in STAGES:
        out = tmp_path / f"{name}.ipynb"
        subprocess.run([sys.executable, "-m", "jupytext", "--quiet", "--to", "ipynb", "-o", str(out),
                        str(notebooks.EXAMPLES / f"{name}.py")], check=True, cwd=ROOT)
        stored = nbformat.read(notebooks.notebook_of(notebooks.EXAMPLES / f"{name}.py"), as_version=4)
        assert notebooks._cells(nbformat.read(out, as_version=4)) == notebooks._cells(stored)


@pytest.mark.parametrize("name", STAGES)
def test_notebook_runs_on_final_tree(name, tmp_path, monkeypatch):
    from nbclient import NotebookClient

    path = notebooks.NOTEBOOKS / f"{name}.ipynb"
    nb = nbformat.read(path, as_version=4)
    env = tree_env(assemble(FINAL, "ref"), threads=1)  # MINISGL_CPU_THREADS = OMP_NUM_THREADS = 1
    env["MINISGL_QUIET"] = "1"
    env["JUPYTER_RUNTIME_DIR"] = str(tmp_path / "runtime")
    env = notebooks.kernel_env(env, tmp_path / "jupyter")
    for key in ("JUPYTER_PATH", "JUPYTER_RUNTIME_DIR"):  # the kernelspec lookup happens in this process
        monkeypatch.setenv(key, env[key])
    client = NotebookClient(nb, kernel_name="python3", timeout=600, allow_errors=False,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute(env=env)
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs
                      if o.get("output_type") == "stream")
    assert "tokens/s" in printed, printed[-2000:]
