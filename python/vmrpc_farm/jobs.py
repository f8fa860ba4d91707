"""Jobs: what runs on a farm node, inside the engine's worker that holds
one agent's lease (one job at a time per agent).

A job is a :class:`JobSpec` (the model's bytes, the function, its inputs,
what to do); :func:`execute` runs it on the worker's agent and returns a
plain dict (JSON-ready) plus, for ``run``, the outputs. An agent that stops
answering raises :class:`AgentDown`, which the dispatcher retries on
another agent; any other failure is the job's result (``status: error``).
"""

from __future__ import annotations

import hashlib
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

import vmrpc
from vmrpc.errors import VMError  # vmrpc.VMError, spelt so that mypy sees it exported

__all__ = ["JobSpec", "Control", "AgentDown", "AgentSlot", "execute", "register_slot", "slot_of"]

KINDS = ("bench", "run", "check")


class AgentDown(Exception):
    """The agent stopped answering during a job (args: agent name, message)."""

    def __init__(self, agent: str, message: str) -> None:
        super().__init__(agent, message)
        self.agent = agent
        self.message = message

    def __str__(self) -> str:
        return f"agent {self.agent} is down: {self.message}"


@dataclass
class JobSpec:
    kind: str  # bench | run | check
    model_name: str
    model: bytes
    func: str = "main"
    args: Tuple[Any, ...] = ()
    kwargs: Dict[str, Any] = field(default_factory=dict)
    device: Optional[str] = None
    exec_mode: Optional[str] = None
    # bench: time_evaluator's parameters
    number: int = 10
    repeat: int = 1
    min_repeat_ms: int = 0
    # each repeat is the fastest of this many batches (see _best_of)
    best_of: int = 1
    # check: expected outputs in order (flattened depth-first), tolerances
    expected: List[Any] = field(default_factory=list)
    rtol: float = 1e-5
    atol: float = 1e-8
    # seconds a run may take on the agent (None: no limit)
    timeout: Optional[float] = None
    # bench: a fixed reference executable timed interleaved with the model
    # on the same device in the same job (see _bench_controlled)
    control: Optional["Control"] = None


@dataclass
class Control:
    """The reference of a control-normalized bench: an executable that
    stays the same across labels, its function and inputs."""

    name: str
    model: bytes
    func: str = "main"
    args: Tuple[Any, ...] = ()
    kwargs: Dict[str, Any] = field(default_factory=dict)


@dataclass
class AgentSlot:
    """One agent served by this node: what it is (url: the agent's address)
    and how this process reaches it (dial: the keeper's socket, which adds
    the token, or url itself when the agent has none). No token here: a job
    can run any code in this process (docs/farm.md)."""

    name: str
    url: str
    dial: Optional[str]
    props: Dict[str, Any]
    down: threading.Event = field(default_factory=threading.Event)
    down_reason: str = ""
    # bench --control jobs run on this agent so far (which VM is created
    # first alternates with it: see _bench_controlled)
    controlled: int = 0

    def connect(self, **kw: Any) -> vmrpc.Session:
        return vmrpc.connect(self.dial or self.url, **kw)

    def alive(self) -> Optional[str]:
        """None when the agent answers a fresh connect and a ping, else why not."""
        try:
            with self.connect(connect_timeout=3, timeout=5) as s:
                s.ping()
            return None
        except VMError as e:
            return str(e)


_SLOTS: Dict[str, AgentSlot] = {}
_LOCK = threading.Lock()


def register_slot(slot: AgentSlot) -> None:
    with _LOCK:
        _SLOTS[slot.name] = slot


def slot_of(worker_name: str) -> AgentSlot:
    with _LOCK:
        slot = _SLOTS.get(worker_name)
    if slot is None:
        raise RuntimeError(f"worker {worker_name!r} serves no vmrpc agent in this process")
    return slot


def _flatten(value: Any, path: str, out: List[Tuple[str, Any]]) -> None:
    if isinstance(value, tuple) and not isinstance(value, vmrpc.Shape):
        for i, v in enumerate(value):
            _flatten(v, f"{path}.{i}" if path else str(i), out)
    else:
        out.append((path or "0", value))


def _describe(value: Any) -> Dict[str, Any]:
    if isinstance(value, np.ndarray):
        return {"dtype": str(value.dtype), "shape": list(value.shape)}
    if isinstance(value, vmrpc.Shape):
        return {"dtype": "shape", "shape": [len(value)], "values": list(value)}
    return {"dtype": type(value).__name__, "shape": [], "value": repr(value)}


