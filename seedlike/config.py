"""Experiment configs: the defaults every configs/*.py starts from, and their validation.

Configs are ml_collections.ConfigDicts, locked after construction so a misspelled key (in a config
file or a --config.x.y=v flag) is an error instead of a silently ignored setting.
"""

from __future__ import annotations

import json
import logging

import ml_collections
import numpy as np

from seedlike.algos import ALGORITHMS

ACTION_BOUNDS = ("clip", "rescale")  # env.action_bounds
ROLES = ("main", "main_exploiter", "league_exploiter")  # league.roles (seedlike.league.roles)
EXPLOITER_RESETS = ("initial", "main")  # league.exploiter_reset


def base_config() -> ml_collections.ConfigDict:
    """Every setting at its default: the run's own settings, then one section per part, each
    built by its function below (its comments are the settings' documentation), and one per
    learning algorithm (seedlike.algos.ALGORITHMS). configs/*.py start from this."""
    c = run_settings()
    c.env = env_section()
    c.teams = teams_section()
    c.curriculum = curriculum_section()
    c.population = population_section()
    c.network = network_section()
    for name, algorithm in ALGORITHMS.items():
        c[name] = algorithm.defaults()
    c.optimizer = optimizer_section()
    c.server = server_section()
    c.transport = transport_section()
    c.league = league_section()
    c.anneal = anneal_section()
    c.actor = actor_section()
    c.log = log_section()
    c.distributed = distributed_section()
    c.checkpoint = checkpoint_section()
    return c


def run_settings() -> ml_collections.ConfigDict:
    """The run's own settings: algorithm, seed, budget and batch shape."""
    c = ml_collections.ConfigDict()
    c.algo = "ppo"  # learning algorithm: a key of seedlike.algos.ALGORITHMS
    c.seed = 0  # seeds params, sampling, shuffling and env seeds
    # On-device runs (seedlike.ondevice): train this many independent agents, seeded seed,
    # seed + 1, ..., vmapped in one compiled program, each in <logdir>/seed_<k> with its own
    # rows, checkpoints, config and summary. The SEED path trains one (sweeps: --seeds).
    c.seeds = 1
    c.total_env_steps = 1_000_000  # stop after this many env steps (rows) received from actors
    # Stop earlier, as finished, once a majority of actor identities' mean returns hold this for
    # log.stop_hold_s (episode_return_robust reaching it; learning checks and budgeted sweeps:
    # the time to a return). None: run to total_env_steps.
    c.stop_at_return = ml_collections.config_dict.placeholder(float)
    # End the job at this many env steps as if finished, with a checkpoint, while schedules (the
    # learning rate's annealing, curricula) still run to total_env_steps: rerunning with a larger
    # value continues (python -m seedlike.launch.pbt trains in such generations). 0: no pause.
    c.pause_at_env_steps = 0
    # False: serve, record and build learner batches as usual, but drop them instead of learning
    # (the policy stays as initialized or restored). Measures what the serving path sustains
    # without the learner's compute (benchmarks/server_capacity.py).
    c.learn = True
    # A run or checkpoint to start a new run from (fine-tuning): its parameters and observation
    # statistics, with a fresh optimizer, counters and league. Ignored when the logdir has a
    # checkpoint of its own (a resumed run continues from that). "": from scratch.
    c.init_from = ""
    # Configs sized for an accelerator name the variant of themselves that a CPU can train here
    # (e.g. "configs/procgen_coinrun.py:cpu"); a learner with only CPU devices says so at start.
    c.cpu_variant = ""
    c.unroll_length = 32  # T: learning steps per unroll (the server sends T+1, the last bootstraps)
    c.batch_unrolls = 32  # unrolls per learner batch (one policy version)
    return c


def check_run(config, need) -> None:
    """What cannot work in `run_settings`."""
    need(config.algo in ALGORITHMS, f"algo={config.algo!r} is not one of {list(ALGORITHMS)}")
    for old, new in RENAMED_KEYS.items():
        section, _, key = old.rpartition(".")
        need(key not in config[section], f"{old} is now {new}: set that instead")
    need(config.total_env_steps > 0, "total_env_steps must be positive")
    need(config.seeds >= 1, f"seeds={config.seeds} must be >= 1")
    need(config.pause_at_env_steps >= 0, "pause_at_env_steps must be >= 0 (0: no pause)")
    need(config.unroll_length >= 1, "unroll_length must be >= 1")
    need(config.batch_unrolls >= 1, "batch_unrolls must be >= 1")


def env_section() -> ml_collections.ConfigDict:
    """The environment every actor steps: its backend (seedlike.envs.BACKENDS), task and spaces."""
    c = ml_collections.ConfigDict()
    # envpool | pettingzoo (any PettingZoo parallel env) | gymnasium (any single-agent Gymnasium
    # env) through actors; gymnax | pgx | brax on the device (docs/ondevice.md);
    # seedlike/envs/__init__.py
    c.backend = "envpool"
    # envpool: a task id. pettingzoo: the module with parallel_env(), or module:function, e.g.
    # "magent2.environments.battle_v4" (pip install -e .[magent]) or "seedlike.envs.coins".
    # gymnasium: a registered id ("Taxi-v4") or an entry point ("examples.corridor:Corridor").
    c.name = "CartPole-v1"
    c.num_envs = 16  # envs per actor
    # envpool batch per recv; 0 = num_envs (sync). Less runs envpool asynchronously: the actor sends
    # each batch when it is ready and steps the other envs while that request is in flight. Sync is
    # the default for small hosts; actors given cores (actor.py --cores, actor_sizing) send two
    # asynchronous halves (benchmarks/RESULTS.md, "Breakout on an accelerator host").
    c.batch_envs = 0
    c.num_threads = 0  # envpool worker threads; 0 = envpool's default
    # extra envpool.make kwargs (e.g. episodic_life), or the pettingzoo env's parallel_env kwargs
    c.kwargs = ml_collections.ConfigDict()
    c.obs_indices = ()  # keep only these features of a vector observation (() = all)
    c.obs_keys = ()  # keep only these keys of a dict observation (() = all)
    # pettingzoo: add observation "agent_id", the agent's one-hot index, so replicas of one shared
    # policy know which agent they play.
    c.agent_id = False
    # K >= 2: every row also carries the observations of the other K-1 agents of its team (teams
    # are consecutive blocks of K player ids, teams.sizes = (K, K, ...)), for network.team_pool
    # (seedlike/envs/teammates.py). 0: off.
    c.teammates = 0
    # Curriculum levels inside one job (seedlike/envs/levels.py): task ids with the spaces of
    # env.name, easiest first. Each actor slot plays one level per episode, drawn from the
    # probabilities the server sets (`curriculum`). (): env.name only.
    c.levels = ()
    # MiniGrid/BabyAI: send the mission as this many word ids (int32, seedlike/envs/text.py) for a
    # text encoder (network.text_key); 0: as envpool gives it (bytes), or drop it with obs_keys.
    c.mission_tokens = 0
    c.blank_mission = False  # every mission reads as empty: the baseline a mission must beat
    # Continuous actions (a Box action space): how the actor turns the policy's sample into what
    # the env gets. "clip": clipped to the env's bounds (CleanRL); "rescale": the policy acts in
    # [-1, 1], mapped linearly onto the bounds (then clipped). With network.action_squash the
    # tanh's output is always rescaled onto the bounds. The sample itself is what is learned from.
    c.action_bounds = "clip"
    return c


