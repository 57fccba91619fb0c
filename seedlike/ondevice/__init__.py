"""The on-device runtime (Podracer's Anakin beside the SEED path's Sebulba): for an env backend
whose envs are JAX functions (seedlike.envs.Backend.on_device), acting and learning run in one
compiled program, with no actors, no gRPC and no host copy of a step.

  rollout.py  T steps of (network.act, the envs' step) scanned, vmapped over a device's envs:
              the same seedlike.types.Unroll a SEED learner batch holds
  program.py  K updates in one call: rollouts, the algorithm's advantages and its loss through
              the one learner contract (seedlike.algos), sgd steps averaged over the devices
  selfplay.py a two-player game (a TurnEnv) as the learner's seat, the league's opponents
              (snapshots stacked on the device, bots in JAX) replying inside its step
  opponents.py the league between calls: the sampler's probabilities in, the games' outcomes out
  run.py      the host loop: calls the program, writes the metrics row, the console line,
              checkpoints and the run's summary, as the SEED learner does

scripts/train.sh picks it from `env.backend`; learner.py hands such a config to run.train.
"""
