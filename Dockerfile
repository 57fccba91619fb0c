# The image that deploy.py's manifests run: this repository installed at /seedlike, where
# learner.py and actor.py run. CPU JAX as pinned in setup.py; for a GPU learner add
# `RUN pip install "jax[cuda12]==<setup.py's jax version>"` after the install. (Not built by the
# test suite: its machine has no container runtime.)
#
#   docker build -t registry.example.com/seedlike:0.1 . && docker push registry.example.com/seedlike:0.1
FROM python:3.11-slim
WORKDIR /seedlike
COPY setup.py README.md ./
COPY seedlike/ seedlike/
COPY networks/ networks/
COPY surgery/ surgery/
RUN pip install --no-cache-dir -e .
COPY . .
ENV WANDB_MODE=offline PYTHONUNBUFFERED=1
