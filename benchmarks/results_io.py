"""Where benchmark JSON goes: --out, or benchmarks/results/<name>-<time>.json."""

import json
import os
import time

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def write(name: str, result: dict, out: str | None = None, echo: dict | None = None) -> str:
    """Writes `result` as JSON and prints `echo` (default: the result)."""
    out = out or os.path.join(RESULTS, f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.json")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result if echo is None else echo, indent=2))
    return out
