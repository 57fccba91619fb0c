"""Launching and orchestrating runs: the Python API (seedlike.train, ...), sweeps, population-based
training, league roles and Kubernetes manifests. Nothing else in seedlike imports these modules.

  python -m seedlike.launch.sweep   a grid of runs          python -m seedlike.launch.pbt   PBT
  python -m seedlike.launch.league  a league of roles       deploy.py                     Kubernetes
"""