def _compare(got: Any, want: Any, rtol: float, atol: float) -> Dict[str, Any]:
    g = np.asarray(got)
    w = np.asarray(want)
    if g.shape != w.shape:
        return {"ok": False, "shape_ok": False, "expected_shape": list(w.shape)}
    if g.size == 0:
        return {"ok": True, "shape_ok": True, "mismatched": 0, "max_abs_err": 0.0}
    gf, wf = g.astype(np.float64), w.astype(np.float64)
    close = np.isclose(gf, wf, rtol=rtol, atol=atol)
    err = np.abs(gf - wf)
    return {
        "ok": bool(close.all()),
        "shape_ok": True,
        "mismatched": int((~close).sum()),
        "max_abs_err": float(np.nanmax(err)) if err.size else 0.0,
    }


def _run(slot: AgentSlot, spec: JobSpec, res: Dict[str, Any]) -> Optional[List[Any]]:
    t0 = time.perf_counter()
    with slot.connect(long_timeout=spec.timeout, client_name="vmrpc-farm") as s:
        exe = s.upload(spec.model)
        cvm = None
        if spec.kind == "bench" and spec.control is not None:
            res["control_first"] = slot.controlled % 2 == 1
            slot.controlled += 1
            if res["control_first"]:
                cvm = _control_vm(s, spec.control, spec.device, spec.exec_mode)
        vm = s.create_vm(exe, device=spec.device, exec_mode=spec.exec_mode)
        res["device"] = ",".join(vm.devices)
        dev = [d for d in s.info["devices"] if d["selector"] == vm.devices[0]]
        res["device_info"] = dev[0] if dev else None
        res["store_hit"] = exe.store_hit
        res["init_s"] = time.perf_counter() - t0
        if spec.kind == "bench" and spec.control is not None:
            return _bench_controlled(s, vm, cvm, spec, spec.control, res)
        if spec.kind == "bench":
            ev = vm.time_evaluator(
                spec.func, number=spec.number, repeat=spec.repeat * spec.best_of,
                min_repeat_ms=spec.min_repeat_ms,
            )
            t = ev(*spec.args, **spec.kwargs).to_dict()
            res["timing"] = t if spec.best_of == 1 else _best_of(t, spec.best_of)
            res["status"] = "ok"
            return None
        out = vm[spec.func](*spec.args, **spec.kwargs)
        leaves: List[Tuple[str, Any]] = []
        _flatten(out, "", leaves)
        res["outputs"] = [dict(name=n, **_describe(v)) for n, v in leaves]
        if spec.kind == "check":
            ok = len(spec.expected) <= len(leaves)
            for i, want in enumerate(spec.expected):
                if i >= len(leaves):
                    break
                c = _compare(leaves[i][1], want, spec.rtol, spec.atol)
                res["outputs"][i]["check"] = c
                ok = ok and c["ok"]
            if len(spec.expected) > len(leaves):
                res["error"] = (
                    f"{len(spec.expected)} expected outputs but the function returned {len(leaves)}"
                )
            res["match"] = ok
            res["status"] = "ok" if ok else "mismatch"
        else:
            res["status"] = "ok"
        return [v for _, v in leaves]


def _control_vm(s: vmrpc.Session, ctl: Control, device: Optional[str],
               exec_mode: Optional[str]) -> Any:
    try:
        return s.create_vm(s.upload(ctl.model), device=device, exec_mode=exec_mode)
    except VMError as e:
        raise ControlError(f"the control {ctl.name} did not load: {e}") from None


