"""Every default is written once, in base_config. Constructors whose keyword defaults equal a
config setting's (tests and benchmarks build them without a config) are listed here and compared
with base_config, so the two cannot drift apart."""

import inspect

import pytest

from networks import normalization, torsos
from seedlike import checkpoint, metrics, teams
from seedlike.algos import vtrace
from seedlike.config import base_config
from seedlike.envs import spaces
from seedlike.inference_server import serve_checkpoint
from seedlike.league import evaluation, league, payoff, samplers
from seedlike.learning import train_state as ts
from seedlike.rpc import codec
from seedlike.server import curriculum, episodes, inference, influence, matchmaking
from seedlike.server import trajectory_store as store
from surgery import plan

# (callable, its parameter, the config key whose default it repeats)
REPEATED = [
    (codec.Limits, "reward", "server.max_abs_reward"),
    (codec.Limits, "obs", "server.max_abs_obs"),
    (store.TrajectoryStore, "max_identity_share", "server.max_identity_share"),
    (store.TrajectoryStore, "fair_window_s", "server.fair_window_s"),
    (store.TrajectoryStore, "reward_floor", "server.reward_floor"),
    (influence.loss_mask, "max_share", "server.max_identity_share"),
    (influence.reward_scales, "floor", "server.reward_floor"),
    (ts.make_prepare, "tolerance", "server.coherence_tolerance"),
    (normalization.IdentityWindow, "seconds", "server.fair_window_s"),
    (ts.DeviationWindow, "seconds", "server.fair_window_s"),
    (normalization.IdentityWindow, "row_clip", "network.obs_clip"),
    (normalization.normalize, "clip", "network.obs_clip"),
    (checkpoint.Checkpointer, "max_to_keep", "checkpoint.max_to_keep"),
    (metrics.MetricsWriter, "wandb_mode", "log.wandb_mode"),
    (metrics.MetricsWriter, "wandb_project", "log.wandb_project"),
    (metrics.MetricsWriter, "wandb_group", "log.wandb_group"),
    (metrics.MetricsWriter, "tensorboard", "log.tensorboard"),
    (episodes.EpisodeBoard, "window", "log.episode_window"),
    (league.PeerSnapshots, "refresh_s", "league.peer_refresh_s"),
    (payoff.PayoffMatrix, "prior_games", "league.payoff_prior_games"),
    (payoff.PayoffMatrix, "decay", "league.payoff_decay"),
    (samplers.OpenAIFiveSampler, "eta", "league.quality_eta"),
    (samplers.PFSPSampler, "weighting", "league.pfsp_weighting"),
    (samplers.PFSPSampler, "p", "league.pfsp_p"),
    (teams.Teams, "spirit", "teams.spirit"),
    (teams.Teams, "spirit_final", "teams.spirit_final"),
    (teams.Teams, "spirit_updates", "teams.spirit_updates"),
    (teams.Teams, "zero_sum", "teams.zero_sum"),
    (teams.Teams, "decay", "teams.reward_decay"),
    (teams.Teams, "decay_horizon", "teams.reward_decay_horizon"),
    (teams.Teams, "result", "teams.result"),
    (curriculum.Curriculum, "start", "curriculum.start"),
    (curriculum.Curriculum, "measure", "curriculum.measure"),
    (vtrace.vtrace, "lambda_t", "vtrace.lambda_"),
    (vtrace.vtrace, "clip_rho", "vtrace.clip_rho"),
    (vtrace.vtrace, "clip_pg_rho", "vtrace.clip_pg_rho"),
    (vtrace.vtrace, "clip_c", "vtrace.clip_c"),
    (spaces.EnvActions, "bounds", "env.action_bounds"),
    (spaces.EnvActions, "squash", "network.action_squash"),
    (torsos.NatureCNN, "space_to_depth", "network.space_to_depth"),
    (serve_checkpoint, "interval_s", "log.interval_s"),
    (plan.Layout, "torso", "network.torso"),
    (league.League, "seed", "seed"),
    (evaluation.Evaluation, "seed", "seed"),
    (inference.InferenceService, "seed", "seed"),
    (matchmaking.Matchmaker, "seed", "seed"),
]


def _default(fn, name):
    if hasattr(fn, "__dataclass_fields__") and name in fn.__dataclass_fields__:
        return fn.__dataclass_fields__[name].default
    return inspect.signature(fn).parameters[name].default


@pytest.mark.parametrize("fn, name, key", REPEATED, ids=lambda x: getattr(x, "__name__", x))
def test_a_constructor_default_equals_the_config_default_it_repeats(fn, name, key):
    value = base_config()
    for part in key.split("."):
        value = value[part]
    assert _default(fn, name) == value


def test_no_constructor_defaults_the_config_no_longer_has():
    """Every key named above exists: a renamed setting cannot leave a stale pair behind."""
    config = base_config()
    for _, _, key in REPEATED:
        node = config
        for part in key.split("."):
            assert part in node, key
            node = node[part]