def check_env_section(config, need) -> None:
    """What cannot work in `env_section` (levels: `check_curriculum`)."""
    from seedlike.envs import UnknownEnv, check_env

    try:
        check_env(config.env)
    except UnknownEnv as e:
        need(False, str(e))
    need(config.env.num_envs >= 1, "env.num_envs must be >= 1")
    need(
        0 <= config.env.batch_envs <= config.env.num_envs,
        f"env.batch_envs={config.env.batch_envs} must be 0 or in [1, {config.env.num_envs}]",
    )
    need(
        config.env.action_bounds in ACTION_BOUNDS,
        f"env.action_bounds={config.env.action_bounds!r} is not one of {list(ACTION_BOUNDS)}",
    )


def teams_section() -> ml_collections.ConfigDict:
    """Teams in multi-agent envs (seedlike/teams.py; OpenAI Five App. G): how seats form teams
    and how each agent's learning reward is shaped from its team's. Episode returns stay raw."""
    c = ml_collections.ConfigDict()
    # Agents per team, in player-id order (PettingZoo: possible_agents order), e.g. (81, 81).
    # (): two-player games are two teams of one; other envs one team of every agent.
    c.sizes = ()
    # Team spirit tau: each agent learns from (1 - tau) * its reward + tau * its team's mean reward,
    # tau moving linearly from `spirit` to `spirit_final` over `spirit_updates` policy versions.
    c.spirit = 0.0
    c.spirit_final = ml_collections.config_dict.placeholder(float)  # None: constant
    c.spirit_updates = 0
    # Subtract the opposing teams' mean reward from every agent's (zero-sum games).
    c.zero_sum = False
    # Scale rewards by reward_decay ** (t / reward_decay_horizon), t the agent's steps in its
    # episode (OpenAI Five: 0.6 per 10 minutes of game time, so early and late rewards weigh alike
    # against the rising stakes of late game). 0: off.
    c.reward_decay = 0.6
    c.reward_decay_horizon = 0
    # Who won a game (league results, win rates): the team with the larger summed return
    # ("return"), or with more agents alive when the game ended ("survivors").
    c.result = "return"
    return c


def check_teams(config, need) -> None:
    """What cannot work in `teams_section`, and env.teammates against it."""
    t = config.teams
    need(all(int(n) >= 1 for n in t.sizes), f"teams.sizes={tuple(t.sizes)} must be positive")
    for name in ("spirit", "spirit_final"):
        value = t.get(name)
        need(value is None or 0.0 <= value <= 1.0, f"teams.{name}={value} must lie in [0, 1]")
    need(0.0 < t.reward_decay <= 1.0, "teams.reward_decay must lie in (0, 1]")
    need(t.reward_decay_horizon >= 0, "teams.reward_decay_horizon must be >= 0 (0 = off)")
    need(t.result in ("return", "survivors"), "teams.result must be return|survivors")
    k = int(config.env.teammates)
    need(
        k == 0 or (k >= 2 and all(int(n) == k for n in t.sizes)),
        f"env.teammates={k} needs teams of {k} agents each (teams.sizes={tuple(t.sizes)}); "
        "set it to the team size, or 0",
    )


def curriculum_section() -> ml_collections.ConfigDict:
    """MazeBase's threshold curriculum over env.levels (seedlike/server/curriculum.py): episodes
    draw their level uniformly from [0, bound]; once `window` episodes have ended since the
    bound last moved, their success rate (return > log.success_threshold) above `upper` (T_u)
    raises the bound by one level, below `lower` (T_l) lowers it. From `full_range_from` of
    total_env_steps on, every level is played (MazeBase: the last third of training)."""
    c = ml_collections.ConfigDict()
    c.lower = 0.3
    c.upper = 0.8
    c.window = 200
    c.start = 0  # the bound at the start of a run
    c.full_range_from = 2.0 / 3.0  # > 1: never
    # Whose success moves the bound: "all" episodes at levels <= bound (MazeBase) or only those at
    # the bound ("bound": the hardest level in play must be mastered before the next comes in).
    c.measure = "all"
    return c


def check_curriculum(config, need) -> None:
    """What cannot work in `curriculum_section` and env.levels."""
    from seedlike.envs import BACKENDS, UnknownEnv, check_env

    levels, cur = tuple(config.env.levels), config.curriculum
    if not levels:
        return
    leveled = [b.name for b in BACKENDS.values() if b.levels]
    need(
        BACKENDS[config.env.backend].levels and config.log.success_threshold is not None,
        f"env.levels needs a backend that plays levels ({', '.join(leveled)}) and "
        "log.success_threshold (what a success is)",
    )
    need(
        0.0 <= cur.lower <= cur.upper <= 1.0,
        f"curriculum.lower={cur.lower} and curriculum.upper={cur.upper} must satisfy "
        "0 <= lower <= upper <= 1",
    )
    need(cur.window >= 1, "curriculum.window must be >= 1")
    need(cur.measure in ("all", "bound"), "curriculum.measure must be all|bound")
    need(
        0 <= cur.start < len(levels),
        f"curriculum.start={cur.start} must be a level index in [0, {len(levels)})",
    )
    for name in levels:
        try:
            check_env(ml_collections.ConfigDict({**config.env.to_dict(), "name": name}))
        except UnknownEnv as e:
            need(False, f"env.levels: {e}")


