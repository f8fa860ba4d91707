"""Ctrl-C cancels on the agent, the GIL is released while waiting, and 1,000
calls leak neither client memory nor agent resources."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import vmrpc

from conftest import Agent, cancel_until_done, interrupted, spin_in_thread


@pytest.fixture(autouse=True)
def sigint_handled() -> object:
    """Ctrl-C as in a terminal: a shell starts a background job (`scripts/test.sh &`,
    `nohup ... &`) with SIGINT ignored, and Python then installs no handler, so
    nothing would raise KeyboardInterrupt and the interrupted calls below would wait
    for ever. Python's own handler for these tests, as an interactive shell gives it."""
    before = signal.getsignal(signal.SIGINT)
    if before is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.mark.parametrize("what", ["invoke", "call", "time_evaluator", "profile"])
def test_ctrl_c_cancels_on_the_agent(vm: vmrpc.VirtualMachine, what: str) -> None:
    calls = {
        "invoke": lambda: vm.invoke_stateful("spin"),
        "call": lambda: vm["spin"](),
        "time_evaluator": lambda: vm.time_evaluator("spin", number=1, repeat=1)(),
        "profile": lambda: vm.profile("spin"),
    }
    interrupted(vm, calls[what])
    # The run was cancelled on the agent: the VM serves the next call at once
    # (a still-spinning VM would answer FailedPrecondition "busy").
    assert vm["ident"](11) == 11
    # Python's own SIGINT handling is back in place.
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_ctrl_c_cancels_only_the_interrupted_call(vm: vmrpc.VirtualMachine) -> None:
    # One Ctrl-C, caught; then long calls back to back, each started at once
    # after the previous one: each runs until its own deadline (0.3 s, past
    # the watcher's 100 ms period), none is cancelled by the old interrupt.
    interrupted(vm, lambda: vm.invoke_stateful("spin"))
    outcomes, seconds = [], []
    for _ in range(10):
        t0 = time.monotonic()
        try:
            vm.invoke_stateful("spin", deadline=0.3)
            outcomes.append("returned")
        except vmrpc.VMError as e:
            outcomes.append(type(e).__name__)
        seconds.append(time.monotonic() - t0)
    assert outcomes == ["DeadlineExceeded"] * 10
    assert min(seconds) >= 0.25, seconds
    assert vm["ident"](12) == 12


def test_ctrl_c_from_outside_the_process(agent: Agent, prog: pathlib.Path) -> None:
    # As a terminal's Ctrl-C: SIGINT from another process while the main thread waits.
    script = textwrap.dedent(
        f"""
        import sys, threading, vmrpc
        sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r})
        from conftest import wait_busy
        s = vmrpc.connect({agent.url!r})
        vm = s.create_vm(s.upload({str(prog)!r}), device="cpu")
        for attempt in range(10):
            stop = threading.Event()
            def tell():
                if wait_busy(vm, stop):
                    print("spinning", flush=True)
            t = threading.Thread(target=tell)
            t.start()
            try:
                vm.invoke_stateful("spin")
            except vmrpc.FailedPrecondition as e:  # a poll claimed the VM first
                assert "busy" in e.message
                continue
            except KeyboardInterrupt:
                print("interrupted", vm["ident"](5), s.stats()["session_vms"], flush=True)
                break
            finally:
                stop.set()
                t.join()
        """
    )
    p = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=dict(os.environ)
    )
    assert p.stdout is not None
    assert p.stdout.readline().strip() == "spinning"
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 0
    assert out.strip() == "interrupted 5 1"


def test_ctrl_c_with_sigint_ignored_does_not_cancel(vm: vmrpc.VirtualMachine) -> None:
    # With SIGINT ignored nothing is hooked: a cancel from a thread still works.
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        th, raised = spin_in_thread(vm)
        os.kill(os.getpid(), signal.SIGINT)  # ignored
        assert th.is_alive()
        cancel_until_done(vm, th)
        assert type(raised[0]) is vmrpc.Cancelled
    finally:
        signal.signal(signal.SIGINT, old)


def test_gil_is_released_during_a_long_invoke(vm: vmrpc.VirtualMachine) -> None:
    # spin_in_thread's polls are Python code of this thread running while
    # the other thread waits in the invoke; then more pure-Python work:
    # impossible if the waiting thread held the GIL.
    th, raised = spin_in_thread(vm, lambda: vm.invoke_stateful("spin", deadline=120))
    total = sum(i * i for i in range(200000))
    assert total > 0
    assert th.is_alive() and not raised, "the invoke ended before this thread ran"
    cancel_until_done(vm, th)
    assert len(raised) == 1 and type(raised[0]) is vmrpc.Cancelled


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_no_leaks_over_1000_calls(sess: vmrpc.Session, vm: vmrpc.VirtualMachine) -> None:
    x = np.arange(16384, dtype=np.float32)  # 64 KiB in, 64 KiB out per call
    t = np.ones(3, np.int32)
    out = np.empty_like(x)

    def round_() -> None:
        y = vm["ident"](x)
        assert y[-1] == x[-1]
        vm.set_input("tup", t, 2)
        vm.invoke_stateful("tup")
        assert vm.get_outputs("tup")[2] == 2
        vm.set_input("ident", x)
        vm.invoke_stateful("ident")
        vm.get_output("ident", out=out)
        try:
            vm.invoke_stateful("nosuch")
        except vmrpc.NotFound:
            pass

    for _ in range(100):  # warm up allocators and caches
        round_()
    rss0, refs0, stats0 = _rss_bytes(), sys.getrefcount(x), sess.stats()
    for _ in range(1000):
        round_()
    rss1, stats1 = _rss_bytes(), sess.stats()
    # A leaked output alone would be 64 MiB over 1,000 calls.
    assert rss1 - rss0 < 4 * 1024 * 1024, f"RSS grew by {(rss1 - rss0) / 1024:.0f} KiB"
    assert sys.getrefcount(x) == refs0
    for k in ("session_bytes", "session_vms", "session_executables", "session_transfers"):
        assert stats1[k] == stats0[k], k



def test_long_timeout_cancels_on_the_agent(agent: Agent, prog: pathlib.Path) -> None:
    with vmrpc.connect(agent.url, long_timeout=0.3) as s:
        vm = s.create_vm(s.upload(prog), device="cpu")
        with pytest.raises(vmrpc.DeadlineExceeded) as ei:
            vm.invoke_stateful("spin")
        assert "cancel" in ei.value.message
        assert vm["ident"](6) == 6  # the agent stopped the run


def test_close_waits_for_calls_in_flight(agent: Agent, prog: pathlib.Path) -> None:
    s = vmrpc.connect(agent.url)
    vm = s.create_vm(s.upload(prog), device="cpu")
    th, raised = spin_in_thread(vm)
    with pytest.raises(vmrpc.FailedPrecondition, match="in use by 1 call"):
        s.close()
    cancel_until_done(vm, th)
    assert type(raised[0]) is vmrpc.Cancelled
    s.close()
    assert s.closed
