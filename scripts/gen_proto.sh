#!/usr/bin/env bash
# Regenerates seedlike/rpc/seedlike_pb2.py(i) from seedlike/rpc/seedlike.proto.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
"$PY" -m grpc_tools.protoc -I seedlike/rpc --python_out=seedlike/rpc --pyi_out=seedlike/rpc \
  seedlike/rpc/seedlike.proto
