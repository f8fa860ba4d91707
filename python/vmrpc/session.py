"""Sessions, executables and VMs: the Python face of libvmclient."""

from __future__ import annotations

import functools
import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import _core
from . import compiler as _compiler
from .compiler import Compiled
from .results import CompareResult, ProfileReport, TimeResult

__all__ = ["connect", "Session", "Executable", "VirtualMachine", "Function", "Shape"]

PathLike = Union[str, "os.PathLike[str]"]


class Shape(Tuple[int, ...]):
    """A shape value (``R.Shape``): what a function returns for ``shape_of``,
    and how to pass a shape parameter (``vm.set_input("f", Shape((2, 3)))``)."""

    def __repr__(self) -> str:
        return f"Shape({tuple(self)!r})"


def _ms(seconds: Optional[float], what: str) -> int:
    if seconds is None:
        return 0
    if seconds <= 0:
        raise ValueError(f"{what} must be > 0 seconds (None for the default), got {seconds!r}")
    return max(1, min(int(round(seconds * 1000)), 2**31 - 1))


def connect(
    url: str = "tcp://127.0.0.1:9090",
    *,
    token: Optional[str] = None,
    token_file: Optional[PathLike] = None,
    tls_ca: Optional[PathLike] = None,
    tls_cert: Optional[PathLike] = None,
    tls_key: Optional[PathLike] = None,
    timeout: Optional[float] = None,
    connect_timeout: Optional[float] = None,
    long_timeout: Optional[float] = None,
    client_name: Optional[str] = None,
) -> "Session":
    """Connects to a vmagent and opens a session.

    url: ``tcp://HOST:PORT``, ``tls+tcp://HOST:PORT`` or ``ipc:///PATH``.
    token / token_file: the agent's token (token_file: its first line).
    tls_ca: PEM CA bundle to verify a ``tls+tcp://`` agent; tls_cert/tls_key:
    a client certificate. timeout: seconds any one request may take (default
    30); connect_timeout: dial + Hello (default 5); long_timeout: the most an
    invoke, time_evaluator or profile waits (default: no limit; past it the
    run is cancelled on the agent and DeadlineExceeded raised).
    """
    if token is not None and token_file is not None:
        raise ValueError("give token or token_file, not both")
    if token_file is not None:
        with open(token_file, encoding="utf-8") as f:
            token = f.readline().rstrip("\r\n")
        if not token:
            raise ValueError(f"{os.fspath(token_file)}: the first line (the token) is empty")
    conn = _core.Connection(
        url,
        token,
        None if tls_ca is None else os.fspath(tls_ca),
        None if tls_cert is None else os.fspath(tls_cert),
        None if tls_key is None else os.fspath(tls_key),
        _ms(connect_timeout, "connect_timeout"),
        _ms(timeout, "timeout"),
        _ms(long_timeout, "long_timeout"),
        client_name,
    )
    return Session(conn)


