"""What the farm lets in: no listening beyond loopback without mutual TLS,
and the agents' token kept out of the engine (docs/farm.md, *Security*)."""

from __future__ import annotations

import pathlib
import secrets
import ssl
import subprocess
import sys
import time
from typing import Any, List, Tuple

import cloudpickle
import numpy as np
import pytest

import vmrpc
from conftest import Mlp
from farm_proc import Agent, Head, Node, farm_cmd
from vmrpc_farm import Farm, JobSpec, Where
from vmrpc_farm import engine, keeper
from vmrpc_farm.keeper import with_token

# The functions below run in the head and in the node's engine process.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(farm_cmd() + list(args), capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("listen", ["0.0.0.0:18786", "192.0.2.1:18786", "[::]:18786"])
def test_head_refuses_to_listen_beyond_loopback_without_tls(listen: str) -> None:
    # Refused before anything is bound (192.0.2.1, a documentation address,
    # is not this machine's: a head that tried would fail to bind instead).
    r = _run("head", "--listen", listen, "--lifetime", "5")
    assert r.returncode == 2, r.stderr
    host = listen.rpartition(":")[0]
    assert r.stderr.startswith(f"vmrpc-farm: refusing to listen on {host}:18786 without TLS")
    assert "pass --tls-ca, --tls-cert and --tls-key" in r.stderr
    assert "listening" not in r.stdout


def test_nodes_and_clients_refuse_a_head_beyond_loopback_without_tls(mlp: Mlp) -> None:
    # A node's workers would listen in the clear; a client loads what the head sends.
    want = "vmrpc-farm: refusing to use the head at 192.0.2.1:18786 without TLS"
    for args in (
        ["serve", "--agent", "tcp://127.0.0.1:1", "--lifetime", "5"],
        ["status"],
        ["run", str(mlp.vmx), str(mlp.x)],
    ):
        r = _run(*args, "--address", "192.0.2.1:18786")
        assert r.returncode == 2 and r.stderr.startswith(want), (args, r.stderr)
    with pytest.raises(ValueError, match="refusing to use the head at tcp://10.1.2.3:8786"):
        Farm("tcp://10.1.2.3:8786")
    # With TLS the same addresses pass (nothing is dialled here).
    engine.require_tls_beyond_loopback("0.0.0.0", 8786, tls=True)
    assert engine.normalize_address("10.1.2.3:8786", tls=True) == "tls://10.1.2.3:8786"
    for host in ("127.0.0.1", "127.5.0.1", "::1", "localhost"):
        engine.require_tls_beyond_loopback(host, 8786, tls=False)


def _hello(token: bytes = b"") -> bytes:
    # SP request id, then envelope length and Request{id: 1, hello: {1, 1, "c", token}}.
    hello = b"\x08\x01\x10\x01\x1a\x01c" + (b"\x22" + bytes([len(token)]) + token if token else b"")
    req = b"\x08\x01" + b"\x52" + bytes([len(hello)]) + hello
    return b"\x80\x00\x00\x07" + len(req).to_bytes(4, "little") + req


def test_keeper_puts_the_token_into_hello_only() -> None:
    got = with_token(_hello(), b"sekrit")
    assert got == _hello(b"sekrit")
    assert with_token(_hello(b"guess"), b"sekrit") == _hello(b"sekrit")  # replaced
    ping = b"\x80\x00\x00\x07" + (4).to_bytes(4, "little") + b"\x08\x01\xea\x01\x00"
    assert with_token(ping, b"sekrit") == ping
    for junk in (b"", b"\x00\x00\x00\x01" * 9, _hello()[:-3], b"\x80\x00\x00\x07\x05\x00\x00\x00\xff"):
        assert with_token(junk, b"sekrit") == junk


def run_one_job(farm: Farm, cond: str, agent: Agent, mlp: Mlp) -> Any:
    """Waits until agent is up under cond, runs the MLP on it, checks the
    output; the agent's view."""
    where = [Where.parse(cond)]
    for _ in range(600):
        if farm.select(where):
            break
        time.sleep(0.1)
    (view,) = farm.select(where)
    assert view.props["agent"] == agent.url
    spec = JobSpec("run", "mlp.vmx", mlp.vmx.read_bytes(), args=(np.load(mlp.x),))
    (job,) = farm.dispatch(spec, where, mode="any")
    assert job.state == "ok", job.to_dict()
    np.testing.assert_allclose(job.outputs[0], np.load(mlp.y), rtol=1e-5, atol=1e-6)
    return view


