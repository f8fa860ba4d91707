"""Fixtures: a real vmagent on a free loopback port (agent_proc.py),
executables assembled with the built vmclient, and the example MLP.

The C build tree is $VMRPC_BUILD_DIR (default: build/ at the repository root);
it must hold agent/vmagent, client/vmclient and examples/vmrpc-gen-model.
"""

from __future__ import annotations

import pathlib
import signal
import subprocess
import threading
import time
from typing import Callable, Iterator, List, Optional, Tuple

import numpy as np
import pytest

import vmrpc

from agent_proc import BUILD, Agent

__all__ = ["BUILD", "Agent", "wait_busy", "spin_in_thread", "cancel_until_done", "interrupted"]

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


def wait_busy(vm: vmrpc.VirtualMachine, stop: Optional[threading.Event] = None) -> bool:
    """True once vm runs an invoke (the agent answers a SetInput with "busy");
    False when stop is set first. Polls a bounded number of times."""
    x = np.zeros(1, np.float32)
    for _ in range(20000):
        if stop is not None and stop.is_set():
            return False
        try:
            vm.set_input("ident", x)
        except vmrpc.FailedPrecondition as e:
            if "busy" in e.message:
                return True
            raise
        time.sleep(0.001)
    raise AssertionError("the invoke never started")


def _lost_race(e: BaseException) -> None:
    # A poll reached the agent before the invoke did: the invoke got "busy".
    assert isinstance(e, vmrpc.FailedPrecondition) and "busy" in e.message, repr(e)


def spin_in_thread(
    vm: vmrpc.VirtualMachine, call: Optional[Callable[[], object]] = None
) -> Tuple[threading.Thread, List[BaseException]]:
    """Starts call (default: vm.invoke_stateful("spin")) on a thread and returns
    once it runs on the agent, with the thread and a list that receives what
    the call raised. A poll can claim the VM before the invoke arrives (the
    invoke is then refused "busy"): the call is made again, at most 10 times."""
    run = call or (lambda: vm.invoke_stateful("spin"))
    for _ in range(10):
        raised: List[BaseException] = []
        ended = threading.Event()

        def body() -> None:
            try:
                run()
            except BaseException as e:  # handed to the test
                raised.append(e)
            finally:
                ended.set()

        th = threading.Thread(target=body)
        th.start()
        if wait_busy(vm, ended):
            return th, raised
        th.join()
        _lost_race(raised[0])
    raise AssertionError("the invoke lost the race to the polls 10 times")


def cancel_until_done(vm: vmrpc.VirtualMachine, th: threading.Thread) -> None:
    """Cancels vm's run until th ends (a Cancel that reaches the agent before
    the run starts is not remembered there)."""
    while th.is_alive():
        vm.cancel()
        th.join(0.1)


def interrupted(vm: vmrpc.VirtualMachine, call: Callable[[], object]) -> None:
    """Makes call on this (the main) thread while another thread sends it
    SIGINT once the call runs on the agent; returns when call raised
    KeyboardInterrupt. Retries when the call lost the race to the polls."""
    assert threading.current_thread() is threading.main_thread()
    main = threading.main_thread().ident
    assert main is not None
    for _ in range(10):
        stop = threading.Event()

        def poke() -> None:
            if wait_busy(vm, stop):
                signal.pthread_kill(main, signal.SIGINT)

        th = threading.Thread(target=poke)
        th.start()
        try:
            call()
        except KeyboardInterrupt:
            return
        except vmrpc.FailedPrecondition as e:
            _lost_race(e)
            continue
        finally:
            stop.set()
            th.join()
        raise AssertionError("the call returned without being interrupted")
    raise AssertionError("the call lost the race to the polls 10 times")
