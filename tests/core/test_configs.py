"""Every shipped config loads, validates and builds its environment, network and learner."""

import glob
import json
import os
import re
import subprocess
import sys

import jax
import pytest

from networks import make_network
from seedlike.algos import ALGORITHMS
from seedlike.checkpoint import Checkpointer
from seedlike.cli import check_override_flags
from seedlike.config import (
    ConfigError,
    actor_sizing,
    base_config,
    load_config_file,
    meaning_changes,
    validate,
)
from seedlike.envs import make_env_spec
from seedlike.learning import train_state as ts
from seedlike.teams import Teams
from tests.procs import NEEDS_QT, ROOT, has_qt5

# of_run.py takes a run (tested below); variants are file.py:argument.
CONFIGS = sorted(
    [p for p in glob.glob(os.path.join(ROOT, "configs", "*.py")) if not p.endswith("of_run.py")]
    + [os.path.join(ROOT, "configs", "procgen_coinrun.py:cpu")]
)


def test_every_config_file_is_found():
    names = {os.path.basename(p) for p in CONFIGS}
    assert {"cartpole_ppo.py", "connect4_selfplay.py", "atari_ppo.py"} <= names


QT = has_qt5()


def _param(path):
    procgen = "procgen" in os.path.basename(path)
    marks = [pytest.mark.skipif(procgen and not QT, reason=NEEDS_QT)]
    return pytest.param(path, marks=marks, id=os.path.basename(path))


@pytest.mark.parametrize("path", [_param(p) for p in CONFIGS])
def test_config_builds_on_two_devices(path):
    config = load_config_file(path)
    assert config.is_locked, "configs must lock so misspelled keys fail"
    validate(config)
    spec = make_env_spec(config.env)
    assert spec.name == config.env.name
    Teams.from_config(config.teams, spec)  # teams.sizes fit the env's agents
    network = make_network(config.network, spec)
    params = jax.eval_shape(network.init, jax.random.key(0))
    pointers = network.module.head_spec.pointer_heads  # heads whose logits come from pointers_<i>
    dense = sum(n for i, n in enumerate(spec.head_sizes) if i not in pointers)
    head = network.module.head_spec
    if dense and head.q:  # action values: A x atoms outputs (networks.heads.QHead)
        layer = params["params"]["policy_head"]["advantage" if head.dueling else "q"]
        assert layer["kernel"].shape[-1] == dense * head.atoms
    elif dense:
        logits = params["params"]["policy_head"]["logits"]["kernel"]
        assert logits.shape[-1] == dense
    if spec.continuous:
        mean = params["params"]["gaussian_head"]["mean"]["kernel"]
        assert mean.shape[-1] == spec.continuous
    # Batch and minibatches split over the suite's two forced devices (raises if not).
    learner = ALGORITHMS[config.algo].learner()(
        config, network, window_s=config.server.fair_window_s
    )
    assert learner.num_devices == 2


@pytest.mark.slow  # runs the entrypoint in a process of its own
@pytest.mark.parametrize("entrypoint", ["learner.py", "actor.py"])
def test_an_unknown_env_is_one_line_naming_close_tasks(entrypoint, tmp_path):
    args = [sys.executable, entrypoint, "--config.env.name=CartPol-v1"]
    if entrypoint == "learner.py":
        args.append(f"--logdir={tmp_path / 'r'}")
    done = subprocess.run(
        args,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # The actor's 2: restarting it cannot help (scripts/train.sh then stops the job).
    code = 2 if entrypoint == "actor.py" else 1
    assert done.returncode == code and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith(
            "error: invalid config: env.name='CartPol-v1' is not an envpool task id. "
            "Did you mean CartPole-v1"
        )
    )
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "algo, setting, message",
    [
        ("ppo", {"gamma": 0.0}, "ppo.gamma=0.0 must lie in (0, 1]"),
        ("ppo", {"gae_lambda": 1.5}, "ppo.gae_lambda=1.5 must lie in [0, 1]"),
        ("ppo", {"num_minibatches": 0}, "ppo.epochs and ppo.num_minibatches must be >= 1"),
        ("vtrace", {"clip_c": 0.0}, "vtrace.clip_rho, vtrace.clip_pg_rho and vtrace.clip_c"),
        ("vtrace", {"normalized_reward_clip": -1.0}, "vtrace.normalized_reward_clip must be"),
    ],
)
def test_each_algorithm_checks_its_own_section(algo, setting, message):
    """The section of the algorithm in use is checked by its record (seedlike.algos); the other
    section's settings are not read."""
    config = load_config_file(os.path.join(ROOT, "configs", "cartpole_ppo.py"))
    config.algo = algo
    config[algo].update(setting)
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate(config)
    config.algo = "vtrace" if algo == "ppo" else "ppo"
    validate(config)