def find_in_memory(halves: Tuple[bytes, bytes]) -> List[str]:
    """The mappings of this process that hold halves[0] + halves[1] (it is
    never built here: the first half is searched, then the second compared)."""
    first, second = halves
    found = []
    with open("/proc/self/maps") as f:
        maps = f.read().splitlines()
    with open("/proc/self/mem", "rb", buffering=0) as mem:
        for line in maps:
            parts = line.split()
            if parts[1][0] != "r" or (len(parts) > 5 and parts[5] in ("[vvar]", "[vsyscall]")):
                continue
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            at = lo
            while at < hi:
                n = min(hi - at, 16 << 20)
                try:
                    mem.seek(at)
                    buf = mem.read(n + len(first) + len(second) if at + n < hi else n)
                except (OSError, ValueError, OverflowError):
                    break
                i = buf.find(first)
                while 0 <= i < n:
                    if buf[i + len(first) : i + len(first) + len(second)] == second:
                        found.append(line)
                        break
                    i = buf.find(first, i + 1)
                at += n
    return found


def test_token_stays_in_the_keeper(
    workdir: pathlib.Path, tmp_path: pathlib.Path, head: Head, mlp: Mlp
) -> None:
    token = secrets.token_hex(24)
    halves = (token[:24].encode(), token[24:].encode())
    tf = tmp_path / "token"
    tf.write_text(token + "\n")
    tf.chmod(0o600)
    agent = Agent(tmp_path / "cache", "--token-file", str(tf))
    node = farm = None
    try:
        node = Node(
            tmp_path, head.address, [agent], ["test=token"], name="token-node",
            extra=["--token-file", str(tf)],
        )
        farm = Farm(head.address)
        # Jobs work: the agent takes only its token, which the keeper adds.
        view = run_one_job(farm, "test=token", agent, mlp)
        # Nowhere in the head's memory (task specs, metadata, worker info)...
        assert farm.client.run_on_scheduler(_scan_scheduler, halves) == []
        # ...nor in the memory of the process that runs the node's jobs.
        per_worker = farm.client.run(find_in_memory, halves, workers=[view.worker])
        assert per_worker == {view.worker: []}
        # That process reaches the agent only through the keeper's socket,
        # which no other process may use.
        dial = farm.client.run(_dial_of, workers=[view.worker])[view.worker]
        assert dial.startswith("ipc://") and dial != agent.url
        with pytest.raises(vmrpc.VMError):
            vmrpc.connect(dial, connect_timeout=3, timeout=3)
        node.wait_line("vmrpc-farm serve: refused a connection to the relay of")
        # And without the keeper the agent is closed to it.
        with pytest.raises(vmrpc.Unauthenticated):
            vmrpc.connect(agent.url, connect_timeout=3)
    finally:
        if farm is not None:
            farm.close()
        if node is not None:
            assert node.stop() == 0, node.log.read_text()
        agent.stop()


def _scan_scheduler(halves: Tuple[bytes, bytes], dask_scheduler: Any = None) -> List[str]:
    return find_in_memory(halves)


def _dial_of(dask_worker: Any = None) -> str:
    from vmrpc_farm.jobs import slot_of

    return str(slot_of(str(dask_worker.name)).dial)


def test_keeper_relays_to_a_tls_agent(
    tmp_path: pathlib.Path, head: Head, mlp: Mlp, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A tls+tcp:// agent with a token: the keeper dials it with TLS, verified
    # against the system's CAs (here SSL_CERT_FILE, the test's CA), as
    # vmrpc.connect does without tls_ca.
    from test_farm import make_cert

    make_cert(tmp_path, "agent-ca")
    cert, key = make_cert(tmp_path, "agent", ca="agent-ca", san="DNS:127.0.0.1,IP:127.0.0.1")
    token = secrets.token_hex(16)
    tf = tmp_path / "token"
    tf.write_text(token + "\n")
    tf.chmod(0o600)
    agent = Agent(
        tmp_path / "cache", "--listen", "tls+tcp://127.0.0.1:0", "--tls-cert", cert,
        "--tls-key", key, "--token-file", str(tf),
    )
    # The keeper checks the agent's certificate: not signed by a CA it trusts,
    # no connection (so the token is never sent).
    with pytest.raises(ssl.SSLCertVerificationError):
        keeper._dial(agent.url, 10)
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "agent-ca.pem"))
    keeper._dial(agent.url, 10).close()
    node = None
    try:
        assert agent.url.startswith("tls+tcp://127.0.0.1:")
        node = Node(
            tmp_path, head.address, [agent], ["test=tls-agent"], name="tls-agent-node",
            extra=["--token-file", "-"],
            stdin=token + "\n",
        )
        with Farm(head.address) as farm:
            run_one_job(farm, "test=tls-agent", agent, mlp)
    finally:
        if node is not None:
            assert node.stop() == 0, node.log.read_text()
        agent.stop()
