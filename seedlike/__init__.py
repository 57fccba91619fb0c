"""seedlike: SEED-style central-inference reinforcement learning for envpool games, in JAX.

The library API (seedlike/launch/api.py) is available here, imported on first use so that `import
seedlike` stays cheap: train, Run, load_policy, evaluate, record, play, plot_runs.
"""

_API = ("train", "Run", "load_policy", "evaluate", "record", "play", "plot_runs")


def __getattr__(name):
    if name in _API:
        from seedlike.launch import api

        return getattr(api, name)
    raise AttributeError(f"module 'seedlike' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_API])
