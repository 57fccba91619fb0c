"""seedlike: SEED-style central-inference reinforcement learning for envpool games, in JAX."""

from setuptools import find_packages, setup

# Versions seen working together on Python 3.11 (CPU); see docs/development.md.
INSTALL_REQUIRES = [
    "jax==0.10.2",
    "jaxlib==0.10.2",
    "flax==0.12.8",
    "optax==0.2.8",
    "chex==0.1.92",
    "numpy==2.4.6",
    "envpool==1.2.5",
    "gymnasium==1.4.0",
    "pettingzoo==1.27.0",  # env.backend=pettingzoo (multi-agent envs)
    "grpcio==1.85.1",
    "protobuf==7.36.2",
    "orbax-checkpoint==0.12.8",
    "wandb==0.31.0",
    "absl-py==2.5.1",
    "ml_collections==1.1.0",
    "trueskill==0.4.5",
    "matplotlib==3.11.2",  # python -m seedlike.plot
    "pillow==13.0.0",  # watch.py's GIFs
    # watch.py's MuJoCo frames on machines without an EGL device: Gymnasium's copy of the task,
    # rendered by OSMesa (seedlike/watch.py; scripts/setup_venv.sh installs libosmesa6)
    "mujoco==4.0.0",
    "PyOpenGL==3.1.10",
    "imageio==2.38.1",
    "tensorboardX==2.6.5",  # config log.tensorboard
    "pyyaml==6.0.3",  # deploy.py's Kubernetes manifests
    "scipy==1.17.1",  # python -m seedlike.launch.sweep's Student-t intervals (jax needs it too)
    "minatar==1.0.15",  # MinAtar/<Game>-v1 through env.backend=gymnasium (configs/minatar_*.py)
    # env.backend=gymnax: JAX envs stepped on the device (seedlike.ondevice). 0.0.9: gymnax 0.1
    # pins gymnasium below the 1.4 above; seaborn is what it imports for its plots.
    "gymnax==0.0.9",
    "seaborn==0.13.2",
    "pgx==2.6.0",  # env.backend=pgx: two-player board games on the device (svgwrite with it)
    # env.backend=brax: continuous control on the device; its own PPO trainer is
    # benchmarks/brax_ppo.py's anchor. mujoco-mjx: the version pip chose beside mujoco 4.0.0
    # above (brax's backend="mjx"; seen working, not tested in the suite).
    "brax==0.14.2",
    "mujoco-mjx==3.17.0",
]

# What an actor process imports (seedlike.actor, seedlike.envs, seedlike.rpc, seedlike.config):
# scripts/actor_venv.sh installs only these, for actors whose envs pin packages the learner cannot
# share. No jax: actors hold no model.
ACTOR_REQUIRES = [
    "numpy==2.4.6",
    "grpcio==1.85.1",
    "protobuf==7.36.2",
    "absl-py==2.5.1",
    "ml_collections==1.1.0",
    "gymnasium==1.4.0",
    "pettingzoo==1.27.0",
]

setup(
    name="seedlike",
    version="0.1.0",
    description=__doc__,
    python_requires=">=3.11",
    packages=find_packages(
        include=["seedlike", "seedlike.*", "networks", "networks.*", "surgery", "surgery.*"]
    ),
    package_data={"seedlike.rpc": ["*.proto", "*.pyi"]},
    install_requires=INSTALL_REQUIRES,
    extras_require={
        # MAgent2 battles (configs/magent_battle.py); needed where actors step them and where the
        # learner reads their spec.
        "magent": ["magent2==0.3.4", "pygame-ce==2.5.8"],
        "dev": [
            "magent2==0.3.4",  # tests/envs/test_pettingzoo.py
            "pygame-ce==2.5.8",
            "minigrid==3.2.0",  # tests/envs/test_gymnasium_env.py: a package's ids (package:Id)
            "pytest==9.2.0",
            "pytest-xdist==3.8.0",  # scripts/test.sh runs two workers
            "ruff==0.17.6",
            "grpcio-tools==1.85.1",
            # tests/integration/test_notebooks.py runs notebooks/ in a kernel
            "nbclient==0.11.0",
            "nbformat==5.11.1",
            "ipykernel==7.4.0",
            "kubernetes-validate==1.37.0",  # tests/launch/test_deploy.py, offline schemas
            "mkdocs==1.6.1",  # the documentation site (docs/, mkdocs.yml; tests/core/test_docs.py)
            # tests/core/test_aggregate.py checks seedlike.aggregate against rliable; arch 7.2
            # (rliable's bootstrap) does not import with pandas 3.
            "rliable==1.2.0",
            "arch==7.2.0",
            "pandas==2.2.3",
        ],
    },
)