def population_section() -> ml_collections.ConfigDict:
    """A population (Neural MMO's N_pop): `size` independent learners in one world, member k
    learning from the agents of teams k, k + size, ... (scripts/train.sh --population=N sets it
    for learners and actors). A member's learner plays all of its own seats (no league), and
    zero-sum shaping sees only its own teams' rewards."""
    c = ml_collections.ConfigDict()
    c.size = 1
    return c


def check_population(config, need) -> None:
    need(config.population.size >= 1, "population.size must be >= 1")


def network_section() -> ml_collections.ConfigDict:
    """The policy/value network (networks/build.py reads this section; MEANING_KEYS: a run
    resumes only with the network it was trained with, or after surgery)."""
    c = ml_collections.ConfigDict()
    # mlp | nature_cnn | impala_cnn | small_cnn (MiniGrid-sized images) | board_cnn (board games)
    c.torso = "mlp"
    c.hidden_sizes = (64, 64)  # mlp layers
    c.activation = "tanh"  # mlp activation: tanh | relu | gelu | silu
    c.residual_blocks = 0  # mlp: residual blocks after the dense layers
    # mlp and board_cnn: LayerNorm after each layer (a conv's over its channels), before its
    # activation (PQN's torsos; surgery can deepen such an MLP but widens neither)
    c.layer_norm = False
    c.shared_torso = False  # mlp only: one torso for policy and value, or one each
    c.cnn_channels = ()  # CNN torsos: conv channels; () = the paper's
    c.cnn_hidden = 0  # CNN torsos: size of the dense layer; 0 = the paper's
    c.image_key = "obs"  # CNN torsos: which observation is the image
    c.image_layout = "auto"  # CHW | HWC | auto (channels = the smaller end dimension)
    c.image_scale = 1.0 / 255.0  # image inputs are multiplied by this
    c.space_to_depth = True  # nature_cnn: stride-2 conv as stride-1 over 2x2 blocks
    c.cnn_kernel = 0  # board_cnn: conv kernel size; 0 = 3
    c.cnn_padding = ""  # board_cnn: SAME | VALID; "" = SAME
    # Left-right symmetric board games: average the network over the board and its mirror image
    # (exactly equivariant policy): columns (an action per column) | cells (per cell) | "" = off
    c.mirror = ""
    # Board games with planes (mine, theirs) [H, W, 2]: the torso also reads, for every cell,
    # whether a stone there completes this many in a row for either side, and whether a stone
    # can go there now (networks/board.py; an MLP learns these tactics slowly). 0: off.
    c.board_lines = 0
    c.board_gravity = False  # board_lines: stones fall to the lowest empty cell
    c.board_key = "obs"  # board_lines: the board observation
    # OpenAI Five's cross-hero pool: the torso also reads every teammate's observation (needs
    # env.teammates) and the heads get this share of its features max-pooled over the agent and
    # its present teammates, besides the agent's own features. 0: off.
    c.team_pool = 0.0
    # An int32 [L] observation of word ids (env.mission_tokens) read by a text encoder (embedding
    # and GRU, networks/text.py) whose features join the torso's other inputs. "": none.
    c.text_key = ""
    c.text_size = 64  # word embedding and GRU width
    # A float [E, F] observation of up to E entities (absent ones all zero) read by an entity
    # encoder (per-entity MLP, self-attention, max-pool; networks/entities.py) whose pooled
    # features join the torso's other inputs. "": none.
    c.entities = ""
    c.entity_size = 64  # entity embedding width
    c.entity_heads = 4  # attention heads of the entity encoder
    # Factorized actions (MultiDiscrete): the action heads, by index, that choose an entity of
    # network.entities by attention from the core's output (OpenAI Five's and Neural MMO's
    # target choice); their choices beyond E are ordinary logits (e.g. "no target").
    c.pointer_heads = ()
    # The policy head of the dense choices: a key of networks.heads.POLICY_HEADS ("categorical":
    # one linear layer of logits; "q": action values, shaped by the settings after this one), or
    # "auto": the head the algorithm's record declares (rainbow, r2d2: "q"), else "categorical".
    c.policy_head = "auto"
    c.atoms = 1  # q: atoms of each action's return distribution (C51: 51); 1: expected values
    c.dueling = False  # q: a state value and action advantages, Q = V + A - mean A
    c.value_range = (-10.0, 10.0)  # q with atoms > 1: the returns the atoms span
    # q: noisy linear layers (NoisyNet) explore by weight noise while acting and learning; greedy
    # evaluation uses their mean weights. Usually with rainbow.epsilon = 0.
    c.noisy = False
    # Factorized actions: each head also reads the arguments chosen before it (a zero-initialized
    # table per argument added to its input; OpenAI Five's target head reads the action type).
    # Acting then samples head by head, and learning conditions on the actions taken.
    c.autoregressive = False
    c.core = "none"  # none | lstm (between torso and heads; the torso is then shared)
    c.core_size = 256  # LSTM units
    c.normalize_obs = True  # running mean/std normalization of float observations
    c.obs_clip = 5.0  # normalized observations are clipped to +-obs_clip
    # Continuous actions: a diagonal Gaussian head. Its log-std is one learned vector (CleanRL's
    # choice) or, with state_dependent_std, a layer of the features; it starts at log_std_init.
    # action_squash: the env gets tanh of the sample (rescaled to its bounds), learned with the
    # tanh's log-det correction (SAC's squashed Gaussian); needs finite bounds.
    c.state_dependent_std = False
    c.log_std_init = 0.0
    c.action_squash = False
    return c


def check_algorithm(config, need) -> None:
    """The algorithm's section (its record's checks, seedlike.algos) and the head it learns;
    the network's other settings are checked against the env's spaces (`validate_network`)."""
    resolve(config)
    for problem in ALGORITHMS[config.algo].check(config) + _head_problems(config):
        need(False, problem)


def optimizer_section() -> ml_collections.ConfigDict:
    """Adam with global-norm clipping; the learning rate is an injected hyperparameter (surgery
    sets it to 0 for a while)."""
    c = ml_collections.ConfigDict()
    c.learning_rate = 2.5e-4
    c.anneal_lr = True  # linear decay to 0 at total_env_steps
    c.max_grad_norm = 0.5  # global-norm clipping
    c.adam_eps = 1e-5
    return c


def check_optimizer(config, need) -> None:
    need(config.optimizer.learning_rate >= 0, "optimizer.learning_rate must be >= 0")


