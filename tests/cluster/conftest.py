"""A real single-machine Slurm and a real in-process Ray, started once for the cluster tests and
stopped by what started them (pid files; `ray.shutdown` of the `ray.init` made here)."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from .slurm_machine import SlurmMachine, missing_programs


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    missing = missing_programs()
    if missing:
        pytest.skip(f"Slurm is not installed here (no {', '.join(missing)}); .ci/run installs slurm-wlm and munge")
    machine = SlurmMachine(tmp_path_factory.mktemp("slurm"))
    saved = {name: os.environ.get(name) for name in ("SLURM_CONF",)}
    try:
        machine.start()
        os.environ.update(machine.env)  # sbatch/squeue/scancel, from the tests and from launch, read it
        yield machine
    finally:
        machine.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="session")
def ray_cluster():
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'eagle3-synth[ray]'; .ci/run does)")
    # Ray 2.60 turns token auth on for a new local cluster unless this is set
    # (ray/_private/authentication/authentication_token_setup.py enable_token_auth_by_default).
    os.environ["RAY_AUTH_MODE"] = "disabled"
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # stay on loopback
    temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    ray.init(num_cpus=2, include_dashboard=False, _temp_dir=temp_dir, logging_level="WARNING")
    try:
        yield ray
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
