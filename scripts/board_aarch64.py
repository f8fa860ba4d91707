"""The emulated board's checks (scripts/board-aarch64.sh runs them with the
system's python3; only the standard library).

An aarch64 vmagent (the cross build) runs under qemu-user on a free loopback
port and the native x86-64 vmclient drives it: Hello/info (the agent must
report an aarch64 host), the example MLP checked against the host's
reference on every device it serves (PoCL's aarch64 OpenCL device and
`cpu`), `bench --json` (fields present and consistent; the figures mean
nothing under emulation), hostile frames (the agent answers or drops them
and keeps serving), the vmrpc Python package (when its venv exists) and a
clean SIGTERM. Then the other way round: the aarch64 vmclient under qemu
against the native agent.

Any check that fails ends the run with exit 1 and a line
"board: FAILED <check>: <why>". --break MODE makes the agent misbehave on
purpose (the run must then fail); --self-test runs every MODE and exits 0
only when each one failed at the check it targets.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

ROOT = pathlib.Path(__file__).resolve().parents[1]

# --break MODE -> the check that must fail.
BREAKS = {
    # the native x86-64 vmagent in the board's place (no emulator): a
    # binary for the wrong machine must not pass as the board's
    "native": "info",
    # the agent is SIGKILLed right after Hello, as a crash would end it
    "crash": "mlp",
    # the agent cannot take SIGTERM in time (SIGSTOPped first), as a hung
    # shutdown would look
    "hang": "sigterm",
    # the agent's OpenCL driver is missing (no ICD): the board would serve
    # only its cpu device
    "no-opencl": "info",
}


class Failed(Exception):
    def __init__(self, check: str, why: str) -> None:
        super().__init__(f"{check}: {why}")
        self.check = check


def say(msg: str) -> None:
    print(f"board: {msg}", flush=True)


def die_with_parent() -> None:
    import ctypes

    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Agent:
    """A vmagent child on a free loopback port (its first stdout line names it)."""

    def __init__(self, cmd: List[str], env: Dict[str, str], log: pathlib.Path, start_s: float):
        self.log = log
        self._err = open(log, "w")
        t0 = time.monotonic()
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=self._err,
            env=env,
            text=True,
            preexec_fn=die_with_parent,
        )
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], start_s)
        line = self.proc.stdout.readline() if ready else ""
        if not line.startswith("vmagent listening on "):
            self.kill()
            raise Failed(
                "start",
                f"{cmd[0]} did not print 'vmagent listening on' within {start_s:.0f} s "
                f"(first line {line!r}; log: {log.read_text()[-2000:]!r})",
            )
        self.url = line.split()[-1]
        self.start_s = time.monotonic() - t0

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._err.close()

    def cpu_s(self) -> float:
        """CPU seconds the agent (and its waited-for children: the emulated
        linker) used so far: the machine's load does not change it."""
        try:
            f = pathlib.Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan")
        return sum(int(x) for x in f[11:15]) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> Optional[int]:
        """SIGTERM, SIGKILL after 20 s; the exit status (the farm demo's Agent interface)."""
        if self.proc.poll() is None:
            try:
                return self.terminate(20)
            except Failed:
                pass
        self.kill()
        return self.proc.returncode

    def terminate(self, within_s: float) -> int:
        """SIGTERM; the exit status, or raises when it is not timely."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(within_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise Failed("sigterm", f"the agent did not exit within {within_s:.0f} s of SIGTERM")
        self._err.close()
        return rc


def run(cmd: List[str], check: str, env: Optional[Dict[str, str]] = None, timeout: float = 300,
        ok=(0,)) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if p.returncode not in ok:
        raise Failed(
            check,
            f"{' '.join(cmd[-6:])} exited {p.returncode}: {p.stderr.strip()[-1500:]}",
        )
    return p


def as_json(p: subprocess.CompletedProcess, check: str) -> dict:
    try:
        return json.loads(p.stdout)
    except ValueError as e:
        raise Failed(check, f"not JSON ({e}): {p.stdout[:300]!r}")


def want(cond: bool, check: str, why: str) -> None:
    if not cond:
        raise Failed(check, why)


# ---- the checks -------------------------------------------------------------


def check_info(client: List[str], url: str, arch: str, want_opencl: bool) -> List[str]:
    """Hello/info: the host's machine and the devices; the selectors served."""
    info = as_json(run(client + ["--host", url, "info", "--json"], "info"), "info")
    devs = {d["selector"]: d for d in info.get("devices", [])}
    want("cpu" in devs, "info", f"no cpu device in {sorted(devs)}")
    plat = devs["cpu"].get("platform", "")
    want(plat.split()[-1:] == [arch], "info", f"the cpu device's platform is {plat!r}, not {arch}")
    say(f"info: {info['agent_version']} protocol {info['protocol_major']}.{info['protocol_minor']}, "
        f"cpu platform {plat!r}, devices {sorted(devs)}")
    ocl = [s for s in devs if s.startswith("opencl:")]
    if want_opencl:
        want(bool(ocl), "info", "no OpenCL device: PoCL did not load in the agent")
        d = devs[ocl[0]]
        text = f"{d.get('version', '')} {d.get('name', '')}"
        want(arch in text, "info",
             f"{ocl[0]} is not an {arch} device: {text!r}")
        say(f"info: {ocl[0]} is {d['name']!r} ({d['version']!r})")
    # the example MLP's GEMM is an OpenCL operator: the cpu device cannot run it
    return ocl