def test_the_algorithm_records_are_the_configs_sections_and_the_losses_metrics():
    from seedlike.algos import ALGORITHMS
    from seedlike.config import base_config

    assert tuple(ALGORITHMS) == ("ppo", "vtrace", "rainbow", "r2d2", "pqn")
    config = base_config()
    learners = {}
    for name, algorithm in ALGORITHMS.items():
        assert config[name].to_dict() == algorithm.defaults().to_dict()
        learners[name] = algorithm.learner().__name__
        module = algorithm.load()
        # The batch learner reads advantages too; the replay's targets come from its samples.
        assert callable(module.make_loss)
        assert learners[name] == "ReplayLearner" or callable(module.advantages)
    assert learners == {
        "ppo": "Learner", "vtrace": "Learner", "rainbow": "ReplayLearner",
        "r2d2": "ReplayLearner", "pqn": "Learner",
    }  # fmt: skip
    heads = {n: a.head for n, a in ALGORITHMS.items() if a.head}
    assert heads == {"rainbow": "q", "r2d2": "q", "pqn": "q"}
    # V-trace computes its targets inside the loss; PPO's come from GAE beforehand.
    assert ALGORITHMS["vtrace"].load().advantages(config.vtrace) is None
    assert callable(ALGORITHMS["ppo"].load().advantages(config.ppo))


@pytest.mark.parametrize(
    "setting, message",
    [
        ({"num_processes": 2, "coordinator": "host0"}, "distributed.coordinator='host0' must be"),
        ({"num_processes": 2, "coordinator": "h:port"}, "distributed.coordinator='h:port' must be"),
        ({"num_processes": 2, "coordinator": "h:1", "process_id": 2}, "process_id=2 must lie in"),
        ({"num_processes": 3, "coordinator": "h:1"}, "batch_unrolls=32 must be divisible by"),
    ],
)
def test_distributed_settings_that_cannot_work_are_refused(setting, message):
    """A bad port reaches JAX's coordinator as a segfault, a join timeout as an abort: the config
    is checked before either can happen."""
    config = load_config_file(os.path.join(ROOT, "configs", "cartpole_ppo.py"))
    config.distributed.update(setting)
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate(config)


@pytest.mark.parametrize(
    "setting, message",
    [
        ({"network.policy_head": "categorical"}, "set network.policy_head='auto' (or 'q')"),
        ({"network.normalize_obs": True}, "set network.normalize_obs=False"),
        ({"rainbow.normalize_rewards": True}, "set rainbow.normalize_rewards=False"),
        ({"network.core": "lstm"}, "needs sequence replay with burn-in; set algo='r2d2'"),
        ({"rainbow.replay_ratio": 0.5}, "= 0.5 sgd steps per batch: it must be a whole number"),
        (
            {"rainbow.capacity": 100, "rainbow.min_fill": 0},
            "rainbow.capacity=100 must hold one learner batch",
        ),
    ],
)
def test_replay_settings_that_cannot_work_are_refused(setting, message):
    config = load_config_file(os.path.join(ROOT, "configs", "cartpole_rainbow.py"))
    for key, value in setting.items():
        section, _, field = key.rpartition(".")
        config[section][field] = value
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate(config)
    config = load_config_file(os.path.join(ROOT, "configs", "cartpole_rainbow.py"))
    config.rainbow.replay_ratio = 3.0  # 3 x 128 steps / 128 per sgd step: 3, a whole number
    validate(config)


@pytest.mark.parametrize(
    "setting, message",
    [
        ({"r2d2.burn_in": 40}, "r2d2.burn_in=40 leaves no step of a 40-step sequence"),
        ({"r2d2.overlap": 40}, "r2d2.overlap=40 must lie in [0, 39]"),
        ({"network.atoms": 51}, "set network.atoms=1 and network.noisy=False"),
        ({"r2d2.replay_ratio": 4.0}, "/ 1280 steps per sgd step (r2d2.batch_sequences=32)"),
    ],
)
def test_r2d2_settings_that_cannot_work_are_refused(setting, message):
    config = load_config_file(os.path.join(ROOT, "configs", "cartpole_pomdp_r2d2.py"))
    for key, value in setting.items():
        section, _, field = key.rpartition(".")
        config[section][field] = value
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate(config)
    config = load_config_file(os.path.join(ROOT, "configs", "cartpole_pomdp_r2d2.py"))
    config.network.core = "none"  # the memoryless control is an R2D2 config too
    validate(config)