def server_section() -> ml_collections.ConfigDict:
    """The learner's serving side: inference batching, admission of actor streams and what one
    actor identity may weigh (seedlike/server/influence.py)."""
    c = ml_collections.ConfigDict()
    _batching_and_seats(c)
    _identity_bounds(c)
    c.max_envs_per_actor = 4096
    # Largest |reward| and |float observation| accepted from actors; a row beyond them ends the
    # actor's stream with a message (NaN and infinity always do). Raise them for envs that need it.
    c.max_abs_reward = 1e6
    c.max_abs_obs = 1e6
    # A stream that sends no Hello within hello_timeout_s, or no step for idle_timeout_s while the
    # server waits for it, is closed and frees its slot (max_actors): silent connections cannot
    # lock actors out.
    c.hello_timeout_s = 10.0
    c.idle_timeout_s = 60.0
    # When every slot is taken, a session that has sent nothing for evict_idle_s gives its slot
    # to a newcomer (a slow actor that loses it reconnects). Streams still without a Hello hold
    # no slot; at most max_pending_streams of them wait per process, the oldest giving way.
    c.evict_idle_s = 5.0
    c.max_pending_streams = 64
    # Stream front ends: processes of their own that do every request's work (TLS, token, parsing,
    # checks) and hand the learner process checked rows through shared memory, each step's
    # observations written once, where it is learned from (seedlike/rpc/frontend.py), all on one
    # port. -1: one per four cores (none below four, where their processes would compete with
    # the actors for the cores: RESULTS.md); 0: the gRPC event loop runs in the learner process.
    c.front_ends = -1
    return c


def _batching_and_seats(c: ml_collections.ConfigDict) -> None:
    """server_section's settings of how inference batches form and how many streams connect."""
    # An inference batch takes every request waiting, up to max_batch_rows rows, and closes when
    # every actor that can still send is in it, or batch_timeout_ms after the latest request
    # joined it (longer where front ends spend longer per request: seedlike/server/batcher.py).
    # A batch of every row in flight serializes the server: actors wait while it is gathered,
    # computed and answered, and the server waits while they step. Capped below that, one batch
    # computes while the next is gathered (RESULTS.md, "One learner host with cores to spare"). A
    # bigger request is a batch of its own. With front ends and a few big requests, smaller
    # batches serve more: each batch is one front end's rows, read in place.
    c.max_batch_rows = 256
    # ... and a batch closes at batch_share of the rows the connected actors send per round,
    # together, if that is smaller, but not below min_batch_rows: 4 actors x 64 Atari rows at 64,
    # 16 x 64 at 256, 8 x 8 CartPole at all 64 (seedlike/server/batcher.py; RESULTS.md, "Batches
    # that close at a quarter"). batch_share = 1: only max_batch_rows.
    c.batch_share = 0.25
    c.min_batch_rows = 64
    c.batch_timeout_ms = 5.0
    # Unrolls that may wait for the learner, in whole batches (0 = one batch): with one, acting
    # fills the next batch while the learner trains and then waits (backpressure). More raise
    # throughput when acting is bursty but make data staler.
    c.queue_unrolls = 0
    c.max_actors = 64  # concurrent actor streams
    # Streams one host may hold at once (more are refused, and their actors retry), so a single
    # machine cannot take every slot. Raise it to run more actors than this on one host.
    c.max_streams_per_peer = 32


def _identity_bounds(c: ml_collections.ConfigDict) -> None:
    """server_section's settings of what one actor identity is and may weigh."""
    # What one actor *identity* is (seedlike/rpc/security.py): the name in its certificate
    # (scripts/make_credentials.sh --actors), else its peer host; every stream of one identity
    # counts as one voice. True: the peer host and the actor_id a stream declares, for runs whose
    # actors are all trusted (one's own machine, a private cluster): any client could then be as
    # many identities as it opens streams.
    c.trust_actor_ids = False
    # How much of the loss one identity (all its streams) may weigh (seedlike/server/influence.py).
    # Its unrolls beyond the cap stay in the batch with valid = False (metric unrolls_capped):
    # batches fill at full speed, nothing is refused, but the excess teaches nothing.
    # fair_share_factor: at most this many times the unrolls the median identity delivered in the
    # last fair_window_s seconds (3+ identities; 0: off); max_identity_share: at most this share
    # of each batch (1.0: no such cap; never below an equal split among the connected).
    c.fair_share_factor = 1.0
    c.fair_window_s = 30.0
    # Complete unrolls the learner may hold back, in batches, so that each batch mixes the
    # identities delivering: one actor's request of many envs completes all its unrolls at once,
    # and in arrival order they would fill whole batches alone, where no bound that compares
    # identities in a batch can act (influence.mixed_batch; metric unrolls_held; an identity's
    # unrolls beyond its newest B + hold waiting count in unrolls_capped; 0: arrival order).
    c.mix_hold = 1.0
    # An identity served faster than pace_factor x the other identities' median rows/s (over
    # 5 s, with 3+ identities) gets its replies at that rate: an actor with thousands of envs
    # cannot take the server from the others (seedlike/server/pacing.py; 0: off).
    c.pace_factor = 2.0
    # Unrolls with a step acted more than max_policy_lag policy versions before the newest are
    # kept out of the loss (metric unrolls_stale; 0: no limit): a paced or stalled actor's data.
    c.max_policy_lag = 50
    c.max_identity_share = 1.0
    # An identity's rewards are scaled down (signs and proportions kept) when their mean |reward|
    # per step over fair_window_s exceeds max(reward_floor, reward_scale x the median identity's;
    # with two identities the other's): a minority's flood is brought to the others' scale, a rare
    # large reward an honest actor finds first passes (seedlike/server/influence.py; 0: off).
    # Applied before the algorithm's own reward_clip; metric rewards_scaled.
    c.reward_scale = 2.0
    c.reward_floor = 1.0
    # PPO: advantages of an identity whose policy scores agree more than coherence_tolerance x the
    # median identity's (z; of two, the other's) are scaled to it, and so are those of one whose
    # push lies further from the median's in one batch; summed over fair_window_s, its samples
    # weigh tolerance / z in the loss (train_state.make_prepare, DeviationWindow).
    c.coherence_tolerance = 3.0
    # PPO, PQN: the identities of a run's first probation_cohort_s (from its first learner batch:
    # the actors started with it) weigh 1 in the loss; one that comes later weighs nothing for
    # its first probation_hold_s, then grows in a line to 1 at probation_s after its first batch,
    # and until then teaches PPO's value function nothing (train_state.Probation; metric
    # influence/probation_scale_min; 0: off).
    c.probation_s = 300.0
    c.probation_cohort_s = 10.0
    c.probation_hold_s = 60.0