def check_mlp(client: List[str], url: str, mlp: Dict[str, pathlib.Path], devices: List[str],
              env: Optional[Dict[str, str]] = None) -> None:
    for dev in devices:
        t0 = time.monotonic()
        p = run(
            client + ["--host", url, "check", str(mlp["vmx"]), "--input", f"x={mlp['x']}",
                      "--expected", str(mlp["y"]), "--rtol", "1e-4", "--atol", "1e-5",
                      "--device", dev, "--json"],
            "mlp", env=env, ok=(0, 7), timeout=MLP_TIMEOUT_S,
        )
        doc = as_json(p, "mlp")
        outs = [o.get("check") or {} for o in doc.get("outputs", [])]
        want(p.returncode == 0 and doc.get("match") is True and outs
             and all(c.get("ok") is True for c in outs), "mlp",
             f"on {dev} the outputs differ from the host's reference: {outs}")
        c = outs[0]
        want(c.get("count", 0) > 0, "mlp", f"on {dev} nothing was compared: {c}")
        say(f"mlp: check on {dev} ok ({c['count']} values, max abs err "
            f"{c.get('max_abs_err', '?')}) in {time.monotonic() - t0:.1f} s")


def check_bench(client: List[str], url: str, mlp: Dict[str, pathlib.Path], dev: str) -> None:
    repeat = 3
    doc = as_json(run(client + ["--host", url, "bench", str(mlp["vmx"]), "--input",
                                f"x={mlp['x']}", "--device", dev, "-n", "2", "-r", str(repeat),
                                "--json"], "bench"), "bench")
    sha = hashlib.sha256(mlp["vmx"].read_bytes()).hexdigest()
    want(doc.get("sha256") == sha, "bench", f"sha256 {doc.get('sha256')!r}, file {sha}")
    want(doc.get("repeat") == repeat and doc.get("number", 0) >= 2, "bench",
         f"repeat {doc.get('repeat')} number {doc.get('number')}")
    reps = doc.get("repeats_s", [])
    want(len(reps) == repeat and all(r > 0 for r in reps), "bench", f"repeats_s {reps}")
    w = doc.get("wall") or {}
    keys = ["mean_s", "median_s", "min_s", "max_s", "std_s"]
    want(all(isinstance(w.get(k), (int, float)) for k in keys), "bench", f"wall {w}")
    want(0 < w["min_s"] <= w["median_s"] <= w["max_s"] and w["min_s"] <= w["mean_s"] <= w["max_s"]
         and w["std_s"] >= 0, "bench", f"wall figures out of order: {w}")
    want(abs(min(reps) - w["min_s"]) <= 1e-9 * max(1.0, w["min_s"]) + 1e-12, "bench",
         f"wall.min_s {w['min_s']} is not min(repeats_s) {min(reps)}")
    fr = doc.get("first_run") or {}
    want(fr.get("wall_s", 0) > 0 and doc.get("warmup_s", -1) >= 0, "bench",
         f"first_run {fr}, warmup_s {doc.get('warmup_s')}")
    d = doc.get("device")
    if d is not None:
        dr = doc.get("device_repeats_s", [])
        want(len(dr) == repeat and 0 <= d["min_s"] <= d["median_s"] <= d["max_s"], "bench",
             f"device {d}, device_repeats_s {dr}")
    say(f"bench on {dev}: {repeat} repeats x {doc['number']} calls, JSON consistent "
        f"(figures under emulation mean nothing: wall median {w['median_s'] * 1e3:.2f} ms)")


