"""A real vmagent child process on a free loopback port, as
tests/common/agent_proc.c starts one for the C suites; shared by the pytest
suite (conftest.py) and bench/bench_python.py.

The C build tree is $VMRPC_BUILD_DIR (default: build/ at the repository
root); it must hold agent/vmagent.
"""

from __future__ import annotations

import ctypes
import os
import pathlib
import select
import signal
import subprocess
from typing import List, Optional, Sequence

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("VMRPC_BUILD_DIR") or ROOT / "build")


def _die_with_parent() -> None:
    # The agent must not outlive a crashed test run (PR_SET_PDEATHSIG = 1).
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)


class Agent:
    """A vmagent child process listening on a free loopback port."""

    def __init__(
        self, cache_dir: pathlib.Path, *extra: str, wrap: Sequence[str] = ()
    ) -> None:
        """wrap: a command that runs the agent (e.g. chrt/taskset), or none."""
        binary = BUILD / "agent" / "vmagent"
        if not binary.exists():
            raise RuntimeError(f"{binary} not found: build the C project first (scripts/build.sh)")
        args: List[str] = [
            *wrap,
            str(binary),
            "--listen",
            "tcp://127.0.0.1:0",
            "--cache-dir",
            str(cache_dir),
            "--log-level",
            os.environ.get("VMRPC_AGENT_LOG", "warn"),
            *extra,
        ]
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, preexec_fn=_die_with_parent, text=True
        )
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], 60)
        line = self.proc.stdout.readline() if ready else ""
        if not line.startswith("vmagent listening on "):
            self.stop()
            raise RuntimeError(f"vmagent did not start (first line {line!r})")
        self.url = line.split()[-1]

    def stop(self) -> Optional[int]:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()
        return self.proc.returncode