def test_of_run_is_the_config_a_run_was_trained_with(tmp_path):
    """configs/of_run.py:RUN lays a checkpoint's stored config over the defaults, so its fields
    keep their types for overrides; a path without a run is a one-line exit."""
    import json

    from seedlike.checkpoint import Checkpointer
    from seedlike.learning import train_state as ts

    config = load_config_file(os.path.join(ROOT, "configs", "coins_teams.py"))
    network = make_network(config.network, make_env_spec(config.env))
    state = ts.init_train_state(network, ts.make_optimizer(config.optimizer), jax.random.key(0))
    checkpointer = Checkpointer(str(tmp_path / "run" / "checkpoints"))
    checkpointer.save(1, state, {"config": json.loads(config.to_json())})
    checkpointer.close()
    loaded = load_config_file(os.path.join(ROOT, "configs", f"of_run.py:{tmp_path / 'run'}"))
    assert loaded.is_locked and loaded.to_dict() == config.to_dict()
    assert loaded.teams.sizes == (4, 4) and isinstance(loaded.teams.sizes, tuple)
    loaded.unlock()
    loaded.log.success_threshold = 0.5  # a typed placeholder, not a None field
    with pytest.raises(SystemExit, match="of_run.py:.*nowhere: no run or checkpoint"):
        load_config_file(os.path.join(ROOT, "configs", f"of_run.py:{tmp_path / 'nowhere'}"))


def test_env_kwargs_come_from_flags_too():
    """ml_collections cannot add keys: a --config.env.kwargs.NAME flag the config does not declare
    is taken out of argv and added to the parsed config, its value read as a literal."""
    from seedlike.cli import add_env_kwargs, check_override_flags

    path = os.path.join(ROOT, "configs", "coins_teams.py")
    argv = ["learner.py", f"--config={path}", "--config.env.kwargs.max_steps=50",
            "--config.env.kwargs.size=7", "--config.seed=3"]  # fmt: skip
    extra = check_override_flags(argv, path)
    assert extra == ["--config.env.kwargs.max_steps=50", "--config.env.kwargs.size=7"]
    assert argv == ["learner.py", f"--config={path}", "--config.seed=3"]
    config = load_config_file(path)
    add_env_kwargs(config, extra)
    assert config.env.kwargs.max_steps == 50 and config.env.kwargs.size == 7
    from seedlike.envs import make_env

    env = make_env(config.env, make_env_spec(config.env), seed=0)  # the env takes them
    assert env._envs[0].max_steps == 50 and env._envs[0].size == 7