def _bench_controlled(
    s: vmrpc.Session, vm: Any, cvm: Any, spec: JobSpec, ctl: Control, res: Dict[str, Any]
) -> None:
    """Times the model and the control interleaved, one repeat each in the
    order A B B A A B B A ... (the model first in even pairs, the control
    first in odd ones), on the same device of the same agent: a drift of
    the device slower than a pair falls on both alike, and the model's time
    over its paired control's time cancels it. Each repeat is one
    time_evaluator call of spec.best_of batches (its first call, discarded,
    warms the caches after the other executable ran) and keeps the fastest
    batch: work beside the device only ever adds time, so the fastest of a
    few short batches is the least disturbed (docs/farm.md). The number of
    calls per batch is found once per executable (min_repeat_ms) and then
    kept.

    Which VM is created first alternates from one job on the agent to the
    next (cvm: the control's, made before the model's; None: made here,
    after it). Where a VM's memory lands moves its speed by a few per cent
    for as long as it lives, and consecutive jobs get the same memory back
    in the order they ask for it: with the order fixed, every job of a
    bench had the model off its control the same way (docs/farm.md).

    res["timing"] is the model's (results: per repeat, as without a
    control); res["control"] the control's, paired by index."""
    if len(vm.devices) != 1:
        raise ControlError(
            f"--control times the model and the control on one device; the model runs on "
            f"{len(vm.devices)} ({','.join(vm.devices)}): give one device with -d"
        )
    if cvm is None:
        cvm = _control_vm(s, ctl, vm.devices[0], spec.exec_mode)
    if list(cvm.devices) != list(vm.devices):  # the agent placed it elsewhere
        raise ControlError(
            f"the control {ctl.name} runs on {','.join(cvm.devices)}, the model on "
            f"{','.join(vm.devices)}"
        )
    sides = []
    for v, func, args, kwargs in (
        (vm, spec.func, spec.args, spec.kwargs),
        (cvm, ctl.func, ctl.args, ctl.kwargs),
    ):
        v.set_input(func, *args, **kwargs)
        first = v.time_evaluator(func, number=spec.number, repeat=1,
                                 min_repeat_ms=spec.min_repeat_ms)()
        sides.append(v.time_evaluator(func, number=first.number, repeat=spec.best_of))
    got: List[List[Dict[str, Any]]] = [[], []]
    for i in range(spec.repeat):
        for k in ((0, 1) if i % 2 == 0 else (1, 0)):
            got[k].append(_best_of(sides[k]().to_dict(), spec.best_of))
    res["timing"], res["control"] = (_joined(t) for t in got)
    res["control"].update(model=ctl.name, func=ctl.func,
                          exe_sha256=hashlib.sha256(ctl.model).hexdigest())
    res["status"] = "ok"


def _best_of(t: Dict[str, Any], k: int) -> Dict[str, Any]:
    """A TimeResult dict whose batches, in groups of k, become one repeat
    each: the group's fastest batch, by wall clock and by device timer
    alike (the device's None where a batch of the group has no reading)."""
    wall = [float(x) for x in t["results"]]
    dev = list(t.get("device_results") or [None] * len(wall))
    groups = range(0, len(wall) - len(wall) % k, k)
    return _summary(
        [min(wall[g:g + k]) for g in groups],
        [None if any(d is None for d in dev[g:g + k]) else min(dev[g:g + k]) for g in groups],
        number=int(t["number"]),
        warmup=float(t.get("warmup") or 0),
        gate_wait=float(t.get("gate_wait") or 0),
        best_of=k,
    )


def _summary(wall: List[float], dev: List[Optional[float]], **more: Any) -> Dict[str, Any]:
    devs = [d for d in dev if d is not None]
    return {
        "results": wall,
        "device_results": dev,
        "mean": statistics.fmean(wall),
        "median": statistics.median(wall),
        "std": statistics.pstdev(wall),
        "min": min(wall),
        "max": max(wall),
        "device_median": statistics.median(devs) if devs else None,
        **more,
    }


def _joined(parts: List[Dict[str, Any]]) -> Dict[str, Any]:
    """One TimeResult-like dict of single-repeat timings."""
    return _summary(
        [float(p["results"][0]) for p in parts],
        [p["device_results"][0] for p in parts],
        number=parts[0]["number"],
        warmup=sum(float(p.get("warmup") or 0) for p in parts),
        gate_wait=sum(float(p.get("gate_wait") or 0) for p in parts),
        best_of=parts[0]["best_of"],
        interleaved=True,
    )


class ControlError(Exception):
    """The control of a bench cannot run beside the model (the job fails
    with this message; the agent is fine)."""


def execute(spec: JobSpec) -> Tuple[Dict[str, Any], Optional[List[Any]]]:
    """Runs spec on the agent whose lease this worker holds (the engine calls
    it on the worker). Returns (result dict, outputs of ``run`` or None)."""
    from distributed import get_worker

    worker = get_worker()
    slot = slot_of(str(worker.name))
    res: Dict[str, Any] = {
        "kind": spec.kind,
        "model": spec.model_name,
        "func": spec.func,
        "agent": slot.name,
        "url": slot.url,
        "version": slot.props.get("version"),
        "properties": slot.props,
        "worker": worker.address,
        "start": time.time(),
    }
    if slot.down.is_set():
        raise AgentDown(slot.name, slot.down_reason or "marked down by its node")
    outputs = None
    try:
        outputs = _run(slot, spec, res)
    except (ControlError, VMError) as e:
        why = slot.alive()
        if why is not None:
            slot.down_reason = f"{e}; then {why}"
            slot.down.set()
            raise AgentDown(slot.name, slot.down_reason) from None
        res["status"] = "error"
        res["error"] = str(e)
    res["end"] = time.time()
    if spec.kind == "run" and outputs is not None:
        return res, outputs
    return res, None
