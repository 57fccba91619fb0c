"""python -m seedlike.envs.nmmo_summary: the actors' episode-info lines, averaged per member over
spans of the run and weighted by episodes."""

import json
import subprocess
import sys

from tests.procs import ROOT


def test_the_summary_weighs_each_line_by_its_episodes(tmp_path):
    lines = [  # (time, member, episodes, lifetime) as seedlike/actor.py logs them
        ("1127 10:00:00.000000", 0, 2, 10.0),
        ("1127 10:00:50.000000", 0, 1, 40.0),
        ("1127 10:02:00.000000", 0, 1, 100.0),
        ("1127 10:02:00.000000", 1, 4, 7.0),
    ]
    with open(tmp_path / "actor_0.log", "w") as f:
        for stamp, member, episodes, lifetime in lines:
            info = {"member": member, "episodes": episodes, "lifetime": lifetime}
            f.write(f"I{stamp} 42 actor.py:265] actor 0: episode infos {json.dumps(info)}\n")
        f.write("I1127 10:02:01.000000 42 actor.py:99] something else\n")
    done = subprocess.run(
        [sys.executable, "-m", "seedlike.envs.nmmo_summary", f"--run={tmp_path}", "--windows=2",
         "--keys=lifetime"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    table = done.stdout.splitlines()
    assert table[0] == "| member | minutes | episodes | lifetime |"
    assert table[2:] == [
        "| 0 | 0-1 | 3.0 | 20.0 |",  # (2 x 10 + 40) / 3
        "| 0 | 1-2 | 1.0 | 100.0 |",
        "| 1 | 0-1 | 0.0 | None |",
        "| 1 | 1-2 | 4.0 | 7.0 |",
    ]
