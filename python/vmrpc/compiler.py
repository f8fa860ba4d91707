"""ONNX models into executables: ``vmrpc.compile`` (docs/python.md).

The compiler library of the project (compiler/, docs/onnx.md) is linked into
the extension module: compiling needs no agent and no other tool.
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import Any, Dict, Mapping, Optional, Sequence, Union

import numpy as np

from . import _core
from .errors import VMError

__all__ = ["compile", "Compiled"]

PathLike = Union[str, "os.PathLike[str]"]

# The compiler's hint for an unfixed input names the CLI's option; say it
# the way this function takes it.
_CLI_SHAPE_HINT = re.compile(r"\(--input-shape ([^=()]*)=D0,D1,\.\.\.\)")


class Compiled:
    """An executable compiled from an ONNX model by :func:`compile`.

    ``data``: the ``.vmx`` bytes (``bytes(c)`` too); ``report``: what the
    compilation did, as ``vmclient compile --json`` prints it (opset, nodes,
    folded_nodes, ops, constants, constants_bytes, memory); ``sha256``: the
    hex digest the agent's store knows it by. ``Session.upload`` takes it.
    """

    def __init__(self, data: bytes, report: Dict[str, Any]) -> None:
        self.data: bytes = data
        self.report: Dict[str, Any] = report

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    def save(self, path: PathLike) -> None:
        """Writes the ``.vmx`` bytes to path (replaced atomically)."""
        path = os.fspath(path)
        tmp = f"{path}.tmp{os.getpid()}"
        try:
            with open(tmp, "wb") as f:
                f.write(self.data)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def __bytes__(self) -> bytes:
        return self.data

    def __len__(self) -> int:
        return len(self.data)

    def __repr__(self) -> str:
        ops = ", ".join(f"{k} x{v}" for k, v in self.report.get("ops", {}).items())
        return f"<vmrpc.Compiled {len(self.data)} bytes, ops: {ops or 'none'}>"


def compile(  # noqa: A001 (the name TVM users look for)
    model: Union[PathLike, bytes, bytearray, memoryview],
    input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
    consts: Optional[Mapping[str, Any]] = None,
    output: Optional[PathLike] = None,
) -> Compiled:
    """Compiles an ONNX model into an executable for the agent.

    model: the path of a ``.onnx`` file (external data files are read from
    its folder) or the model's bytes. input_shapes: ``{input name: shape}``
    fixing the inputs' dynamic dims (each shape in full). consts:
    ``{input name: array}`` binding graph inputs to constants (read with
    ``numpy.asarray``; the dtype must be the graph's). output: also write
    the ``.vmx`` there. The executable's function ``main`` takes the graph's
    remaining inputs in order and returns its outputs (a tuple when there
    are several).

    Raises InvalidArgument for a malformed model, Unimplemented for an
    operator, attribute or dtype the compiler does not support,
    FailedPrecondition when input_shapes or consts do not fit the model (or
    a dynamic dim is left unfixed), NotFound/PermissionDenied for a file
    that cannot be read; TypeError/ValueError for wrong Python types. The
    GIL is released while compiling.
    """
    shapes = []
    for name, dims in (input_shapes or {}).items():
        if not isinstance(name, str):
            raise TypeError(f"input_shapes: names must be str, not {type(name).__name__}")
        if isinstance(dims, int):
            raise TypeError(f"input_shapes[{name!r}] must be a sequence of ints, e.g. (1, 3)")
        shapes.append((name, [_dim(name, d) for d in dims]))
    bound = []
    for name, value in (consts or {}).items():
        if not isinstance(name, str):
            raise TypeError(f"consts: names must be str, not {type(name).__name__}")
        bound.append((name, np.asarray(value)))
    path: Optional[str] = None
    data: Optional[Union[bytes, bytearray, memoryview]] = None
    if isinstance(model, (bytes, bytearray, memoryview)):
        data = model
    else:
        path = os.fspath(model)
    try:
        vmx, report = _core.compile_onnx(path, data, shapes, bound)
    except VMError as e:
        msg = _CLI_SHAPE_HINT.sub(r"(input_shapes={'\1': (D0, D1, ...)})", e.message)
        if path is not None and path not in msg:
            msg = f"compiling '{path}': {msg}"
        raise type(e)(msg, e.code) from None
    c = Compiled(vmx, report)
    if output is not None:
        c.save(output)
    return c


def _dim(name: str, d: Any) -> int:
    if isinstance(d, bool) or not hasattr(d, "__index__"):
        raise TypeError(f"input_shapes[{name!r}]: dims must be ints, not {type(d).__name__}")
    return int(d.__index__())
