"""Fixtures: a real vmagent on a free loopback port (agent_proc.py),
executables assembled with the built vmclient, and the example MLP.

The C build tree is $VMRPC_BUILD_DIR (default: build/ at the repository root);
it must hold agent/vmagent, client/vmclient and examples/vmrpc-gen-model.
"""

from __future__ import annotations

import pathlib
import subprocess
import time
from typing import Iterator

import numpy as np
import pytest

import vmrpc

from agent_proc import BUILD, Agent

__all__ = ["BUILD", "Agent", "wait_busy"]

# Builtin-only functions: they run on every device.
PROG = """
.packed $vm.builtin.shape_of
.packed $vm.builtin.make_tuple
.packed $vm.builtin.null_value
.func @ident(x) regs 1 {
  ret %0
}
.func @tup(x, n) regs 4 {
  %2 = call $vm.builtin.shape_of(%0)
  %3 = call $vm.builtin.make_tuple(%0, %2, %1)
  ret %3
}
.func @nest(a, b) regs 4 {
  %2 = call $vm.builtin.make_tuple(%0, %1)
  %3 = call $vm.builtin.make_tuple(%2, %1)
  ret %3
}
.func @typed(x: float32[?, 4]) regs 1 {
  ret %0
}
.func @spin() regs 1 {
L0:
  %0 = call $vm.builtin.null_value()
  goto L0
}
"""


@pytest.fixture(scope="session")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return tmp_path_factory.mktemp("vmrpc")


@pytest.fixture(scope="session")
def agent(workdir: pathlib.Path) -> Iterator[Agent]:
    a = Agent(workdir / "cache")
    yield a
    assert a.stop() == 0, "vmagent did not exit cleanly on SIGTERM"


@pytest.fixture(scope="session")
def prog(workdir: pathlib.Path) -> pathlib.Path:
    src, out = workdir / "prog.vmasm", workdir / "prog.vmx"
    src.write_text(PROG)
    subprocess.run([str(BUILD / "client" / "vmclient"), "asm", str(src), "-o", str(out)], check=True)
    return out


class Mlp:
    def __init__(self, vmx: pathlib.Path, x: np.ndarray, expected: np.ndarray) -> None:
        self.vmx, self.x, self.expected = vmx, x, expected


@pytest.fixture(scope="session")
def mlp(workdir: pathlib.Path) -> Mlp:
    vmx, x, y = workdir / "mlp.vmx", workdir / "mlp_x.npy", workdir / "mlp_y.npy"
    gen = BUILD / "examples" / "vmrpc-gen-model"
    subprocess.run(
        [str(gen), "mlp", "--seed", "7", "--out", str(vmx), "--input", str(x), "--expected", str(y)],
        check=True,
    )
    return Mlp(vmx, np.load(x), np.load(y))


@pytest.fixture
def sess(agent: Agent) -> Iterator[vmrpc.Session]:
    s = vmrpc.connect(agent.url)
    yield s
    s.close()


@pytest.fixture
def vm(sess: vmrpc.Session, prog: pathlib.Path) -> Iterator[vmrpc.VirtualMachine]:
    v = sess.create_vm(sess.upload(prog), device="cpu")
    yield v
    v.free()


def wait_busy(vm: vmrpc.VirtualMachine) -> None:
    """Returns once vm is running an invoke (the agent answers "busy"), polling
    without a time limit on the assertion but with a bounded count."""
    x = np.zeros(1, np.float32)
    for _ in range(20000):
        try:
            vm.set_input("ident", x)
        except vmrpc.FailedPrecondition as e:
            if "busy" in e.message:
                return
            raise
        time.sleep(0.001)
    raise AssertionError("the invoke never started")