# the first MLP run on the board compiles its OpenCL kernels under emulation
MLP_TIMEOUT_S = float(os.environ.get("VMRPC_BOARD_MLP_TIMEOUT_S", "1500"))

SP_REQ0 = b"\x00SP\x00\x00\x30\x00\x00"


def _recv_all(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            break
        buf += chunk
    return buf


def _closed(s: socket.socket, within_s: float) -> bool:
    """True when the peer closes (reads EOF or a reset) within within_s."""
    s.settimeout(within_s)
    try:
        while True:
            if not s.recv(4096):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def _reply(s: socket.socket, check: str) -> bytes:
    s.settimeout(60)
    n = _recv_all(s, 8)
    want(len(n) == 8, check, "no reply length")
    (length,) = struct.unpack(">Q", n)
    want(0 < length < 1 << 20, check, f"reply of {length} bytes")
    return _recv_all(s, length)


def check_hostile(client: List[str], url: str) -> None:
    host, port = url.rsplit("//", 1)[1].rsplit(":", 1)
    addr = (host, int(port))
    seed = hashlib.sha256(b"vmrpc board hostile").digest()
    garbage = b"".join(hashlib.sha256(seed + bytes([i])).digest() for i in range(8))

    with socket.create_connection(addr, timeout=30) as s:
        s.sendall(garbage)
        want(_closed(s, 30), "hostile", "the agent kept a connection whose SP header was garbage")
    say("hostile: 256 garbage bytes in place of the SP header: connection dropped")

    with socket.create_connection(addr, timeout=30) as s:
        s.sendall(SP_REQ0 + struct.pack(">Q", 1 << 62))
        want(_closed(s, 30), "hostile", "the agent kept a connection announcing a 2^62-byte frame")
    say("hostile: a frame announcing 2^62 bytes: connection dropped")

    def handshaken() -> socket.socket:
        s = socket.create_connection(addr, timeout=30)
        s.sendall(SP_REQ0)
        s.settimeout(60)
        hdr = _recv_all(s, 8)
        want(hdr == b"\x00SP\x00\x00\x31\x00\x00", "hostile", f"the agent's SP header {hdr!r}")
        return s

    with handshaken() as s:
        # request id 0x80000007, then an envelope length of 0xFFFFFFFF with
        # nothing behind it
        s.sendall(struct.pack(">Q", 8) + struct.pack(">I", 0x80000007) + b"\xff\xff\xff\xff")
        body = _reply(s, "hostile")
        want(body[:4] == struct.pack(">I", 0x80000007), "hostile", f"reply id {body[:4]!r}")
        want(b"malformed message" in body, "hostile", f"reply {body[4:200]!r}")
        # before Hello a connection gets one refusal, then nothing more
        # (docs/security.md, Before authentication): it ends at its deadline
        s.sendall(struct.pack(">Q", 8) + struct.pack(">I", 0x80000009) + b"\xff\xff\xff\xff")
        want(_closed(s, 60), "hostile", "a second request before Hello was served")
    with handshaken() as s:
        # over the pre-Hello cap (8 KiB): drained and refused, not stored
        big = 64 << 10
        s.sendall(struct.pack(">Q", 4 + big) + struct.pack(">I", 0x80000008) + b"\xa5" * big)
        body = _reply(s, "hostile")
        want(b"without a session" in body, "hostile", f"reply to a 64 KiB pre-Hello frame "
             f"{body[4:200]!r}")
    say("hostile: malformed envelope and a 64 KiB pre-Hello frame: answered with errors")

    p = run(client + ["--host", url, "ping", "-n", "3", "--json"], "hostile")
    say(f"hostile: the agent still serves (ping: {as_json(p, 'hostile')['median_s'] * 1e3:.2f} ms)")


PY_CHECK = r"""
import sys, numpy as np, vmrpc
url, vmx, x, y = sys.argv[1:5]
with vmrpc.connect(url) as s:
    cpu = [d for d in s.info["devices"] if d["selector"] == "cpu"][0]
    assert cpu["platform"].split()[-1] == "aarch64", cpu["platform"]
    ex = s.upload(vmx)
    for dev in sys.argv[5:]:
        assert dev in s.devices, (dev, s.devices)
        with s.create_vm(ex, device=dev) as vm:
            out = np.asarray(vm["main"](np.load(x)))
        ref = np.load(y)
        assert out.shape == ref.shape, (dev, out.shape, ref.shape)
        err = float(np.max(np.abs(out - ref)))
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
        print(f"{dev} ({cpu['platform']}): {out.shape} matches, max abs err {err:.3g}")
"""


def check_python(venv_py: pathlib.Path, url: str, mlp: Dict[str, pathlib.Path],
                 devices: List[str]) -> None:
    if not venv_py.exists():
        say(f"python: skipped ({venv_py} does not exist: scripts/test.sh's python suite makes it)")
        return
    p = run([str(venv_py), "-c", PY_CHECK, url, str(mlp["vmx"]), str(mlp["x"]), str(mlp["y"]),
             *devices], "python")
    for line in p.stdout.splitlines():
        say(f"python: vmrpc package, {line}")


# ---- the run ----------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--native-build", required=True, type=pathlib.Path)
    ap.add_argument("--board-build", required=True, type=pathlib.Path)
    ap.add_argument("--sysroot", required=True, type=pathlib.Path)
    ap.add_argument("--emulator", default="qemu-aarch64-static")
    ap.add_argument("--break", dest="brk", choices=sorted(BREAKS))
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--start-s", type=float, default=120)
    ap.add_argument("--term-s", type=float, default=20)
    a = ap.parse_args()
    if a.self_test:
        return self_test(a)
    try:
        board(a, a.brk)
    except Failed as e:
        say(f"FAILED {e}")
        return 1
    say("every check passed")
    return 0


def self_test(a) -> int:
    bad = []
    for mode, check in sorted(BREAKS.items()):
        say(f"self-test: --break {mode} must fail at '{check}'")
        try:
            board(a, mode)
        except Failed as e:
            ok = e.check == check
            say(f"self-test: --break {mode}: failed at '{e.check}' ({e}) -> "
                f"{'as it must' if ok else 'WRONG CHECK'}")
            if not ok:
                bad.append(mode)
            continue
        say(f"self-test: --break {mode}: every check PASSED, which it must not")
        bad.append(mode)
    if bad:
        say(f"FAILED self-test: {bad}")
        return 1
    say(f"self-test: each of the {len(BREAKS)} breaks was caught")
    return 0


def emulated_pocl_env(brd: pathlib.Path, root: pathlib.Path, emulator: str) -> Dict[str, str]:
    """The environment for the board's PoCL under qemu-user -L ROOT.

    Two things differ from a real board, both because qemu-user maps the
    guest's absolute paths into ROOT only where they have no '..' and never
    for exec:
    - the ICD names libpocl by its path in ROOT: PoCL finds its kernel
      library and headers relative to where it was loaded from
      (LIBDIR/../../share/pocl), which qemu 7.2 does not map into ROOT;
    - PoCL's clang links each kernel with the linker it finds on PATH as
      aarch64-unknown-linux-gnu-ld (before plain `ld`, which exec would run
      as the host's x86-64 ld): a wrapper that runs ROOT's aarch64 ld.bfd
      under the same emulator.
    """
    emu = brd / "emu"
    (emu / "vendors").mkdir(parents=True, exist_ok=True)
    (emu / "bin").mkdir(exist_ok=True)
    icd = (root / "etc" / "OpenCL" / "vendors" / "pocl.icd").read_text().strip()
    lib = pathlib.Path(icd) if icd.startswith("/") else root / "usr/lib/aarch64-linux-gnu" / icd
    (emu / "vendors" / "pocl.icd").write_text(f"{root}{lib}\n" if icd.startswith("/") else f"{lib}\n")
    ld = emu / "bin" / "aarch64-unknown-linux-gnu-ld"
    ld.write_text(f'#!/bin/sh\nexec {emulator} -L "{root}" "{root}/usr/bin/ld.bfd" "$@"\n')
    ld.chmod(0o755)
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env["OCL_ICD_VENDORS"] = str(emu / "vendors")
    env["POCL_CACHE_DIR"] = str(board_pocl_cache(brd))
    env["PATH"] = f"{emu / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
    return env


def board_pocl_cache(brd: pathlib.Path) -> pathlib.Path:
    """PoCL's kernel cache for the aarch64 device: VMRPC_BOARD_POCL_CACHE_DIR
    (scripts/board-aarch64.sh sets it to one kept between clones) or brd's own."""
    kept = os.environ.get("VMRPC_BOARD_POCL_CACHE_DIR")
    return pathlib.Path(kept) if kept else brd / "pocl-cache"


def start_board_agent(brd: pathlib.Path, root: pathlib.Path, log: pathlib.Path,
                      emulator: str = "qemu-aarch64-static",
                      start_s: float = 120, env: Optional[Dict[str, str]] = None) -> Agent:
    """The aarch64 vmagent of brd under emulation, with root's PoCL (the farm demo's board)."""
    # --cache-dir '': no on-disk program cache. Saving a program's binary
    # makes PoCL compile every kernel of the program (each operator family's
    # program holds dozens), where running the MLP needs a few: under
    # emulation that is minutes of CPU per program. PoCL keeps its own
    # kernel cache (POCL_CACHE_DIR) all the same.
    cmd = [emulator, "-L", str(root), str(brd / "agent" / "vmagent"), "--listen",
           "tcp://127.0.0.1:0", "--cache-dir", "", "--log-level", "warn"]
    say(f"aarch64 agent: {' '.join(cmd)}")
    return Agent(cmd, env or emulated_pocl_env(brd, root, emulator), log, start_s)


def board(a, brk: Optional[str]) -> None:
    nat, brd, root = a.native_build.resolve(), a.board_build.resolve(), a.sysroot.resolve()
    client = [str(nat / "client" / "vmclient")]
    emu = [a.emulator, "-L", str(root)]
    work = pathlib.Path(tempfile.mkdtemp(prefix="board.", dir=brd))
    env = emulated_pocl_env(brd, root, a.emulator)
    if brk == "no-opencl":
        env["OCL_ICD_VENDORS"] = str(work / "no-vendors")
    agents: List[Agent] = []
    try:
        gen = nat / "examples" / "vmrpc-gen-model"
        mlp = {"vmx": work / "mlp.vmx", "x": work / "mlp_x.npy", "y": work / "mlp_y.npy"}
        run([str(gen), "mlp", "--seed", "7", "--out", str(mlp["vmx"]), "--input", str(mlp["x"]),
             "--expected", str(mlp["y"])], "model")

        log = work / "agent-aarch64.log"
        if brk == "native":
            say("aarch64 agent: broken on purpose: the native x86-64 vmagent in its place")
            ag = Agent([str(nat / "agent" / "vmagent"), "--listen", "tcp://127.0.0.1:0",
                        "--cache-dir", str(work / "cache"), "--log-level", "warn"],
                       env, log, a.start_s)
        else:
            if brk == "no-opencl":
                say("aarch64 agent: broken on purpose: started without its OpenCL driver")
            ag = start_board_agent(brd, root, log, a.emulator, a.start_s, env=env)
        agents.append(ag)
        say(f"aarch64 agent up at {ag.url} after {ag.start_s:.1f} s")

        devices = check_info(client, ag.url, "aarch64", True)
        if brk == "crash":
            ag.proc.send_signal(signal.SIGKILL)
            ag.proc.wait()
        t0 = time.monotonic()
        check_mlp(client, ag.url, mlp, devices)
        check_bench(client, ag.url, mlp, devices[-1])
        check_hostile(client, ag.url)
        check_python(nat / "venv-py" / "bin" / "python", ag.url, mlp, devices)
        say(f"driving the aarch64 agent took {time.monotonic() - t0:.1f} s; the agent used "
            f"{ag.cpu_s():.1f} s of CPU (most of it PoCL compiling the MLP's kernels under "
            f"emulation when {board_pocl_cache(brd)} is cold)")
        if brk == "hang":
            ag.proc.send_signal(signal.SIGSTOP)
        t0 = time.monotonic()
        rc = ag.terminate(a.term_s)
        want(rc == 0, "sigterm", f"the agent exited {rc} on SIGTERM, not 0 "
             f"(log: {ag.log.read_text()[-1500:]!r})")
        say(f"sigterm: the aarch64 agent exited 0 after {time.monotonic() - t0:.2f} s")

        # the other way round: the aarch64 client against the native agent
        nenv = dict(os.environ)
        nenv.pop("LD_PRELOAD", None)
        nat_agent = Agent([str(nat / "agent" / "vmagent"), "--listen", "tcp://127.0.0.1:0",
                           "--cache-dir", str(work / "cache-native"), "--log-level", "warn"],
                          nenv, work / "agent-native.log", 60)
        agents.append(nat_agent)
        bclient = emu + [str(brd / "client" / "vmclient")]
        ndevs = check_info(bclient, nat_agent.url, os.uname().machine, True)
        check_mlp(bclient, nat_agent.url, mlp, ndevs, env=nenv)
        say("reverse: the aarch64 vmclient (under qemu) drove the native agent")
        rc = nat_agent.terminate(a.term_s)
        want(rc == 0, "sigterm", f"the native agent exited {rc} on SIGTERM")
    finally:
        for ag in agents:
            ag.kill()
        subprocess.run(["rm", "-rf", str(work)], check=False)


if __name__ == "__main__":
    sys.exit(main())
