"""Sessions: connect (tokens, errors), info, ping, stats, upload, close."""

from __future__ import annotations

import hashlib
import pathlib
import socket
import subprocess

import pytest

import vmrpc

from conftest import BUILD, Agent


def test_connect_info_ping_stats(agent: Agent) -> None:
    with vmrpc.connect(agent.url, timeout=10, connect_timeout=5) as s:
        assert s.url == agent.url
        assert "cpu" in s.devices
        assert s.info["protocol"][0] == s.info["client_protocol"][0]
        assert s.info["limits"]["chunk_bytes"] > 0
        cpu = [d for d in s.info["devices"] if d["selector"] == "cpu"][0]
        assert cpu["compute_units"] >= 1
        rtt = s.ping()
        assert isinstance(rtt, float) and rtt > 0
        st = s.stats()
        assert st["session_vms"] == 0 and st["session_executables"] == 0
        assert st["agent_sessions"] >= 1 and st["requests"] >= 1
        assert isinstance(st["allocators"], list)
    assert s.closed


def test_upload_sends_nothing_when_stored(sess: vmrpc.Session, prog: pathlib.Path) -> None:
    data = prog.read_bytes()
    a = sess.upload(prog)
    assert a.sha256 == hashlib.sha256(data).hexdigest()
    b = sess.upload(str(prog))
    assert b.store_hit and b.bytes_sent == 0 and b.sha256 == a.sha256
    c = sess.upload(data)  # from memory
    assert c.store_hit and c.bytes_sent == 0
    assert sess.stats()["session_executables"] >= 1
    for e in (a, b, c):
        e.free()


def test_upload_of_new_bytes_sends_them(sess: vmrpc.Session, prog: pathlib.Path) -> None:
    # Same program plus a metadata entry nobody uploaded before: a store miss.
    data = prog.read_bytes()
    src = prog.with_suffix(".vmasm").read_text() + f'.meta nonce "{id(sess)}-{data[:4].hex()}"\n'
    text = prog.parent / "nonce.vmasm"
    text.write_text(src)
    out = prog.parent / "nonce.vmx"
    subprocess.run([str(BUILD / "client" / "vmclient"), "asm", str(text), "-o", str(out)], check=True)
    e = sess.upload(out)  # the agent's store is fresh for each test run
    assert not e.store_hit and e.bytes_sent == out.stat().st_size


def test_upload_errors(sess: vmrpc.Session, tmp_path: pathlib.Path) -> None:
    with pytest.raises(vmrpc.NotFound) as ei:
        sess.upload(tmp_path / "missing.vmx")
    assert "missing.vmx" in ei.value.message
    bad = tmp_path / "bad.vmx"
    bad.write_bytes(b"not an executable at all")
    with pytest.raises(vmrpc.InvalidArgument):
        sess.upload(bad)


def test_token(workdir: pathlib.Path, tmp_path: pathlib.Path) -> None:
    tok = tmp_path / "token"
    tok.write_text("s3cret-token-for-tests\n")
    tok.chmod(0o600)
    a = Agent(workdir / "cache", "--token-file", str(tok))
    try:
        with vmrpc.connect(a.url, token_file=tok) as s:
            assert s.ping() > 0
        with vmrpc.connect(a.url, token="s3cret-token-for-tests") as s:
            assert s.ping() > 0
        with pytest.raises(vmrpc.Unauthenticated) as ei:
            vmrpc.connect(a.url, token="wrong")
        assert ei.value.code == 16 and ei.value.code_name == "UNAUTHENTICATED"
        with pytest.raises(vmrpc.Unauthenticated):
            vmrpc.connect(a.url)
    finally:
        assert a.stop() == 0


def test_connect_errors(tmp_path: pathlib.Path) -> None:
    with socket.socket() as so:  # a port nobody listens on
        so.bind(("127.0.0.1", 0))
        port = so.getsockname()[1]
    with pytest.raises(vmrpc.Unavailable) as ei:
        vmrpc.connect(f"tcp://127.0.0.1:{port}", connect_timeout=5)
    assert isinstance(ei.value, vmrpc.VMError) and ei.value.code == 14
    with pytest.raises(vmrpc.InvalidArgument):
        vmrpc.connect("nonsense://x")
    with pytest.raises(ValueError):
        vmrpc.connect("tcp://127.0.0.1:1", timeout=-1)
    with pytest.raises(ValueError):
        vmrpc.connect("tcp://127.0.0.1:1", token="a", token_file=tmp_path / "t")


def test_closed_session_refuses_calls(agent: Agent, prog: pathlib.Path) -> None:
    s = vmrpc.connect(agent.url)
    vm = s.create_vm(s.upload(prog), device="cpu")
    s.close()
    s.close()  # twice is fine
    with pytest.raises(vmrpc.FailedPrecondition) as ei:
        s.ping()
    assert "session is closed" in ei.value.message
    with pytest.raises(vmrpc.FailedPrecondition):
        vm["ident"](1)
    vm.free()  # no-op once the session is gone


def test_session_frees_what_it_made(agent: Agent, prog: pathlib.Path) -> None:
    with vmrpc.connect(agent.url) as watcher, vmrpc.connect(agent.url) as s:
        ex = s.upload(prog)
        vms = [s.create_vm(ex, device="cpu") for _ in range(3)]
        assert s.stats()["session_vms"] == 3
        vms[0].free()
        del vms[1]  # garbage collection frees it on the agent
        assert s.stats()["session_vms"] == 1
        before = watcher.stats()["agent_sessions"]
    with vmrpc.connect(agent.url) as w2:
        assert w2.stats()["agent_sessions"] <= before - 1


def _make_ca_and_cert(d: pathlib.Path) -> None:
    # A CA and an agent certificate it signs (SAN IP and DNS 127.0.0.1),
    # plus a second CA that signed nothing; as tests/agent/test_security.c.
    (d / "ext.cnf").write_text("subjectAltName=DNS:127.0.0.1,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    run = lambda *a: subprocess.run(["openssl", *a], cwd=d, check=True, capture_output=True)  # noqa: E731
    for ca in ("ca", "other"):
        run("req", "-x509", *ec, "-days", "2", "-subj", f"/CN=vmrpc-{ca}",
            "-keyout", f"{ca}.key", "-out", f"{ca}.pem")
    run("req", *ec, "-subj", "/CN=127.0.0.1", "-keyout", "agent.key", "-out", "agent.csr")
    run("x509", "-req", "-in", "agent.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", "ext.cnf", "-out", "agent.pem")


def test_tls_with_ca(workdir: pathlib.Path, tmp_path: pathlib.Path, prog: pathlib.Path) -> None:
    _make_ca_and_cert(tmp_path)
    a = Agent(workdir / "cache", "--listen", "tls+tcp://127.0.0.1:0", "--tls-cert",
              str(tmp_path / "agent.pem"), "--tls-key", str(tmp_path / "agent.key"),
              "--device", "cpu")
    try:
        assert a.url.startswith("tls+tcp://127.0.0.1:")
        with vmrpc.connect(a.url, tls_ca=tmp_path / "ca.pem", connect_timeout=10) as s:
            vm = s.create_vm(s.upload(prog))
            assert vm["ident"](b"\x01\x02\x03").tobytes() == b"\x01\x02\x03"
        with pytest.raises(vmrpc.VMError) as ei:  # a CA that did not sign the agent's certificate
            vmrpc.connect(a.url, tls_ca=tmp_path / "other.pem", connect_timeout=10)
        assert type(ei.value) is vmrpc.Unavailable
        assert "TLS handshake with the agent" in ei.value.message
    finally:
        assert a.stop() == 0
