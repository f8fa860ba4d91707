#!/usr/bin/env python3
"""What the Python package (python/vmrpc) costs over the C API it wraps.

One vmagent child serves the cpu device with `ident(x) -> x`. The baseline
is bench/capi_calls.c (libcapi_calls.so, loaded with ctypes): the same
calls straight through libvmclient, looping in C on its own connection.
Both halves run in this process in alternating batches (the order flips
every round), so the load of a shared machine hits them alike. Figures are
medians over rounds, per call:

  ping_us_c / ping_us_py            vmc_ping vs Session.ping(), wall
  call4_us_c / call4_us_py          set input (4-byte float32) + invoke + fetch:
                                    three C calls vs vm["ident"](x)
  *_overhead_us                     median of the rounds' py - c, wall
  *_overhead_cpu_us                 the same in CPU time of the calling thread:
                                    what the binding itself spends, free of
                                    waiting and preemption (the aim: a few us)
  call4_ratio                       py / c, wall
  bulk_ms_per_mib_c / _py           BULK MiB in + BULK MiB out per call, per MiB
                                    moved; the output in a new allocation
                                    (vmc_get_output / a new NumPy array)
  bulk_into_ms_per_mib_c / _py      the output into a reused buffer
                                    (vmc_get_output_into / get_output(out=))
  bulk_overhead_us_per_mib, bulk_into_overhead_us_per_mib, and _cpu_ the same
                                    in calling-thread CPU; bulk_ratio, bulk_into_ratio

With --instructions (needs valgrind), also the instructions the calling
thread executes per call, counted by callgrind (deterministic, unlike time
on a busy machine): ping_instr_c / _py, call4_instr_c / _py, their
differences *_overhead_instr and call4_instr_ratio. Each side runs in its own
process under callgrind twice, with N and 3N calls; the difference divided
by 2N takes start-up out.

Usage: bench/bench_python.py [--rounds N] [--batch N] [--bulk-mib N] [--instructions]
Needs the C build ($VMRPC_BUILD_DIR, default build/: agent/vmagent,
client/vmclient, bench/libcapi_calls.so) and the vmrpc package installed
(pip install .). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Tuple

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python" / "tests"))
from agent_proc import BUILD, Agent  # noqa: E402

import vmrpc  # noqa: E402

PROG = ".func @ident(x) regs 1 {\n  ret %0\n}\n"
F32P = np.ctypeslib.ndpointer(np.float32, flags="C_CONTIGUOUS")
DBLP = ctypes.POINTER(ctypes.c_double)


def load_capi(path: pathlib.Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    lib.capi_open.restype = ctypes.c_void_p
    lib.capi_open.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    lib.capi_close.argtypes = [ctypes.c_void_p]
    lib.capi_ping.restype = ctypes.c_double
    lib.capi_ping.argtypes = [ctypes.c_void_p, ctypes.c_long, DBLP]
    lib.capi_call.restype = ctypes.c_double
    lib.capi_call.argtypes = [ctypes.c_void_p, ctypes.c_long, F32P, ctypes.c_long, DBLP]
    lib.capi_call_into.restype = ctypes.c_double
    lib.capi_call_into.argtypes = [ctypes.c_void_p, ctypes.c_long, F32P, ctypes.c_long, F32P, DBLP]
    return lib


def c_batch(fn: Callable[..., float], *args: object) -> Tuple[float, float]:
    """Wall and thread-CPU seconds of one C batch."""
    cpu = ctypes.c_double()
    wall = fn(*args, ctypes.byref(cpu))
    if wall < 0:
        raise RuntimeError("the C API batch failed (see stderr)")
    return wall, cpu.value


def py_batch(fn: Callable[[], object], n: int) -> Tuple[float, float]:
    """Wall and thread-CPU seconds of n calls of fn."""
    w0, c0 = time.perf_counter(), time.thread_time()
    for _ in range(n):
        fn()
    return time.perf_counter() - w0, time.thread_time() - c0


def worker(lib: ctypes.CDLL, url: str, vmx: str, side: str, fig: str, n: int) -> None:
    """--worker: n calls of one figure on one side (run under callgrind)."""
    x4 = np.ones(1, np.float32)
    if side == "c":
        h = lib.capi_open(url.encode(), vmx.encode())
        if not h:
            raise RuntimeError("capi_open failed")
        for k in (20, n):  # warm up, then the counted calls
            if fig == "ping":
                c_batch(lib.capi_ping, h, k)
            else:
                c_batch(lib.capi_call, h, k, x4, x4.size)
        lib.capi_close(h)
    else:
        sess = vmrpc.connect(url)
        vm = sess.create_vm(sess.upload(vmx), device="cpu")
        for k in (20, n):
            if fig == "ping":
                py_batch(sess.ping, k)
            else:
                py_batch(lambda: vm["ident"](x4), k)
        sess.close()


def instructions(url: str, vmx: pathlib.Path, tmp: pathlib.Path, n: int) -> Dict[str, float]:
    """Calling-thread instructions per call, by callgrind (see the docstring)."""
    res: Dict[str, float] = {}
    for fig in ("ping", "call4"):
        for side in ("c", "py"):
            counts = []
            for k in (n, 3 * n):
                out = tmp / f"cg.{fig}.{side}.{k}"
                subprocess.run(
                    ["valgrind", "--tool=callgrind", "--separate-threads=yes",
                     f"--callgrind-out-file={out}", sys.executable, __file__,
                     "--worker", side, fig, str(k), url, str(vmx)],
                    check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )
                main_thread = pathlib.Path(f"{out}-01").read_text()
                line = next(x for x in main_thread.splitlines() if x.startswith("summary:"))
                counts.append(int(line.split()[1]))
            res[f"{fig}_instr_{side}"] = (counts[1] - counts[0]) / (2 * n)
        res[f"{fig}_overhead_instr"] = res[f"{fig}_instr_py"] - res[f"{fig}_instr_c"]
    res["call4_instr_ratio"] = res["call4_instr_py"] / res["call4_instr_c"]
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--batch", type=int, default=200, help="small calls per batch")
    ap.add_argument("--bulk-mib", type=int, default=16)
    ap.add_argument("--instructions", action="store_true",
                    help="also count instructions per call with callgrind (valgrind)")
    ap.add_argument("--worker", nargs=5, metavar=("SIDE", "FIG", "N", "URL", "VMX"),
                    help=argparse.SUPPRESS)
    a = ap.parse_args()
    so = BUILD / "bench" / "libcapi_calls.so"
    if not so.exists():
        print(f"bench_python: {so} not built (cmake --build build --target capi_calls)",
              file=sys.stderr)
        return 1
    lib = load_capi(so)
    if a.worker:
        side, fig, k, url, model = a.worker
        worker(lib, url, model, side, fig, int(k))
        return 0
    n, mib = a.batch, a.bulk_mib
    nbulk = max(2, 64 // mib)
    x4 = np.ones(1, np.float32)
    big = np.arange(mib * (1 << 20) // 4, dtype=np.float32)
    out = np.empty_like(big)
    # per figure: list over rounds of (c_wall, c_cpu, py_wall, py_cpu) per unit
    rows: Dict[str, List[Tuple[float, float, float, float]]] = {
        "ping": [], "call4": [], "bulk": [], "bulk_into": []
    }
    with tempfile.TemporaryDirectory() as tmp:
        t = pathlib.Path(tmp)
        (t / "ident.vmasm").write_text(PROG)
        vmx = t / "ident.vmx"
        subprocess.run([str(BUILD / "client" / "vmclient"), "asm", str(t / "ident.vmasm"),
                        "-o", str(vmx)], check=True)
        agent = Agent(t / "cache", "--device", "cpu")
        h = None
        try:
            sess = vmrpc.connect(agent.url)
            vm = sess.create_vm(sess.upload(vmx), device="cpu")
            h = lib.capi_open(agent.url.encode(), str(vmx).encode())
            if not h:
                raise RuntimeError("capi_open failed (see stderr)")

            def into() -> None:
                vm.set_input("ident", big)
                vm.invoke_stateful("ident")
                vm.get_output("ident", out=out)

            figures = {
                "ping": (lambda: c_batch(lib.capi_ping, h, n),
                         lambda: py_batch(sess.ping, n), n),
                "call4": (lambda: c_batch(lib.capi_call, h, n, x4, x4.size),
                          lambda: py_batch(lambda: vm["ident"](x4), n), n),
                "bulk": (lambda: c_batch(lib.capi_call, h, nbulk, big, big.size),
                         lambda: py_batch(lambda: vm["ident"](big), nbulk), nbulk * 2 * mib),
                "bulk_into": (lambda: c_batch(lib.capi_call_into, h, nbulk, big, big.size, out),
                              lambda: py_batch(into, nbulk), nbulk * 2 * mib),
            }
            for fc, fp, _ in figures.values():  # warm up both sides
                fc()
                fp()
            for r in range(a.rounds):
                for name, (fc, fp, units) in figures.items():
                    if r % 2:
                        (cw, cc), (pw, pc) = fc(), fp()
                    else:
                        (pw, pc), (cw, cc) = fp(), fc()
                    rows[name].append((cw / units, cc / units, pw / units, pc / units))
            assert np.array_equal(out, big)
            vm.free()
            sess.close()
            counted = instructions(agent.url, vmx, t, 100) if a.instructions else {}
        finally:
            if h:
                lib.capi_close(h)
            agent.stop()

    def med(name: str, i: int, scale: float) -> float:
        return statistics.median(r[i] for r in rows[name]) * scale

    def over(name: str, cpu: bool, scale: float) -> float:
        i = 1 if cpu else 0
        return statistics.median(r[i + 2] - r[i] for r in rows[name]) * scale

    us, ms = 1e6, 1e3
    with open("/proc/loadavg") as f:
        load = float(f.read().split()[0])
    res = {
        "rounds": a.rounds,
        "batch": n,
        "bulk_mib": mib,
        "loadavg": load,
        "ping_us_c": med("ping", 0, us),
        "ping_us_py": med("ping", 2, us),
        "ping_overhead_us": over("ping", False, us),
        "ping_overhead_cpu_us": over("ping", True, us),
        "call4_us_c": med("call4", 0, us),
        "call4_us_py": med("call4", 2, us),
        "call4_overhead_us": over("call4", False, us),
        "call4_overhead_cpu_us": over("call4", True, us),
        "call4_ratio": med("call4", 2, 1) / med("call4", 0, 1),
        "bulk_ms_per_mib_c": med("bulk", 0, ms),
        "bulk_ms_per_mib_py": med("bulk", 2, ms),
        "bulk_overhead_us_per_mib": over("bulk", False, us),
        "bulk_overhead_cpu_us_per_mib": over("bulk", True, us),
        "bulk_ratio": med("bulk", 2, 1) / med("bulk", 0, 1),
        "bulk_into_ms_per_mib_c": med("bulk_into", 0, ms),
        "bulk_into_ms_per_mib_py": med("bulk_into", 2, ms),
        "bulk_into_overhead_us_per_mib": over("bulk_into", False, us),
        "bulk_into_overhead_cpu_us_per_mib": over("bulk_into", True, us),
        "bulk_into_ratio": med("bulk_into", 2, 1) / med("bulk_into", 0, 1),
        **counted,
    }
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in res.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