def check_server(config, need) -> None:
    """What cannot work in `server_section`."""
    c = config.server
    need(c.queue_unrolls >= 0, "server.queue_unrolls must be >= 0")
    need(c.max_actors >= 1, "server.max_actors must be >= 1")
    need(c.max_batch_rows >= 1, "server.max_batch_rows must be >= 1")
    need(0 < c.batch_share <= 1, "server.batch_share must be in (0, 1]")
    need(c.min_batch_rows >= 1, "server.min_batch_rows must be >= 1")
    need(c.max_streams_per_peer >= 1, "server.max_streams_per_peer must be >= 1")
    need(c.evict_idle_s > 0, "server.evict_idle_s must be > 0")
    need(c.max_pending_streams >= 1, "server.max_pending_streams must be >= 1")
    need(0 < c.max_identity_share <= 1, "server.max_identity_share must lie in (0, 1]")
    need(c.fair_share_factor >= 0, "server.fair_share_factor must be >= 0")
    need(c.mix_hold >= 0, "server.mix_hold must be >= 0 (batches of unrolls; 0: arrival order)")
    need(c.fair_window_s > 0, "server.fair_window_s must be > 0")
    need(c.pace_factor >= 0, "server.pace_factor must be >= 0")
    need(c.max_policy_lag >= 0, "server.max_policy_lag must be >= 0")
    need(c.reward_scale >= 0, "server.reward_scale must be >= 0")
    need(c.coherence_tolerance >= 1, "server.coherence_tolerance must be >= 1 (z of honest data)")
    need(c.reward_floor > 0, "server.reward_floor must be > 0")
    need(c.probation_s >= 0, "server.probation_s must be >= 0 (seconds; 0: off)")
    need(c.probation_cohort_s >= 0, "server.probation_cohort_s must be >= 0 (seconds)")
    need(
        c.probation_s <= 0 or 0 <= c.probation_hold_s < c.probation_s,
        f"server.probation_hold_s={c.probation_hold_s} must lie in [0, server.probation_s="
        f"{c.probation_s}) (seconds)",
    )


def transport_section() -> ml_collections.ConfigDict:
    """Mutual TLS plus a run token between actors and the learner (seedlike/rpc/security.py): the
    run's directory made by scripts/make_credentials.sh (the learner's; an actor given it takes
    DIR/actors/actor-<its id>), or an actor's own DIR/actors/NAME (--actors). Empty: plaintext,
    allowed on loopback only."""
    c = ml_collections.ConfigDict()
    c.credentials = ""
    return c


def league_section() -> ml_collections.ConfigDict:
    """Two-player games only: self-play against a pool of past snapshots, and TrueSkill
    evaluation."""
    c = ml_collections.ConfigDict()
    c.sampler = "openai_five"  # latest | openai_five | pfsp | uniform_recent
    c.p_latest = ml_collections.config_dict.placeholder(float)  # None: sampler default
    c.quality_eta = 0.01  # OpenAI Five quality step size
    c.pfsp_weighting = "hard"  # hard: (1 - p_win)^pfsp_p | variance: p_win (1 - p_win)
    c.pfsp_p = 2.0
    c.recent_k = 10  # uniform_recent: over the last k snapshots
    c.snapshot_every = 20  # learner updates between snapshots joining the pool
    c.max_snapshots = 50  # oldest snapshots leave the pool beyond this (0: none leave)
    # On the device (seedlike.ondevice.selfplay) each device's envs are in this many lanes, each
    # meeting one snapshot per update (drawn by the sampler's probabilities), so a reply costs
    # two network applies; more lanes, more snapshots met per update.
    c.device_lanes = 4
    # Payoff matrix (PFSP's win rates; seedlike.league.payoff): each pair's counts are multiplied
    # by payoff_decay before its next result (1.0: every result at full weight; the learner keeps
    # changing, so results against it go stale), and payoff_prior_games pseudo-games at 0.5 keep
    # one lucky result from reading as a certain win (with 1, one win reads 0.75; 0: raw rates).
    c.payoff_decay = 1.0
    c.payoff_prior_games = 1.0
    c.eval_interval_s = 60.0  # TrueSkill evaluation period (0 = no evaluation)
    c.eval_games = 100  # games against each chosen reference per evaluation
    c.eval_opponents = 2  # references of nearest skill played per evaluation
    c.eval_greedy = False  # evaluate the most likely legal move instead of sampling
    c.reference_every = 200  # policy versions between snapshots promoted to references
    c.reference_games = 200  # games against each reference rating a new one
    # A new reference plays the references nearest the learning policy's skill, at most this
    # many (0: all of them, a cost that grows with every reference), and at most max_references
    # snapshot references are kept, the weakest leaving first (0: all; bots always stay).
    c.reference_opponents = 4
    c.max_references = 24
    # Built-in opponents (AlphaStar and TLeague mix fixed bots into the pool): with probability
    # p_bots a new episode's opponent is one of `bots` ("random"; "scripted" for Connect Four).
    c.bots = ()
    c.p_bots = 0.0
    # League roles (AlphaStar; seedlike.league.roles): `python -m seedlike.launch.league` starts one
    # learner per entry of `roles` (main, main_exploiter, league_exploiter), with role_actors[k]
    # actors each, in <logdir>/<role>/, and sets `role` and `role_dir` for each; a plain run has
    # no role (a single-role league). Exploiters join the league (and reset; a league exploiter
    # with probability league_exploiter_reset_p) when they win more than exploit_win_rate of at
    # least exploit_min_games decayed games against their target, or after reset_env_steps of
    # their env steps without (0: never). A role reads the others' new snapshots every
    # peer_refresh_s seconds. role_nice: each role's scheduling niceness (0-19) where the roles
    # share one machine's cores. exploiter_reset: what an exploiter resets to, "initial" (the
    # run's start, AlphaStar's supervised agent) or "main" (the newest main-agent snapshot it
    # holds: a copy of the main agent that then learns only against the league, a best response
    # that starts where its target stands rather than from scratch).
    c.roles = ()
    c.role_actors = ()
    c.role_nice = ()
    c.role = ""
    c.role_dir = ""
    c.exploit_win_rate = 0.7
    c.exploit_min_games = 100.0
    c.reset_env_steps = 0
    c.league_exploiter_reset_p = 0.25
    c.exploiter_reset = "initial"
    c.peer_refresh_s = 10.0
    # Exploiter roles whose actors play the main agent's live policy in shared games: each side's
    # rows go to its own learner (a population of two, the main agent as member 0), so the main
    # agent learns from every game against them instead of only the exploiter (AlphaStar's main
    # exploiters play the live main agents). Such an exploiter judges its exploits on those games,
    # as games against the newest main snapshot it holds.
    c.shared_games = ()
    # Config values for the exploiters' runs only, as "KEY=VALUE" texts (the --config flag
    # syntax), e.g. ("ppo.epochs=1",): exploiters that learn more cheaply leave the main agent
    # more of a shared machine.
    c.exploiter_overrides = ()
    return c


