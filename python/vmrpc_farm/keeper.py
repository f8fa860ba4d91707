"""The node's token keeper: ``vmrpc-farm serve`` as two processes.

The engine runs whatever a client with the farm's certificate submits, in
the process of the worker that holds an agent's lease. So the agents'
token never goes there. ``serve`` is

- the keeper (this module, the process started as ``serve``): it reads the
  token, makes itself non-dumpable (so that a process of the same user can
  neither ptrace it nor read its memory), and for each agent listens on a
  Unix socket in a private directory (mode 0700) that only the engine
  process may use (its pid, checked with SO_PEERCRED). Each connection there
  is relayed to the agent byte for byte, except that the token is written
  into every Hello on the way. The keeper speaks to no one but the agents
  and its engine process: it has no connection to the head;
- the engine process (:mod:`vmrpc_farm._node`, started by the keeper with
  nothing secret in its arguments or environment): the Dask client and
  workers of :func:`engine.run_node`, which reach each agent through its
  socket, as ``ipc://``. A job there gets sessions, never the token, and the
  socket is useless off the node (and to any other process on it).

The wire format (docs/protocol.md R1): an 8-byte SP header each way, then
messages; on tcp:// and tls+tcp:// each is a big-endian u64 length and the
body, on ipc:// a byte 01 first. A body is SP words (the last with its high
bit set), a little-endian u32 N, N bytes of a protobuf ``Request``, payload.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

__all__ = ["with_token", "Relay", "serve"]

SP_REQ0 = b"\x00SP\x00\x00\x30\x00\x00"
_INSPECT = 64 * 1024  # a Hello is far smaller (the agent takes 8 KiB before one)
_CHUNK = 1 << 20
_STOP_GRACE = 60.0  # seconds the engine process has to stop after SIGTERM
_HELLO_FIELD, _TOKEN_FIELD = 10, 4  # Request.hello, HelloRequest.token (proto/vmrpc.proto)


# -- protobuf, just enough to put a token into a Hello ------------------------
def _varint(buf: bytes, i: int) -> Tuple[int, int]:
    v = shift = 0
    while True:
        if i >= len(buf) or shift > 63:
            raise ValueError("truncated varint")
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def _put_varint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _fields(buf: bytes) -> List[Tuple[int, int, int, int]]:
    """(field number, start of the field, start of its value, end) for each
    field of a protobuf message; ValueError when it is not one."""
    out = []
    i = 0
    while i < len(buf):
        start = i
        key, i = _varint(buf, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            _, j = _varint(buf, i)
        elif wire == 1:
            j = i + 8
        elif wire == 2:
            n, i = _varint(buf, i)
            j = i + n
        elif wire == 5:
            j = i + 4
        else:
            raise ValueError(f"wire type {wire}")
        if num == 0 or j > len(buf):
            raise ValueError("bad field")
        out.append((num, start, i, j))
        i = j
    return out


def _ld(num: int, value: bytes) -> bytes:
    return _put_varint(num << 3 | 2) + _put_varint(len(value)) + value


def with_token(body: bytes, token: bytes) -> bytes:
    """body with token as the token of its Hello (any token the sender put
    there replaced); any other message, or one that does not parse,
    unchanged (the agent then judges it, without the token)."""
    i = 0
    for _ in range(8):
        if i + 4 > len(body):
            return body
        (word,) = struct.unpack_from(">I", body, i)
        i += 4
        if word & 0x80000000:
            break
    else:
        return body
    if i + 4 > len(body):
        return body
    (n,) = struct.unpack_from("<I", body, i)
    env_at = i + 4
    if env_at + n > len(body):
        return body
    env = body[env_at : env_at + n]
    try:
        fields = _fields(env)
        hellos = [f for f in fields if f[0] == _HELLO_FIELD]
        if not hellos:
            return body
        out = bytearray()
        for num, start, vstart, end in fields:
            if num != _HELLO_FIELD:
                out += env[start:end]
                continue
            hello = env[vstart:end]
            kept = b"".join(
                hello[s:e] for hn, s, _, e in _fields(hello) if hn != _TOKEN_FIELD
            )
            out += _ld(_HELLO_FIELD, kept + _ld(_TOKEN_FIELD, token))
    except ValueError:
        return body
    return body[:i] + struct.pack("<I", len(out)) + bytes(out) + body[env_at + n :]


# -- the relay -----------------------------------------------------------------
def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        got = s.recv(min(n - len(buf), _CHUNK))
        if not got:
            raise ConnectionError("closed")
        buf += got
    return bytes(buf)


def _copy(src: socket.socket, dst: socket.socket, n: int) -> None:
    while n > 0:
        got = src.recv(min(n, _CHUNK))
        if not got:
            raise ConnectionError("closed")
        dst.sendall(got)
        n -= len(got)


def _dial(url: str, timeout: float) -> socket.socket:
    scheme, _, rest = url.partition("://")
    if scheme == "ipc":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        try:
            s.connect(rest)
        except OSError:
            s.close()
            raise
    else:
        host, _, port = rest.rpartition(":")
        host = host.strip("[]")
        s = socket.create_connection((host, int(port)), timeout)
        if scheme == "tls+tcp":
            # As vmrpc.connect without tls_ca: the system's CAs and the host name.
            s = ssl.create_default_context().wrap_socket(s, server_hostname=host)
    s.settimeout(None)
    return s


class Relay:
    """Listens on path (a Unix socket) for the engine process (pid set with
    :meth:`allow`) and relays each connection to the agent at url, writing
    token into every Hello."""

    def __init__(self, url: str, token: str, path: str) -> None:
        self.url = url
        self._token = token.encode()
        self.path = path
        self._pid: Optional[int] = None
        self._allowed = threading.Event()
        self._dial_error = ""
        self._lock = threading.Lock()
        self._open: List[socket.socket] = []
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(path)
        os.chmod(path, 0o600)
        self._sock.listen(64)
        self._closed = False
        threading.Thread(target=self._accept, name="vmrpc-relay", daemon=True).start()

    def allow(self, pid: int) -> None:
        self._pid = pid
        self._allowed.set()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed
            cred = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            pid, _, _ = struct.unpack("3i", cred)
            self._allowed.wait(10)  # the engine process has just been started
            if self._pid is None or pid != self._pid:
                print(
                    f"vmrpc-farm serve: refused a connection to the relay of {self.url} "
                    f"from pid {pid} (only the node's engine process, pid {self._pid}, may use it)",
                    file=sys.stderr,
                    flush=True,
                )
                conn.close()
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _track(self, *socks: socket.socket) -> bool:
        with self._lock:
            if self._closed:
                return False
            self._open.extend(socks)
            return True

    def _forget(self, *socks: socket.socket) -> None:
        with self._lock:
            for s in socks:
                if s in self._open:
                    self._open.remove(s)
                try:
                    s.close()
                except OSError:
                    pass

    def _serve(self, child: socket.socket) -> None:
        agent: Optional[socket.socket] = None
        try:
            child.settimeout(10)
            if _recv_exact(child, 8) != SP_REQ0:
                return  # not a req0 peer: the agent would close it too
            child.settimeout(None)
            try:
                agent = _dial(self.url, 10)
            except OSError as e:
                self._note_dial_error(str(e))
                return
            self._note_dial_error("")
            if not self._track(child, agent):
                return
            agent.sendall(SP_REQ0)
            child.sendall(_recv_exact(agent, 8))
            back = threading.Thread(target=self._replies, args=(agent, child), daemon=True)
            back.start()
            self._requests(child, agent)
        except (OSError, ConnectionError, ValueError):
            pass  # either side went away: so does the other
        finally:
            for s in (child, agent):
                if s is not None:
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
            self._forget(*(s for s in (child, agent) if s is not None))

    def _note_dial_error(self, why: str) -> None:
        # The engine process sees only its socket closing: say why here,
        # once per change (its health checks dial every --interval).
        with self._lock:
            changed, self._dial_error = why != self._dial_error, why
        if changed and why:
            print(
                f"vmrpc-farm serve: cannot reach the agent at {self.url}: {why}",
                file=sys.stderr,
                flush=True,
            )

    def _requests(self, child: socket.socket, agent: socket.socket) -> None:
        agent_ipc = self.url.startswith("ipc://")
        while True:
            head = _recv_exact(child, 9)
            if head[0] != 1:
                raise ValueError("not an ipc message")
            (n,) = struct.unpack(">Q", head[1:])
            if n <= _INSPECT:
                body = with_token(_recv_exact(child, n), self._token)
                agent.sendall(_frame(len(body), agent_ipc) + body)
            else:
                agent.sendall(_frame(n, agent_ipc))
                _copy(child, agent, n)

    def _replies(self, agent: socket.socket, child: socket.socket) -> None:
        agent_ipc = self.url.startswith("ipc://")
        try:
            while True:
                if agent_ipc and _recv_exact(agent, 1) != b"\x01":
                    raise ValueError("not an ipc message")
                (n,) = struct.unpack(">Q", _recv_exact(agent, 8))
                child.sendall(_frame(n, True))
                _copy(agent, child, n)
        except (OSError, ConnectionError, ValueError):
            for s in (agent, child):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        with self._lock:
            self._closed = True
            socks = list(self._open)
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        try:
            os.unlink(self.path)
        except OSError:
            pass


def _frame(n: int, ipc: bool) -> bytes:
    return (b"\x01" if ipc else b"") + struct.pack(">Q", n)


# -- serve ---------------------------------------------------------------------
def _not_dumpable() -> None:
    # PR_SET_DUMPABLE 0: no core dump, and /proc/PID/mem and ptrace only for
    # root (CAP_SYS_PTRACE): the token in this process's memory stays here.
    try:
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def serve(
    address: str,
    agents: Sequence[Tuple[str, str]],
    token: Optional[str],
    tags: Dict[str, str],
    interval: float,
    head_timeout: float,
    lifetime: Optional[float],
    tls: Optional[Any],
) -> int:
    """The keeper: relays for the agents (url, name) when there is a token,
    then the engine process (vmrpc_farm._node); its exit status."""
    _not_dumpable()
    relays: List[Relay] = []
    private = tempfile.mkdtemp(prefix="vmrpc-farm-")  # mode 0700
    child: Optional[subprocess.Popen] = None  # type: ignore[type-arg]
    stop = threading.Event()

    def on_signal(sig: int, _: Any) -> None:
        stop.set()
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        conf_agents = []
        for i, (url, name) in enumerate(agents):
            dial = url
            if token is not None:
                r = Relay(url, token, os.path.join(private, f"agent-{i}.sock"))
                relays.append(r)
                dial = f"ipc://{r.path}"
            conf_agents.append({"url": url, "name": name, "dial": dial})
        conf = {
            "parent": os.getpid(),
            "address": address,
            "agents": conf_agents,
            "tags": tags,
            "interval": interval,
            "head_timeout": head_timeout,
            "lifetime": lifetime,
            "tls": None if tls is None else [tls.ca, tls.cert, tls.key],
        }
        # stdin stays here: it may be the token (--token-file -).
        child = subprocess.Popen(
            [sys.executable, "-m", "vmrpc_farm._node", json.dumps(conf)],
            stdin=subprocess.DEVNULL,
            close_fds=True,
        )
        for r in relays:
            r.allow(child.pid)
        if stop.is_set():
            child.send_signal(signal.SIGTERM)
        stopping_since: Optional[float] = None
        while True:
            try:
                rc = child.wait(0.5)
                break
            except subprocess.TimeoutExpired:
                pass
            if stop.is_set():
                stopping_since = stopping_since or time.monotonic()
                if time.monotonic() - stopping_since > _STOP_GRACE:
                    print(
                        f"vmrpc-farm serve: the engine process did not stop within "
                        f"{_STOP_GRACE} s; killing it",
                        file=sys.stderr,
                        flush=True,
                    )
                    child.kill()
        return rc if rc >= 0 else 128 - rc
    finally:
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()
        for r in relays:
            r.close()
        try:
            os.rmdir(private)
        except OSError:
            pass
        for s, h in old.items():
            signal.signal(s, h)
