"""The Colab notebooks in notebooks/, executed top to bottom with tiny budgets (nbclient)."""

import os

import nbformat
import pytest
from nbclient import NotebookClient

from tests.procs import ROOT

pytestmark = pytest.mark.slow


def run_notebook(name, tmp_path, monkeypatch):
    """Executes notebooks/<name>.ipynb in a fresh kernel; returns its outputs as
    (text, mime types) per code cell. Any cell that raises fails the test."""
    monkeypatch.setenv("SEEDLIKE_NOTEBOOK_TINY", "1")
    monkeypatch.setenv("SEEDLIKE_NOTEBOOK_RUNS", str(tmp_path))
    monkeypatch.setenv("SEEDLIKE_ROOT", ROOT)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    notebook = nbformat.read(os.path.join(ROOT, "notebooks", f"{name}.ipynb"), as_version=4)
    client = NotebookClient(
        notebook,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": os.path.join(ROOT, "notebooks")}},
    )
    client.execute()
    cells = []
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        text, kinds = "", set()
        for out in cell.outputs:
            text += out.get("text", "") + out.get("data", {}).get("text/plain", "")
            kinds |= set(out.get("data", {}))
        cells.append((text, kinds))
    return cells


def test_quickstart_trains_plots_scores_and_shows_a_gif(tmp_path, monkeypatch):
    setup, train, curves, watch = run_notebook("quickstart", tmp_path, monkeypatch)
    assert "'episode_return_mean': " in curves[0] and "image/png" in curves[1]
    assert "'return_mean'" in watch[0] and "image/gif" in watch[1]
    assert os.path.exists(tmp_path / "nb_quickstart" / "episode.gif")


def test_selfplay_rates_plays_the_bots_and_a_person(tmp_path, monkeypatch):
    cells = run_notebook("selfplay", tmp_path, monkeypatch)
    bots, person = cells[-2][0], cells[-1][0]
    assert "vs random: win rate" in bots and "vs scripted: win rate" in bots
    assert any(said in person for said in ("You win.", "Draw.", "You lose."))
    assert "'games': 1" in person


def test_surgery_grows_the_network_and_keeps_its_play(tmp_path, monkeypatch):
    cells = run_notebook("surgery", tmp_path, monkeypatch)
    surgery, after = cells[-2][0], cells[-1][0]
    assert "add_observations(old_shapes={'obs': (2,)}, new_shapes={'obs': (4,)})" in surgery
    assert "params/policy_torso/dense_0/kernel: [2, 64] -> [4, 128]" in surgery
    error = float(surgery.split("verification:")[1].split(" error ")[1].split()[0])
    assert error <= 1e-5
    before_line, after_line = after.splitlines()[:2]
    # Greedy play from the same seeds: the grown network plays the same episodes.
    assert before_line.removeprefix("before:") == after_line.removeprefix("after: ")
    assert "image/png" in cells[-1][1]