def check_league(config, need) -> None:
    """What cannot work in `league_section`."""
    league = config.league
    need(0 < league.payoff_decay <= 1, "league.payoff_decay must be in (0, 1]")
    need(league.payoff_prior_games >= 0, "league.payoff_prior_games must be >= 0")
    roles = tuple(league.roles)
    need(
        all(r in ROLES for r in roles) and len(set(roles)) == len(roles),
        f"league.roles={roles} must name distinct roles of {ROLES}",
    )
    need(not roles or "main" in roles, "league.roles needs a main agent: add 'main'")
    need(
        not league.role_actors or len(league.role_actors) == len(roles),
        f"league.role_actors={tuple(league.role_actors)} needs one actor count per entry of "
        f"league.roles={roles} (or () for --num_actors each)",
    )
    need(all(int(n) >= 1 for n in league.role_actors), "league.role_actors must be >= 1 each")
    need(
        not league.role_nice or len(league.role_nice) == len(roles),
        f"league.role_nice={tuple(league.role_nice)} needs one niceness per entry of "
        f"league.roles={roles} (or ())",
    )
    need(all(0 <= int(n) <= 19 for n in league.role_nice), "league.role_nice must be in 0..19")
    need(
        league.role in ("", *ROLES),
        f"league.role={league.role!r} must be one of {ROLES}, or '' (a single-role league)",
    )
    need(
        not league.role or bool(league.role_dir),
        "league.role needs league.role_dir, the directory the roles share "
        "(python -m seedlike.launch.league sets both)",
    )
    shared = tuple(league.shared_games)
    need(
        all(r in roles and r != "main" for r in shared) and len(set(shared)) == len(shared),
        f"league.shared_games={shared} must name distinct exploiter roles of league.roles={roles}",
    )
    for override in map(str, league.exploiter_overrides):
        need(
            "=" in override and not override.startswith("="),
            f"league.exploiter_overrides: {override!r} is not KEY=VALUE (e.g. 'ppo.epochs=1')",
        )
    need(0 < league.exploit_win_rate <= 1, "league.exploit_win_rate must be in (0, 1]")
    need(league.exploit_min_games >= 0, "league.exploit_min_games must be >= 0")
    most = 1.0 / (1.0 - league.payoff_decay) if league.payoff_decay < 1 else float("inf")
    need(
        league.exploit_min_games < most,
        f"league.exploit_min_games={league.exploit_min_games} is never reached: with "
        f"league.payoff_decay={league.payoff_decay} a pair's games add up to at most {most:.0f}; "
        "lower it or raise the decay",
    )
    need(league.reset_env_steps >= 0, "league.reset_env_steps must be >= 0 (0: no time limit)")
    need(
        0 <= league.league_exploiter_reset_p <= 1,
        "league.league_exploiter_reset_p must be in [0, 1]",
    )
    need(
        league.exploiter_reset in EXPLOITER_RESETS,
        f"league.exploiter_reset={league.exploiter_reset!r} must be one of {EXPLOITER_RESETS}",
    )
    need(league.peer_refresh_s > 0, "league.peer_refresh_s must be > 0")


def anneal_section() -> ml_collections.ConfigDict:
    """Bring an environment change in gradually after surgery (OpenAI Five App. B): the share of
    new episodes with the change ramps from 0 to 1 over `versions` policy versions from
    start_version; without it, new_actions are illegal and new_obs_features (indices into "obs")
    read 0. new_actions are columns of the legal mask: for a factorized action, [n_1 + ... +
    n_H], so a head's new choices (surgery writes them in its report's "actions")."""
    c = ml_collections.ConfigDict()
    c.start_version = 0
    c.versions = 0  # policy versions the ramp takes; 0: no annealing
    c.new_actions = ()
    c.new_obs_features = ()
    return c


def actor_section() -> ml_collections.ConfigDict:
    """Actors: reconnecting, and what they send."""
    c = ml_collections.ConfigDict()
    c.backoff_initial_s = 0.1  # first reconnect wait; doubles up to backoff_max_s
    c.backoff_max_s = 5.0
    # An actor that has never reached its server exits (status 1) after first_connect_s of
    # failed attempts (a wrong address, a learner that did not start); one that lost a server it
    # had reached waits give_up_s for it to come back (a restart, a preemption).
    c.first_connect_s = 60.0
    c.give_up_s = 300.0
    # Stacked observations (Atari's four frames) sent once: a row whose stack continues its
    # seat's previous one carries only its newest frame, a quarter of an Atari row's bytes, and
    # the server rebuilds the stack (seedlike/rpc/frames.py). "auto": uint8 [S, H, W] keys with
    # 2 <= S <= 16 and H, W >= 32; "": every row whole; or comma-separated observation keys.
    c.stack_once = "auto"
    return c


def log_section() -> ml_collections.ConfigDict:
    """Metrics rows, W&B and TensorBoard."""
    c = ml_collections.ConfigDict()
    c.interval_s = 10.0  # one metrics row per interval
    # Each connected actor identity's last episode_window episodes: episode_return_mean is their
    # plain mean (what other frameworks report under that name), episode_return_robust the lower
    # median over identities of each one's mean, which no minority of actors can steer; decisions
    # (stop_at_return, PBT's and sweeps' defaults) read the robust one.
    c.episode_window = 20
    # stop_at_return ends the run once more than half of the connected identities' returns have
    # held it for stop_hold_s (an actor that connects first cannot end the run alone).
    c.stop_hold_s = 10.0
    c.wandb_mode = "offline"  # offline | online | disabled (WANDB_MODE overrides)
    c.wandb_project = "seedlike"
    # W&B group of the run ("": none); python -m seedlike.launch.sweep sets the sweep's name, so a
    # sweep's runs appear together.
    c.wandb_group = ""
    # Also write TensorBoard event files (<logdir>/tensorboard; `tensorboard --logdir runs`).
    c.tensorboard = False
    # When set, episode_success_rate = fraction of episodes whose return exceeds it (MiniGrid: 0).
    c.success_threshold = ml_collections.config_dict.placeholder(float)
    return c


