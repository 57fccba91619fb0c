"""The committed protobuf module matches seedlike.proto (regenerate with scripts/gen_proto.sh)."""

import os
import subprocess
import sys

from tests.procs import ROOT


def test_generated_module_is_current(tmp_path):
    protoc = [sys.executable, "-m", "grpc_tools.protoc", "-I", "seedlike/rpc"]
    out = [f"--python_out={tmp_path}", f"--pyi_out={tmp_path}", "seedlike/rpc/seedlike.proto"]
    subprocess.run(protoc + out, cwd=ROOT, check=True)
    for name in ("seedlike_pb2.py", "seedlike_pb2.pyi"):
        with open(os.path.join(ROOT, "seedlike", "rpc", name)) as committed:
            with open(tmp_path / name) as fresh:
                assert committed.read() == fresh.read(), (
                    f"{name} is stale: run scripts/gen_proto.sh"
                )