class Session:
    """A connection to one agent and the session it holds there.

    Everything the session made on the agent (executables, VMs) is freed when
    it is closed (``close()``, ``with``, or garbage collection). Calls may
    come from several threads at once; one VM serves one call at a time (a
    second gets FailedPrecondition "busy").
    """

    def __init__(self, conn: "_core.Connection") -> None:
        self._conn = conn
        self._info: Dict[str, Any] = conn.info()

    # -- connection ---------------------------------------------------------
    @property
    def url(self) -> str:
        return str(self._info["url"])

    @property
    def info(self) -> Dict[str, Any]:
        """What the agent said at connect time: version, protocol, session,
        devices (list of dicts) and limits (dict)."""
        return self._info

    @property
    def devices(self) -> List[str]:
        """The agent's device selectors (``"opencl:0"``, ``"cpu"``, ...)."""
        return [d["selector"] for d in self._info["devices"]]

    @property
    def closed(self) -> bool:
        return bool(self._conn.closed)

    def close(self) -> None:
        """Ends the session; everything it held on the agent is freed."""
        self._conn.close()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"session {self._info['session']}"
        return f"<vmrpc.Session {self.url} ({state})>"

    def ping(self) -> float:
        """One round trip; returns its seconds."""
        return float(self._conn.ping())

    def stats(self) -> Dict[str, Any]:
        """The agent's counters: this session's memory, VMs, executables and
        transfers, its allocators, and agent-wide sessions, bytes, store and
        RSS (docs/protocol.md, Stats)."""
        return dict(self._conn.stats())

    def state(self) -> Dict[str, Any]:
        """The agent's host as Linux exposes it without root: ``cpus``
        (``cur_mhz``, ``max_mhz``, ``policy_max_mhz``, ``governor``),
        ``thermal_zones`` (``temp_c``, ``trip_points``), ``devfreq``,
        ``loadavg`` and the agent's ``sessions`` / ``busy_sessions``. None
        where the host does not expose a figure, never a guess
        (docs/protocol.md, DeviceState)."""
        return dict(self._conn.device_state())

    def compare(
        self,
        a: Union[PathLike, bytes, bytearray, memoryview, Compiled, "Executable"],
        b: Union[PathLike, bytes, bytearray, memoryview, Compiled, "Executable"],
        inputs: Optional[Mapping[str, Any]] = None,
        *,
        func: str = "main",
        func_b: Optional[str] = None,
        device: Union[None, str, Sequence[str]] = None,
        threshold: float = 0.02,
        confidence: float = 0.95,
        min_rounds: int = 10,
        max_rounds: int = 100,
        max_seconds: float = 300.0,
        round_ms: int = 1,
        repeats: int = 20,
        cooldown_ms: int = 0,
    ) -> CompareResult:
        """Is b faster, slower or the same as a on this agent's device?
        ``vmclient compare`` (docs/timing.md, Compare): both on the same
        device with the same inputs (a dict name -> array for ``func``),
        rounds A B, B A, ... until the interval of the ratio B/A decides or
        the budget runs out. Returns a :class:`CompareResult` (``verdict``
        "same", "faster", "slower" or "inconclusive", ``ratio``, ``ci``,
        every round, the device's state before and after)."""
        fb = func if func_b is None else func_b
        vms = []
        try:
            for model, f in ((a, func), (b, fb)):
                exe = model if isinstance(model, Executable) else self.upload(model)
                vm = self.create_vm(exe, device)
                vms.append(vm)
                if inputs:
                    vm.set_input(f, **dict(inputs))
                vm.invoke_stateful(f)  # the first run: kernel builds, pool fills
            r = self._conn.compare(
                vms[0].id, func, vms[1].id, fb, float(threshold), float(confidence),
                int(min_rounds), int(max_rounds), float(max_seconds), int(round_ms),
                int(repeats), int(cooldown_ms),
            )
        finally:
            for vm in vms:
                vm.free()
        return CompareResult(r)

    # -- executables and VMs ------------------------------------------------
    def upload(
        self, model: Union[PathLike, bytes, bytearray, memoryview, Compiled]
    ) -> "Executable":
        """Uploads an executable: a ``.vmx`` path or its bytes, what
        :func:`vmrpc.compile` returned, or the path of a ``.onnx`` model
        (compiled here first, as ``vmrpc.compile(path)`` does: call that to
        give input shapes or constants). Its SHA-256 goes first: nothing
        more is sent when the agent's store has it."""
        if isinstance(model, Compiled):
            model = model.data
        if isinstance(model, (bytes, bytearray, memoryview)):
            r = self._conn.upload_memory(model)
        else:
            path = os.fspath(model)
            if path.endswith(".onnx"):
                r = self._conn.upload_memory(_compiler.compile(path).data)
            else:
                r = self._conn.upload_file(path)
        return Executable(self, *r)

    def create_vm(
        self,
        exe: "Executable",
        device: Union[None, str, Sequence[str]] = None,
        memory: Union[None, str, Mapping[str, str]] = None,
        exec_mode: Optional[str] = None,
    ) -> "VirtualMachine":
        """Creates a VM running exe.

        device: a selector of ``devices`` or a list of them (the first is
        where inputs go); None = the agent's first device. memory: the
        allocator, ``"pooled"`` (default) or ``"naive"``, for every device,
        or a dict selector -> allocator. exec_mode: ``"bytecode"`` (default)
        or ``"compiled"``.
        """
        if not isinstance(exe, Executable) or exe._session is not self:
            raise TypeError("exe must be an Executable uploaded in this session")
        if device is None:
            sels: List[str] = list(memory) if isinstance(memory, Mapping) else []
        elif isinstance(device, str):
            sels = [s for s in device.split(",") if s]
        else:
            sels = list(device)
        specs: List[Tuple[str, Optional[str]]]
        if isinstance(memory, Mapping):
            unknown = [k for k in memory if k not in sels]
            if unknown:
                raise ValueError(f"memory names devices the VM does not use: {unknown}")
            specs = [(s, memory.get(s)) for s in sels]
        else:
            if not sels and memory is not None:
                sels = self.devices[:1]  # the agent's first device, with this allocator
            specs = [(s, memory) for s in sels]
        vm_id = self._conn.create_vm(exe.id, specs, exec_mode)
        return VirtualMachine(self, exe, vm_id, [s for s, _ in specs] or self.devices[:1])


class Executable:
    """An executable loaded in a session (``Session.upload``)."""

    def __init__(
        self, session: Session, exec_id: int, store_hit: bool, bytes_sent: int, sha256: str
    ) -> None:
        self._session = session
        self.id: int = exec_id
        self.store_hit: bool = store_hit  # the agent had it: nothing was sent
        self.bytes_sent: int = bytes_sent
        self.sha256: str = sha256  # hex
        self._freed = False

    def free(self) -> None:
        """Drops the session's reference (VMs made from it keep it alive)."""
        if not self._freed:
            self._freed = True
            if not self._session.closed:
                self._session._conn.free_exec(self.id)

    def __repr__(self) -> str:
        how = "store hit" if self.store_hit else f"{self.bytes_sent} bytes sent"
        return f"<vmrpc.Executable {self.sha256[:16]}... ({how})>"