def check_log(config, need) -> None:
    need(config.log.stop_hold_s >= 0, "log.stop_hold_s must be >= 0")
    need(
        config.log.wandb_mode in ("offline", "online", "disabled"),
        "log.wandb_mode must be offline|online|disabled",
    )


def distributed_section() -> ml_collections.ConfigDict:
    """Several learner hosts as one learner (seedlike/runtime/distributed.py; docs/scaling-out.md,
    "Several learner hosts"): start learner.py on each host with the same coordinator (process
    0's host and a free port there) and its own process_id. Each host serves its own actors and
    learns from batch_unrolls / num_processes of their unrolls per update; gradients are averaged
    over every host's devices. Process 0 writes checkpoints and the run's metrics."""
    c = ml_collections.ConfigDict()
    c.coordinator = ""  # host:port; "" = one learner process
    c.num_processes = 1
    c.process_id = 0
    c.timeout_s = 300  # how long a process waits for the others to join
    # A learner process silent this long is gone: the others save and stop with one line
    # (seedlike.runtime.distributed.PeerWatch). Below JAX's own 100 s heartbeat, which would abort
    # them.
    c.peer_timeout_s = 30.0
    return c


def check_distributed(config, need) -> None:
    """What cannot work in `distributed_section`, and the batch's split over its processes."""
    d = config.distributed
    need(d.num_processes >= 1, "distributed.num_processes must be >= 1")
    need(
        0 <= d.process_id < d.num_processes,
        f"distributed.process_id={d.process_id} must lie in [0, {d.num_processes})",
    )
    host, _, port = d.coordinator.rpartition(":")
    need(
        d.num_processes == 1 or (bool(host) and port.isdigit() and 0 < int(port) < 65536),
        f"distributed.coordinator={d.coordinator!r} must be host:port (process 0's host and a "
        "free port there) when distributed.num_processes > 1",
    )
    need(
        config.batch_unrolls % d.num_processes == 0,
        f"batch_unrolls={config.batch_unrolls} must be divisible by "
        f"distributed.num_processes={d.num_processes} (each learner host fills its share)",
    )


def checkpoint_section() -> ml_collections.ConfigDict:
    """orbax checkpoints of the learner (seedlike/checkpoint.py)."""
    c = ml_collections.ConfigDict()
    # Also saved at the end and on SIGTERM/SIGINT; a crash (SIGKILL, lost host) loses at most this
    # much. orbax writes in the background: a save stops the learner loop only for the copy to
    # host memory and the digest (RESULTS.md, "Figures that lived in code comments").
    c.interval_s = 60.0
    c.max_to_keep = 3
    # A stop request (SIGTERM, Ctrl-C) ends the learner within stop_grace_s: an update in
    # progress is abandoned between epochs (one learner process; several finish it together),
    # the last complete version is saved, and if that has not happened by then the learner exits
    # without it (the previous checkpoint stands). A second signal, 2 s or more later, exits.
    c.stop_grace_s = 60.0
    # Resume even when this config changes what the run's parameters mean (MEANING_KEYS differ
    # from the config stored with its checkpoint). Surgery is the way to change a network.
    c.force_resume = False
    return c


# envs per core relative to the config's env.num_envs, for actors given their cores: an actor's one
# Python thread, not its envs, bounds it beyond about two cores, and more envs per actor buy
# throughput only with staler unrolls (benchmarks/RESULTS.md, "Breakout on an accelerator host",
# run 4).
ENVS_PER_CORE = 8


def actor_sizing(env, cores: int, given=()) -> dict[str, int]:
    """env.num_envs / batch_envs / num_threads for an actor that may use `cores` cores.

    An envpool thread per core, the config's num_envs x ENVS_PER_CORE per core, and (envpool) two
    halves in flight, so one half steps while the other's actions are on their way. An actor's
    one Python thread keeps about two cores of envs busy: give more cores to more actors.
    Keys in `given` (e.g. "num_envs") are left alone.
    """
    cores = max(1, int(cores))
    out = {"num_threads": cores, "num_envs": int(env.num_envs) * ENVS_PER_CORE * cores}
    from seedlike.envs import BACKENDS

    backend = BACKENDS.get(env.backend)  # an unknown one is validate's to report
    if backend is not None and backend.async_steps:
        out["batch_envs"] = out["num_envs"] // 2
    return {k: v for k, v in out.items() if k not in given}


# Config keys that change what trained parameters mean: the whole network section, and which
# observations reach it in what order. A run resumed with other values would run its parameters on
# inputs or layers they were not trained for (network.activation relu on a tanh run: return 500 ->
# 43). env.name may change (scripts/curriculum.sh continues a run on envs with the same spaces).
MEANING_KEYS = (
    "network",
    "env.obs_indices",
    "env.obs_keys",
    "env.agent_id",
    "env.teammates",
    "env.mission_tokens",
    "env.blank_mission",
)


def _flatten(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, path + "."))
        else:
            out[path] = value
    return out


def meaning_changes(stored: dict, config) -> list[str]:
    """'key: old -> new' for every MEANING_KEYS value that `config` changes from the `stored` one
    (a run's config as its checkpoint keeps it, JSON). Keys one side lacks (a run from before
    they existed) are not compared."""
    new = _flatten(json.loads(config.to_json()))
    old = _flatten(stored)
    return [
        f"{key}: {old[key]!r} -> {new[key]!r}"
        for key in sorted(old.keys() & new.keys())
        if any(key == k or key.startswith(k + ".") for k in MEANING_KEYS) and old[key] != new[key]
    ]


class ConfigError(ValueError):
    """A setting that cannot work; entrypoints print the message alone, without a traceback."""


# Each section's checks, beside its defaults above, in the order their problems are reported:
# fn(config, need), need(ok, message) raising the ConfigError of the first that fails.
SECTION_CHECKS = (
    check_run, check_env_section, check_algorithm, check_optimizer, check_teams,
    check_population, check_curriculum, check_server, check_league, check_log,
    check_distributed,
)  # fmt: skip


