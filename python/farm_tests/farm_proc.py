"""Farm processes for the tests and scripts/farm-demo.sh: a head, a node
serving some agents, each a child process on loopback that dies with its
parent (like python/tests/agent_proc.py, whose Agent this reuses)."""

from __future__ import annotations

import ctypes
import pathlib
import signal
import subprocess
import sys
import time
from typing import List, NamedTuple, Optional, Sequence

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from agent_proc import BUILD, ROOT, Agent  # noqa: E402

__all__ = ["BUILD", "ROOT", "Agent", "Head", "Node", "Mlp", "farm_cmd", "gen_mlp"]


class Mlp(NamedTuple):
    """The example MLP as files: the executable, its input, its output."""

    vmx: pathlib.Path
    x: pathlib.Path
    y: pathlib.Path


def gen_mlp(d: pathlib.Path) -> Mlp:
    """Writes the example MLP (seed 7) into d with the build's generator."""
    m = Mlp(d / "mlp.vmx", d / "mlp_x.npy", d / "mlp_y.npy")
    gen = [str(BUILD / "examples" / "vmrpc-gen-model"), "mlp", "--seed", "7"]
    subprocess.run(
        gen + ["--out", str(m.vmx), "--input", str(m.x), "--expected", str(m.y)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return m


def _die_with_parent() -> None:
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def farm_cmd() -> List[str]:
    """How to run vmrpc-farm with this Python (the package installed in it)."""
    return [sys.executable, "-m", "vmrpc_farm"]


class _Proc:
    def __init__(self, args: Sequence[str], log: pathlib.Path, stdin: Optional[str] = None) -> None:
        self.log = log
        self._out = open(log, "w")
        self.proc = subprocess.Popen(
            list(args),
            stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
            text=True,
        )
        if stdin is not None:
            assert self.proc.stdin is not None
            self.proc.stdin.write(stdin)
            self.proc.stdin.close()

    def wait_line(self, prefix: str, timeout: float = 60) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for line in self.log.read_text().splitlines():
                if line.startswith(prefix):
                    return line
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{self.log.name}: no line {prefix!r}:\n{self.log.read_text()}")

    def stop(self) -> Optional[int]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._out.close()
        return self.proc.returncode


class Head(_Proc):
    """vmrpc-farm head on a free loopback port."""

    def __init__(
        self,
        workdir: pathlib.Path,
        lifetime: float = 1800,
        extra: Sequence[str] = (),
        name: str = "head",
        port: int = 0,
    ) -> None:
        super().__init__(
            farm_cmd()
            + ["head", "--listen", f"127.0.0.1:{port}", "--lifetime", str(lifetime), *extra],
            workdir / f"{name}.log",
        )
        self.address = self.wait_line("vmrpc-farm head listening on ").split()[-1]


class Node(_Proc):
    """vmrpc-farm serve for some agents, with tags."""

    def __init__(
        self,
        workdir: pathlib.Path,
        address: str,
        agents: Sequence[Agent],
        tags: Sequence[str],
        name: str = "node",
        interval: float = 0.5,
        lifetime: float = 1800,
        extra: Sequence[str] = (),
        stdin: Optional[str] = None,
    ) -> None:
        args = farm_cmd() + [
            "serve",
            "--address",
            address,
            "--interval",
            str(interval),
            "--head-timeout",
            "10",
            "--lifetime",
            str(lifetime),
            *extra,
        ]
        for a in agents:
            args += ["--agent", a.url]
        for t in tags:
            args += ["--tag", t]
        super().__init__(args, workdir / f"{name}.log", stdin)
        self.agents = list(agents)
