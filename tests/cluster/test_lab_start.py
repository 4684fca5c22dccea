"""The one way to start a check on a lab host: what the node process gets, from its own env."""

from __future__ import annotations

import os
import subprocess
import sys

from nccldoctor.lab.start import check_argv, check_env, package_root, start_check


def test_a_lab_host_inherits_no_launcher_or_nccldoctor_variables():
    caller = {"PATH": "/usr/bin", "MASTER_ADDR": "198.18.0.9", "RANK": "3", "WORLD_SIZE": "8",
              "SLURM_JOB_ID": "7", "NCCLDOCTOR_FAULT": "hang:ddp", "NCCL_DEBUG": "WARN",
              "PYTHONPATH": "/opt/site"}  # fmt: skip
    env = check_env(caller, "node1", {"NCCLDOCTOR_FAULT": "crash:init:rank=1"})
    assert env == {
        "PATH": "/usr/bin",
        "NCCL_DEBUG": "WARN",
        "PYTHONPATH": os.pathsep.join([package_root(), "/opt/site"]),
        "NCCLDOCTOR_NODE_NAME": "node1",
        "NCCLDOCTOR_FAULT": "crash:init:rank=1",
    }


def test_the_started_check_runs_and_its_node_imports_this_nccldoctor(tmp_path):
    argv = check_argv(tmp_path / "out", ["--help"])
    assert argv[:4] == [sys.executable, "-m", "nccldoctor", "check"]
    proc = start_check(["--help"], out=tmp_path / "out", node_name="node7", env=os.environ,
                       stdout=subprocess.PIPE, text=True)  # fmt: skip
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "--master" in out
    code = "import os, nccldoctor; print(nccldoctor.__file__, 'MASTER_ADDR' in os.environ)"
    env = check_env({**os.environ, "MASTER_ADDR": "198.18.0.9"}, "node7")
    where, master = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path,
                                   capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    assert where.startswith(package_root()) and master == "False"
