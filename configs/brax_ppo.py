"""PPO on brax's continuous control, stepped on the device inside the learner's compiled program
(no actors: seedlike.ondevice), with the settings brax's own PPO trainer is published with for
each task (brax.training.agents.ppo: envs, unroll length, epochs, minibatches, discount,
entropy cost, learning rate 3e-4; clip 0.3, GAE lambda 0.95 and value coefficient 0.5 are that
trainer's defaults), observations and rewards normalized as configs/mujoco_ppo.py does (brax
normalizes observations and multiplies rewards by a per-task constant). One variant per task:

    scripts/train.sh --config=configs/brax_ppo.py:inverted_double_pendulum
    scripts/train.sh --config=configs/brax_ppo.py:halfcheetah --config.env.num_envs=...

What differs from brax's trainer: one unroll per env per policy version (brax collects
batch_size x num_minibatches unrolls per update from its envs; here every env's unroll of
`unroll_length` steps is the batch, so envs x unroll_length steps per version), the Gaussian
head the MuJoCo configs use (a state-independent log-std, here from 0: std 1, as brax's starts;
brax squashes a tanh normal), 64-64 silu torsos for policy and value (brax: 4 x 32 and 5 x 256
swish), seedlike's optimizer defaults (gradients clipped at norm 0.5, Adam eps 1e-5; brax: no
clipping, 1e-8), and a truncated episode's last value bootstraps (brax's trainer, by default,
does not). benchmarks/brax_ppo.py
runs brax's own trainer beside it at the same envs, unroll length and network.
"""

from seedlike.config import base_config

# task: (total env steps, envs, unroll length, epochs, minibatches, discount, entropy cost),
# brax's published settings for each.
TASKS = {
    "inverted_pendulum": (2_000_000, 2048, 5, 4, 32, 0.97, 1e-2),
    "inverted_double_pendulum": (20_000_000, 2048, 5, 4, 32, 0.97, 1e-2),
    "halfcheetah": (50_000_000, 2048, 20, 8, 32, 0.95, 1e-3),
    "ant": (50_000_000, 4096, 5, 4, 32, 0.97, 1e-2),
    "humanoid": (50_000_000, 2048, 10, 8, 32, 0.97, 1e-3),
}


def get_config(task: str = "inverted_double_pendulum"):
    if task not in TASKS:
        raise ValueError(f"configs/brax_ppo.py: unknown task {task!r}; one of {list(TASKS)}")
    steps, envs, length, epochs, minibatches, gamma, entropy = TASKS[task]
    c = base_config()
    c.env.backend = "brax"
    c.env.name = task
    c.env.kwargs = {"backend": "positional"}  # brax's training colab's default pipeline
    c.total_env_steps = steps
    c.batch_unrolls = envs  # on the device: the envs, each one unroll per policy version
    c.unroll_length = length
    c.network.hidden_sizes = (64, 64)
    c.network.activation = "silu"
    c.network.obs_clip = 10.0
    c.ppo.epochs = epochs
    c.ppo.num_minibatches = minibatches
    c.ppo.gamma = gamma
    c.ppo.gae_lambda = 0.95
    c.ppo.clip_eps = 0.3
    c.ppo.ent_coef = entropy
    c.ppo.vf_coef = 0.5
    c.ppo.normalize_rewards = True
    c.optimizer.learning_rate = 3e-4
    c.optimizer.anneal_lr = False  # brax's trainer keeps it constant
    c.log.interval_s = 5.0
    c.lock()
    return c