def check_resumed(config, meta: dict, logdir: str) -> None:
    """Refuses to resume a run with a config that changes what its parameters mean."""
    changes = meaning_changes(meta.get("config") or {}, config)
    if not changes or config.checkpoint.force_resume:
        for change in changes:
            logging.warning("resuming with a changed config (checkpoint.force_resume): %s", change)
        return
    raise ConfigError(
        f"{logdir} was trained with another config: {'; '.join(changes)}. Resume with its own "
        f"(--config=configs/of_run.py:{logdir}), change a network by surgery "
        "(docs/surgery.md), or pass --config.checkpoint.force_resume=True"
    )


def validate(config) -> None:
    """Raises ConfigError naming the setting that cannot work (SECTION_CHECKS), after setting
    what "auto" stands for (`resolve`). The network section's checks against the env's spaces
    are `validate_network`'s, where the spaces are known."""

    def need(ok: bool, message: str):
        if not ok:
            raise ConfigError(f"invalid config: {message}")

    for check in SECTION_CHECKS:
        check(config, need)


def resolve(config) -> None:
    """Sets the settings whose "auto" depends on another: network.policy_head from the
    algorithm's record (`Algorithm.head`, else "categorical"). validate() calls it; so does code
    that builds a network from a config it has not validated (surgery's new config)."""
    if config.network.policy_head == "auto":
        config.network.policy_head = ALGORITHMS[config.algo].head or "categorical"


def _head_problems(config) -> list[str]:
    """Whether network.policy_head is the head the algorithm learns."""
    algo, head = config.algo, config.network.policy_head
    wanted = ALGORITHMS[algo].head
    if wanted and head != wanted:
        return [
            f"algo={algo!r} learns the {wanted!r} head: set network.policy_head='auto' (or "
            f"{wanted!r}), not {head!r}"
        ]
    declared = {a.head: name for name, a in ALGORITHMS.items() if a.head}
    if not wanted and head in declared:
        return [
            f"algo={algo!r} learns a policy: network.policy_head={head!r} is the head of "
            f"algo={declared[head]!r} and the others that declare it; set 'auto'"
        ]
    return []


def validate_network(config, spec) -> None:
    """Raises ConfigError naming the first network setting that does not fit the env's spaces
    `spec` (networks.build.network_problems: every such check)."""
    from networks.build import network_problems

    problems = network_problems(config.network, spec)
    if problems:
        raise ConfigError(f"invalid config: {problems[0]}")


def advice(config, spec, backend: str = "") -> list[str]:
    """Settings that work but are probably not what was meant (the learner logs them once).
    `backend`: JAX's default backend on the learner ("cpu", "gpu", "tpu")."""
    out = []
    if backend == "cpu" and config.cpu_variant:
        out.append(
            "this config is sized for an accelerator and this learner has only CPUs, where it "
            "would take days (benchmarks/RESULTS.md, 'Generalization'); for a CPU use "
            f"--config={config.cpu_variant}"
        )
    if spec.continuous and config.algo == "ppo" and config.ppo.ent_coef > 0:
        out.append(
            f"{spec.name} has continuous actions and this config's settings are for discrete "
            f"ones (ppo.ent_coef={config.ppo.ent_coef:g}); configs/mujoco_ppo.py is tuned for "
            "continuous control, with any backend: --config=configs/mujoco_ppo.py "
            f"--config.env.backend={config.env.backend} --config.env.name={spec.name}"
        )
    from networks.torsos import CNN_TORSOS

    if config.network.torso not in CNN_TORSOS:
        for key, array in spec.observation.items():
            if (
                array.dtype == "uint8"
                and len(array.shape) >= 2
                and array.shape[-1] * array.shape[-2] >= 256
            ):
                inputs = int(np.prod(array.shape))
                out.append(
                    f"observation {key!r} is an image ({array}) and network.torso="
                    f"{config.network.torso!r} reads it with dense layers ({inputs:,} inputs "
                    "each, slow and weak); set --config.network.torso=nature_cnn (or "
                    "impala_cnn, small_cnn) and network.image_key"
                )
    return out


def env_spec(config):
    """The EnvSpec of the config's env; an env that cannot be described is a ConfigError."""
    from seedlike.envs import make_env_spec

    try:
        return make_env_spec(config.env)
    except (ValueError, TypeError) as e:  # TypeError: an env.kwargs key the env does not take
        raise ConfigError(f"invalid config: {e}") from None


def load_config_file(path: str) -> ml_collections.ConfigDict:
    """Loads get_config() from a configs/*.py file, or get_config(arg) for `file.py:arg` (what
    --config=path does in the entrypoints)."""
    import importlib.util
    import os

    path, sep, arg = path.partition(":")
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(arg) if sep else module.get_config()


def section(key: str, /, **values) -> ml_collections.ConfigDict:
    """base_config()'s section `key` with `values` set: a whole section for code that builds one
    itself (a match between two policies, tests), so every reader finds every key at its
    default and none writes a default of its own."""
    c = base_config()[key]
    c.update(values)
    return c


# Settings renamed since an earlier release, old dotted key -> new: a config stored under the old
# name is read under the new (from_dict), and a --config flag or sweep key of the old name is taken
# with a warning (check_override_flags). The old names stop working in the next release.
RENAMED_KEYS = {
    "server.max_actor_share": "server.max_identity_share",
    "env.batch_size": "env.batch_envs",
    "rainbow.batch_size": "rainbow.batch_transitions",
    "r2d2.batch_size": "r2d2.batch_sequences",
    "anneal.updates": "anneal.versions",
}


def renamed(key: str) -> str:
    """A dotted config key under its current name (RENAMED_KEYS)."""
    return RENAMED_KEYS.get(key, key)


def from_dict(values: dict) -> ml_collections.ConfigDict:
    """base_config() with `values` (a config as stored with a checkpoint) laid over it: fields keep
    their types (tuples, typed placeholders), so --config.x overrides still work; settings stored
    under an older name (RENAMED_KEYS) take their new one."""
    values = json.loads(json.dumps(values))  # a copy the renames may change
    for old, new in RENAMED_KEYS.items():
        (*path, last), (*new_path, new_last) = old.split("."), new.split(".")
        node = values
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and last in node:
            value = node.pop(last)
            target = values
            for part in new_path:
                target = target.setdefault(part, {})
            target.setdefault(new_last, value)

    def merge(node, values):
        for key, value in values.items():
            if isinstance(value, dict) and isinstance(node.get(key), ml_collections.ConfigDict):
                merge(node[key], value)
            elif isinstance(value, dict):
                node[key] = ml_collections.ConfigDict(value)
            else:
                node[key] = tuple(value) if isinstance(value, list) else value

    config = base_config()
    merge(config, values)
    return config
