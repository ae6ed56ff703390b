"""A real single-machine Slurm for the tests: munged, slurmctld and slurmd as plain daemons from one
temporary state folder, stopped by their pid files (never by name).

What it takes on a machine without systemd or writable cgroups (measured; docs/development.md, "the
tests' own Slurm", says why each is needed):
SlurmctldHost = `hostname -s`, addresses pinned to 127.0.0.1, proctrack/linuxproc and task/none,
RealMemory under what `slurmd -C` reports (else the node drains), batch_sched_delay=0, and
DependencyParameters=kill_invalid_depend (datatrove's stats job depends `afterok` on the array).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel")


def missing_programs() -> list[str]:
    return [name for name in DAEMONS if shutil.which(name) is None]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for(condition, what: str, timeout: float = 30.0) -> None:
    """Poll `condition` (a daemon coming up is seen only from outside); fail naming `what`."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"single-machine Slurm: {what} did not happen within {timeout:.0f}s")
        time.sleep(0.1)


@dataclass
class SlurmMachine:
    root: Path
    partition: str = "tests"
    env: dict[str, str] = field(default_factory=dict)
    pid_files: list[Path] = field(default_factory=list)

    def start(self) -> "SlurmMachine":
        root = self.root
        for name in ("munge", "state", "spool", "log"):
            (root / name).mkdir(parents=True, exist_ok=True)
        os.chmod(root / "munge", 0o755)  # munged refuses a socket folder others may write to
        key = root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        socket_path = root / "munge" / "munge.socket"
        self._daemon(["munged", "--key-file", str(key), "--socket", str(socket_path),
                      "--pid-file", str(root / "munge" / "munged.pid"), "--log-file", str(root / "log" / "munged.log"),
                      "--seed-file", str(root / "munge" / "munge.seed"), "--force"], root / "munge" / "munged.pid")
        _wait_for(socket_path.exists, "munged's socket appearing")

        host = socket.gethostname().split(".")[0]
        probe = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, check=True).stdout
        node = probe.splitlines()[0]
        memory = int(re.search(r"RealMemory=(\d+)", node).group(1))
        node = re.sub(r"RealMemory=\d+", f"RealMemory={int(memory * 0.95)}", node)
        node = re.sub(r"^NodeName=\S+", f"NodeName={host} NodeAddr=127.0.0.1", node)
        conf = root / "slurm.conf"
        conf.write_text("\n".join([
            "ClusterName=tests",
            f"SlurmctldHost={host}(127.0.0.1)",
            "SlurmUser=root",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={socket_path}",
            f"StateSaveLocation={root / 'state'}",
            f"SlurmdSpoolDir={root / 'spool'}",
            f"SlurmctldPidFile={root / 'slurmctld.pid'}",
            f"SlurmdPidFile={root / 'slurmd.pid'}",
            f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={root / 'log' / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "MpiDefault=none",
            "ReturnToService=2",
            "SchedulerType=sched/backfill",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "SchedulerParameters=batch_sched_delay=0",
            "DependencyParameters=kill_invalid_depend",
            "KillWait=5",
            node,
            f"PartitionName={self.partition} Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
            "",
        ]))
        self.env = {"SLURM_CONF": str(conf)}
        env = {**os.environ, **self.env}
        self._daemon(["slurmctld", "-f", str(conf)], root / "slurmctld.pid", env)
        self._daemon(["slurmd", "-f", str(conf), "-N", host], root / "slurmd.pid", env)
        _wait_for(lambda: self._node_idle(env), "the node becoming idle (sinfo)")
        return self

    def _daemon(self, argv: list[str], pid_file: Path, env: dict[str, str] | None = None) -> None:
        subprocess.run(argv, check=True, env=env, capture_output=True)  # each daemonizes and writes its pid file
        self.pid_files.append(pid_file)
        _wait_for(pid_file.exists, f"{argv[0]} writing {pid_file}")

    def _node_idle(self, env: dict[str, str]) -> bool:
        out = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, env=env).stdout
        return out.strip() in ("idle", "mix", "alloc")

    def stop(self) -> None:
        """Stop the daemons this machine started, by their pid files, last started first."""
        for pid_file in reversed(self.pid_files):
            try:
                pid = int(pid_file.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            _wait_for(lambda: not _alive(pid), f"pid {pid} ({pid_file.name}) exiting", timeout=30)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (a daemon's parent is init, which reaps it; still) counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False
