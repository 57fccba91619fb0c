"""Runtime helpers every part of seedlike may use (the ground floor): devices and the compute
guard, several learner hosts as one (jax.distributed), process statistics, storage errors,
thread names and XLA flags. They import nothing else of seedlike."""
