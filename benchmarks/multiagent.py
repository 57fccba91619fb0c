"""Team games outside training: the raw env's speed, and a trained team against an opponent.

  # agent-steps/s of N envs stepped with random actions in one process (the ceiling to compare
  # a training run's sps with, at the same env count):
  python -m benchmarks.multiagent raw --config=configs/magent_battle.py --envs=2 --seconds=30

  # a run's policy (team 0) against random actions or a league snapshot (the other teams),
  # over --games games; the winner per the config's teams.result (survivors or summed return):
  python -m benchmarks.multiagent eval --run=runs/battle --opponent=random --games=100
  python -m benchmarks.multiagent eval --run=runs/battle --opponent=runs/battle/league/snapshots/25

Writes JSON (benchmarks/results/ or --out).
"""

from __future__ import annotations

import time

import numpy as np
from absl import app, flags

from benchmarks import results_io

_CONFIG = flags.DEFINE_string("config", "configs/magent_battle.py", "raw: the env's config.")
_ENVS = flags.DEFINE_integer("envs", 2, "Envs stepped together.")
_SECONDS = flags.DEFINE_float("seconds", 30.0, "raw: how long to step.")
_RUN = flags.DEFINE_string("run", "", "eval: a run directory or checkpoint.")
_OPPONENT = flags.DEFINE_string("opponent", "random", "eval: random, or a run/snapshot path.")
_GAMES = flags.DEFINE_integer("games", 100, "eval: games to play.")
_GREEDY = flags.DEFINE_bool("greedy", False, "eval: most likely actions instead of sampling.")
_SEED = flags.DEFINE_integer("seed", 1, "Env and sampling seed.")
_OUT = flags.DEFINE_string("out", None, "JSON output path.")


def raw() -> dict:
    from seedlike.config import load_config_file
    from seedlike.envs import make_env, make_env_spec

    config = load_config_file(_CONFIG.value)
    config.env.num_envs = _ENVS.value
    spec = make_env_spec(config.env)
    env = make_env(config.env, spec, _SEED.value)
    rng = np.random.default_rng(_SEED.value)
    env.reset()
    rows, start = 0, time.perf_counter()
    while time.perf_counter() - start < _SECONDS.value:
        batch = env.recv()
        env.send(rng.integers(0, spec.num_actions, batch.reward.shape[0]).astype(np.int32), batch)
        rows += batch.reward.shape[0]
    elapsed = time.perf_counter() - start
    env.close()
    return {
        "env": spec.name,
        "envs": _ENVS.value,
        "agent_steps_per_s": rows / elapsed,
        "seconds": elapsed,
    }


def evaluate() -> dict:
    import jax

    from seedlike.checkpoint import load_checkpoint
    from seedlike.envs import make_env
    from seedlike.league.games import load_policy
    from seedlike.policy import PolicyRunner
    from seedlike.teams import Teams, game_outcome

    config, network, _, _ = load_checkpoint(_RUN.value)
    _, params, label = load_policy(_RUN.value)
    spec = network.spec
    teams = Teams.from_config(config.teams, spec)
    env_config = config.env.copy_and_resolve_references()
    env_config.num_envs = min(_ENVS.value, _GAMES.value)
    env = make_env(env_config, spec, _SEED.value)
    runner = PolicyRunner(network, greedy=_GREEDY.value, seed=_SEED.value)
    opponent, opponent_params = None, None
    if _OPPONENT.value != "random":
        _, opponent_params, opponent_label = load_policy(_OPPONENT.value)
        opponent = PolicyRunner(network, greedy=_GREEDY.value, seed=_SEED.value + 1)
    rng = np.random.default_rng(_SEED.value)
    seats = env_config.num_envs * spec.num_players
    carry = jax.tree.map(np.asarray, network.initial_carry(seats))
    first = np.ones(seats, np.bool_)
    score = np.zeros((env_config.num_envs, teams.num_teams))
    outcomes: list[int] = []
    env.reset()
    start = time.perf_counter()
    while len(outcomes) < _GAMES.value:
        rows = env.recv()
        seat = rows.env_id.astype(np.int64) * spec.num_players + rows.player_id
        team = teams.team_of[rows.player_id]
        actions = np.zeros(seat.shape[0], np.int32)
        sides = [(np.flatnonzero(team == 0), runner, params)]
        others = np.flatnonzero(team > 0)
        if opponent is None:
            actions[others] = rng.integers(0, spec.num_actions, others.size)
        else:
            sides.append((others, opponent, opponent_params))
        for idx, runner_, p in sides:
            if not idx.size:
                continue
            obs = {k: v[idx] for k, v in rows.obs.items()}
            extras = {k: v[idx] for k, v in rows.extras.items()}
            c = jax.tree.map(lambda x, at=seat[idx]: x[at], carry)
            out = runner_.step(p, obs, extras, c, first[seat[idx]])
            actions[idx] = out.action
            for store, new in zip(jax.tree.leaves(carry), jax.tree.leaves(out.carry)):
                store[seat[idx]] = new
        done = rows.terminated | rows.truncated
        first[seat] = done
        np.add.at(score, (rows.env_id, team), rows.reward)
        # A game is over when its env's every reporting agent is done (the env resets next).
        for e in np.unique(rows.env_id):
            mine = rows.env_id == e
            if not done[mine].all():
                continue
            if teams.result == "survivors":  # agents alive at the start of the last step
                final = np.bincount(team[mine], minlength=teams.num_teams).astype(float)
            else:
                final = score[e]
            outcomes.append(game_outcome(final))
            score[e] = 0.0
        env.send(actions, rows)
    env.close()
    outcomes = np.asarray(outcomes[: _GAMES.value])
    return {
        "run": label,
        "opponent": "random" if opponent is None else opponent_label,
        "games": int(outcomes.size),
        "result_rule": teams.result,
        "win_rate": float(np.mean(outcomes > 0)),
        "draw_rate": float(np.mean(outcomes == 0)),
        "loss_rate": float(np.mean(outcomes < 0)),
        "seconds": time.perf_counter() - start,
    }


def main(argv):
    if len(argv) != 2 or argv[1] not in ("raw", "eval"):
        raise SystemExit("usage: multiagent.py raw|eval [flags]; see the docstring")
    if argv[1] == "eval" and not _RUN.value:
        raise SystemExit("error: eval needs --run=RUN_OR_CHECKPOINT")
    result = raw() if argv[1] == "raw" else evaluate()
    results_io.write(f"multiagent-{argv[1]}", result, _OUT.value)


if __name__ == "__main__":
    app.run(main)