@pytest.mark.slow  # 3 s or more on 2 cores: in the whole suite, not --fast
@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--config=configs/cartpol_ppo.py"],
            "error: --config=configs/cartpol_ppo.py: no such file",
        ),
        (["--config.env.nmae=x"], "error: unknown config key 'env.nmae' in --config.env.nmae"),
        (["--config.nework.x=1"], "known keys there: actor, algo, anneal, batch_unrolls"),
        (["--config.network.torso=nature_cnn"], "network.torso='nature_cnn' needs a [H, W, C]"),
    ],
)
def test_a_bad_config_flag_is_one_line_before_anything_starts(args, message, tmp_path):
    done = subprocess.run(
        [sys.executable, "learner.py", f"--logdir={tmp_path / 'r'}", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1 and done.stderr.strip().count("\n") == 0, done.stderr
    assert message in done.stderr and not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "flag, message",
    [
        ("--config.total_env_steps=abc", "not a number: the setting is a whole number"),
        ("--config.total_env_steps=1e6", "not a whole number: write 1000000"),
        ("--config.network.normalize_obs=yes", "not a boolean: write true or false"),
        ("--config.optimizer.learning_rate=fast", "not a number: the setting is a float"),
        ("--config.network.core_size=2.5", "not a whole number ("),
    ],
)
def test_a_config_value_of_the_wrong_type_is_one_line(flag, message):
    with pytest.raises(SystemExit) as done:
        check_override_flags(["learner.py", flag], "configs/cartpole_ppo.py")
    assert str(done.value).startswith(f"error: {flag}: {message}"), done.value
    assert "configs/cartpole_ppo.py has " in str(done.value)


@pytest.mark.parametrize(
    "flag",
    ["--config.total_env_steps=1_000", "--config.optimizer.learning_rate=1",
     "--config.network.normalize_obs=False", "--config.network.cnn_channels=(16,32)"],
)  # fmt: skip
def test_config_values_that_parse_pass(flag):
    assert check_override_flags(["learner.py", flag], "configs/cartpole_ppo.py") == []


@pytest.mark.parametrize(
    "arg, line",
    [
        ("--num_actor=3", "error: unknown flag --num_actor: did you mean --num_actors?"),
        ("--total_env_steps=20000", "error: --total_env_steps is a config setting: write "
         "--config.total_env_steps=20000"),
        ("--log_dir=runs/typo4", "error: unknown flag --log_dir: absl's own flag (its log files' "
         "folder), not this command's; did you mean --logdir?"),
    ],
)  # fmt: skip
def test_a_mistyped_train_sh_flag_names_the_flag_meant(tmp_path, arg, line):
    done = subprocess.run(
        ["scripts/train.sh", arg, f"--logdir={tmp_path / 'r'}"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={**os.environ, "SEEDLIKE_PYTHON": sys.executable},
    )  # fmt: skip
    assert done.returncode == 2 and not (tmp_path / "r").exists(), done.stderr
    assert done.stderr.strip() == line


def test_images_read_by_dense_layers_get_advice():
    from seedlike.config import advice

    config = load_config_file(os.path.join(ROOT, "configs", "atari_ppo.py"))
    assert advice(config, make_env_spec(config.env)) == []
    config.network.torso = "mlp"
    (line,) = advice(config, make_env_spec(config.env))
    assert "'obs' is an image (uint8[4, 84, 84])" in line and "network.torso=nature_cnn" in line


def test_a_continuous_env_on_a_discrete_config_is_pointed_to_the_mujoco_config():
    from seedlike.config import advice

    config = load_config_file(os.path.join(ROOT, "configs", "gymnasium_ppo.py"))
    config.env.name = "Pendulum-v1"
    (line,) = advice(config, make_env_spec(config.env))
    assert line.endswith(
        "--config=configs/mujoco_ppo.py --config.env.backend=gymnasium "
        "--config.env.name=Pendulum-v1"
    )
    mujoco = load_config_file(os.path.join(ROOT, "configs", "mujoco_ppo.py"))
    mujoco.env.backend, mujoco.env.name = "gymnasium", "Pendulum-v1"
    assert advice(mujoco, make_env_spec(mujoco.env)) == []


def test_actor_sizing_follows_the_cores_and_leaves_given_values():
    atari = load_config_file(os.path.join(ROOT, "configs", "atari_ppo.py")).env
    # 2 cores: the measured 8 x 64 asynchronous setup of RESULTS ("Breakout on an accelerator
    # host", run 4) for Atari's 4 envs per actor; 1 core: its 16 x 32 row.
    assert actor_sizing(atari, 2) == {"num_threads": 2, "num_envs": 64, "batch_envs": 32}
    assert actor_sizing(atari, 1) == {"num_threads": 1, "num_envs": 32, "batch_envs": 16}
    assert actor_sizing(atari, 8, given={"num_envs", "num_threads"}) == {"batch_envs": 128}
    coins = load_config_file(os.path.join(ROOT, "configs", "coins_teams.py")).env
    assert "batch_envs" not in actor_sizing(coins, 4)  # PettingZoo steps synchronously


def test_changes_that_alter_what_parameters_mean_are_named():
    config = load_config_file(os.path.join(ROOT, "configs", "cartpole_ppo.py"))
    stored = json.loads(config.to_json())
    config.network.activation = "relu"
    config.env.obs_indices = (1, 0, 2, 3)
    config.env.name = "CartPole-v0"  # same spaces: scripts/curriculum.sh changes envs like this
    config.optimizer.learning_rate = 1e-3
    assert meaning_changes(stored, config) == [
        "env.obs_indices: [] -> [1, 0, 2, 3]",
        "network.activation: 'tanh' -> 'relu'",
    ]
    del stored["network"]["activation"]  # a run from before the key existed
    assert meaning_changes(stored, config) == ["env.obs_indices: [] -> [1, 0, 2, 3]"]


@pytest.mark.slow  # runs learner.py
def test_resuming_with_a_config_that_changes_the_network_is_refused_in_one_line(tmp_path):
    config = load_config_file(os.path.join(ROOT, "configs", "cartpole_ppo.py"))
    network = make_network(config.network, make_env_spec(config.env))
    state = ts.init_train_state(network, ts.make_optimizer(config.optimizer), jax.random.key(0))
    meta = {"env_steps": 100, "episodes": 0, "config": json.loads(config.to_json())}
    checkpointer = Checkpointer(str(tmp_path / "run" / "checkpoints"))
    checkpointer.save(0, state, meta)
    checkpointer.wait()

    def learner(*flags):
        return subprocess.run(
            [sys.executable, "learner.py", f"--logdir={tmp_path / 'run'}", "--port=0",
             "--config=configs/cartpole_ppo.py", "--config.total_env_steps=100", *flags],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    done = learner("--config.network.activation=relu")
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "was trained with another config: network.activation: 'tanh' -> 'relu'" in last
    assert "--config.checkpoint.force_resume=True" in last
    # Forced, it resumes (and, its 100 env steps done, stops at once).
    done = learner("--config.network.activation=relu", "--config.checkpoint.force_resume=True")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "resuming with a changed config" in done.stderr


def test_a_config_sized_for_an_accelerator_names_its_cpu_variant_on_a_cpu_learner():
    from seedlike.config import advice
    from seedlike.types import EnvSpec

    spec = EnvSpec("CoinrunEasy-v0", {}, num_actions=15)  # advice here reads no observation
    path = os.path.join(ROOT, "configs", "procgen_coinrun.py")
    paper, cpu = load_config_file(path), load_config_file(path + ":cpu")
    (line,) = advice(paper, spec, "cpu")
    assert "sized for an accelerator" in line and line.endswith(
        "--config=configs/procgen_coinrun.py:cpu"
    )
    assert advice(paper, spec, "gpu") == [] == advice(cpu, spec, "cpu")


def _renamed():
    from seedlike.config import RENAMED_KEYS

    return sorted(RENAMED_KEYS.items())


@pytest.mark.parametrize("old, new", _renamed(), ids=[old for old, _ in _renamed()])
def test_a_renamed_setting_is_read_under_its_new_name_from_runs_and_flags(old, new, capsys):
    from seedlike.cli import check_override_flags
    from seedlike.config import from_dict

    (old_section, old_key), (section, key) = old.rsplit(".", 1), new.rsplit(".", 1)
    default = base_config()[section][key]
    value = default / 2 if isinstance(default, float) else default + 1
    stored = base_config().to_dict()
    del stored[section][key]
    stored[old_section][old_key] = value  # as a run of an earlier release stored it
    config = from_dict(stored)
    assert config[section][key] == value and old_key not in config[old_section]
    argv = ["learner.py", f"--config.{old}={value}", "--config.seed=2"]
    check_override_flags(argv, os.path.join(ROOT, "configs", "cartpole_ppo.py"))
    assert argv == ["learner.py", f"--config.{new}={value}", "--config.seed=2"]
    assert f"--config.{old} is now --config.{new}" in capsys.readouterr().err
    stray = load_config_file(os.path.join(ROOT, "configs", "cartpole_ppo.py"))
    with stray.unlocked():
        stray[old_section][old_key] = value  # a config file of the old name: refused, not ignored
    with pytest.raises(ConfigError, match=re.escape(f"{old} is now {new}")):
        validate(stray)


def test_actor_sizing_leaves_an_unknown_backend_to_validate():
    from seedlike.config import section

    sized = actor_sizing(section("env", backend="nope", num_envs=4), cores=2)
    assert sized == {"num_threads": 2, "num_envs": 64}  # no KeyError: validate names it after


@pytest.mark.parametrize(
    "arg, message",
    [
        ("--total_env_steps=20000", "--total_env_steps is a config setting: write "
         "--config.total_env_steps=20000"),
        ("--env.num_envs=4", "write --config.env.num_envs=4"),
        ("--clip_eps=0.1", "write --config.ppo.clip_eps=0.1"),
        ("--log_dir=runs/typo4", "--log_dir: absl's own flag (its log files' folder), not this "
         "command's; did you mean --logdir?"),
        ("--num_actor=3", "unknown flag --num_actor: did you mean --num_actors?"),
    ],
)  # fmt: skip
def test_a_mistyped_flag_gets_the_flag_to_write(arg, message):
    from seedlike.cli import ABSL_FLAGS, check_flag_names

    own = ["config", "logdir", "num_actors", "port"]
    with pytest.raises(SystemExit) as raised:
        check_flag_names(["learner.py", arg], own, [*own, *ABSL_FLAGS])
    assert message in str(raised.value.code), raised.value.code
    # What is right passes: own flags, their negations, absl's, --config.* and positionals.
    check_flag_names(
        ["learner.py", "--logdir=d", "--noport", "--v=1", "--config.seed=2", "x"], own,
        [*own, *ABSL_FLAGS],
    )  # fmt: skip