class Function(functools.partial):  # type: ignore[type-arg]
    """``vm["main"]``: call it with the function's parameters (positional,
    or by name); returns its result (NumPy arrays; tuples stay tuples).
    Inputs, the run and the outputs are one C call: a Function is a
    ``functools.partial`` of it, with no Python code in between."""

    @property
    def name(self) -> str:
        return str(self.args[1])

    def __repr__(self) -> str:
        return f"<vmrpc.Function {self.name} of VM {self.args[0]}>"


class VirtualMachine:
    """A VM on the agent (``Session.create_vm``), with TVM's VirtualMachine
    API: set_input / invoke_stateful / get_outputs, ``vm["f"](...)``,
    time_evaluator and profile.

    Inputs: NumPy arrays (or anything ``numpy.asarray`` takes; read in place
    when C-contiguous), Python bool/int/float/str scalars, and ``Shape``.
    Outputs: NumPy arrays (scalars as Python scalars, shapes as ``Shape``),
    nested tuples as tuples.
    """

    def __init__(self, session: Session, exe: Executable, vm_id: int, devices: List[str]):
        self._session = session
        self._conn = session._conn
        self._exe = exe  # the VM keeps it alive on the agent anyway
        self.id: int = vm_id
        self.devices: List[str] = devices
        self._freed = False
        self._funcs: Dict[str, Function] = {}

    def __getitem__(self, func: str) -> Function:
        f = self._funcs.get(func)
        if f is None:
            f = self._funcs[func] = Function(self._conn.call, self.id, func)
        return f

    def set_input(self, func: str, *args: Any, **kwargs: Any) -> None:
        """Sets func's parameters: positional ones by index from 0, keyword
        ones by name. Tensors travel straight from the arrays' memory."""
        self._conn.set_inputs(self.id, func, args, kwargs)

    def invoke_stateful(self, func: str, deadline: Optional[float] = None) -> None:
        """Runs func on the inputs set; the result stays on the agent.
        deadline (seconds): the agent stops the run past it
        (DeadlineExceeded). Ctrl-C cancels the run on the agent."""
        self._conn.invoke(self.id, func, _ms(deadline, "deadline"))

    def get_outputs(self, func: str) -> Any:
        """The whole result of func's last invoke_stateful: an array, a
        scalar, or a tuple (nested as the function built it)."""
        return self._conn.get_output(self.id, func, ())

    def get_output(self, func: str, *path: int, out: Any = None) -> Any:
        """One field of the result (``get_output("f", 1, 0)`` is
        ``result[1][0]``). With ``out=`` (a C-contiguous array of the
        output's dtype and shape) the tensor is written into it and out is
        returned: no allocation, for loops."""
        if out is not None:
            return self._conn.get_output_into(self.id, func, path, out)
        return self._conn.get_output(self.id, func, path)

    def cancel(self) -> None:
        """Asks the agent to stop the run in progress on this VM (from
        another thread); that invoke raises Cancelled."""
        self._conn.cancel(self.id)

    def time_evaluator(
        self,
        func: str,
        number: int = 10,
        repeat: int = 1,
        min_repeat_ms: int = 0,
        limit_zero_time_iterations: int = 100,
        cooldown_interval_ms: int = 0,
        repeats_to_cooldown: int = 1,
        cache_flush_bytes: int = 0,
    ) -> Callable[..., TimeResult]:
        """TVM's time_evaluator: returns a function that, called with func's
        inputs (or none, to use those already set), times func on the agent
        and returns a :class:`TimeResult`. Ctrl-C cancels it on the agent."""
        params = (
            int(number),
            int(repeat),
            int(min_repeat_ms),
            int(limit_zero_time_iterations),
            int(cooldown_interval_ms),
            int(repeats_to_cooldown),
            int(cache_flush_bytes),
        )

        def evaluator(*args: Any, **kwargs: Any) -> TimeResult:
            if args or kwargs:
                self._conn.set_inputs(self.id, func, args, kwargs)
            return TimeResult(self._conn.time_evaluate(self.id, func, *params))

        return evaluator

    def profile(self, func: str, *args: Any, **kwargs: Any) -> ProfileReport:
        """Runs func once with per-operator timing (inputs as set_input, or
        those already set) and returns the :class:`ProfileReport`."""
        if args or kwargs:
            self._conn.set_inputs(self.id, func, args, kwargs)
        rows, total = self._conn.profile(self.id, func)
        return ProfileReport(rows, total)

    def free(self) -> None:
        """Frees the VM and what it holds on the device."""
        if not self._freed:
            self._freed = True
            if not self._session.closed:
                self._conn.free_vm(self.id)

    def __enter__(self) -> "VirtualMachine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.free()

    def __del__(self) -> None:
        try:
            self.free()
        except Exception:  # the session may be gone; the agent frees it then
            pass

    def __repr__(self) -> str:
        return f"<vmrpc.VirtualMachine {self.id} on {','.join(self.devices)}>"


