"""Just enough protobuf to write small ONNX models and read the TensorProto
files of ONNX test data, for the pytest suite (the onnx package is not a
dependency). Field numbers are those of onnx.proto (Debian libonnx-dev).
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple, Union

import numpy as np

FLOAT = 1  # TensorProto.DataType
_NP = {1: np.float32, 2: np.uint8, 3: np.int8, 5: np.int16, 6: np.int32, 7: np.int64}
_ELEM = {np.dtype(v): k for k, v in _NP.items()}

Dim = Union[int, str]  # a fixed dim, or a dynamic one by name


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # negative int64s as two's complement
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _int(field: int, n: int) -> bytes:
    return _varint(field << 3) + _varint(n)


def _len(field: int, payload: Union[bytes, str]) -> bytes:
    if isinstance(payload, str):
        payload = payload.encode()
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def value_info(name: str, dims: Sequence[Dim], elem: int = FLOAT) -> bytes:
    """A ValueInfoProto of a tensor (TypeProto.Tensor with its shape)."""
    shape = b"".join(
        _len(1, _len(2, d) if isinstance(d, str) else _int(1, d)) for d in dims
    )
    tensor_type = _int(1, elem) + _len(2, shape)
    return _len(1, name) + _len(2, _len(1, tensor_type))


def tensor(name: str, array: np.ndarray) -> bytes:
    """A TensorProto with raw_data (little-endian)."""
    a = np.ascontiguousarray(array)
    return (
        b"".join(_int(1, d) for d in a.shape)
        + _int(2, _ELEM[a.dtype])
        + _len(8, name)
        + _len(9, a.astype(a.dtype.newbyteorder("<")).tobytes())
    )


def node(
    op: str,
    inputs: Sequence[str],
    outputs: Sequence[str],
    name: Union[str, bytes] = "",
    **ints: int,
) -> bytes:
    """A NodeProto (name: bytes to write any); keyword arguments are int
    attributes."""
    attrs = b"".join(_len(5, _len(1, k) + _int(3, v) + _int(20, 2)) for k, v in ints.items())
    return (
        b"".join(_len(1, i) for i in inputs)
        + b"".join(_len(2, o) for o in outputs)
        + (_len(3, name) if name else b"")
        + _len(4, op)
        + attrs
    )


def model(
    nodes: Sequence[bytes],
    inputs: Sequence[bytes],
    outputs: Sequence[bytes],
    initializers: Sequence[bytes] = (),
    opset: int = 13,
) -> bytes:
    """A ModelProto (IR version 7) of one graph."""
    graph = (
        b"".join(_len(1, n) for n in nodes)
        + _len(2, "g")
        + b"".join(_len(5, t) for t in initializers)
        + b"".join(_len(11, i) for i in inputs)
        + b"".join(_len(12, o) for o in outputs)
    )
    return _int(1, 7) + _len(2, "vmrpc-tests") + _len(7, graph) + _len(8, _int(2, opset))


def _read_varint(buf: bytes, i: int) -> Tuple[int, int]:
    n = shift = 0
    while True:
        b = buf[i]
        i += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return n, i


def _fields(buf: bytes) -> List[Tuple[int, int, Union[int, bytes]]]:
    out: List[Tuple[int, int, Union[int, bytes]]] = []
    i = 0
    while i < len(buf):
        key, i = _read_varint(buf, i)
        field, wire = key >> 3, key & 7
        size = {1: 8, 5: 4}.get(wire)
        if wire == 0:
            val, i = _read_varint(buf, i)
            out.append((field, wire, val))
            continue
        if wire == 2:
            size, i = _read_varint(buf, i)
        if size is None:
            raise ValueError(f"wire type {wire} in a TensorProto")
        out.append((field, wire, buf[i : i + size]))
        i += size
    return out


def read_tensor(path: str) -> np.ndarray:
    """A TensorProto file (dims, data_type, raw_data or float_data) as an array."""
    with open(path, "rb") as f:
        buf = f.read()
    dims: List[int] = []
    elem: Optional[int] = None
    data = b""
    for field, wire, val in _fields(buf):
        if field == 1 and isinstance(val, int):
            dims.append(val)
        elif field == 1 and isinstance(val, bytes):  # packed dims
            i = 0
            while i < len(val):
                d, i = _read_varint(val, i)
                dims.append(d)
        elif field == 2 and isinstance(val, int):
            elem = val
        elif field in (4, 9) and isinstance(val, bytes):  # float_data (packed), raw_data
            data += val
    assert elem in _NP, f"{path}: element type {elem}"
    dt = np.dtype(_NP[elem]).newbyteorder("<")
    return np.frombuffer(data, dt).astype(dt.newbyteorder("=")).reshape(dims)


def graph_inputs(model_bytes: bytes) -> List[str]:
    """The names of a model's graph inputs, in order (initializers included
    where the model lists them as inputs)."""
    names: List[str] = []
    for field, _, graph in _fields(model_bytes):
        if field == 7 and isinstance(graph, bytes):
            for gf, _, vi in _fields(graph):
                if gf == 11 and isinstance(vi, bytes):
                    for f, _, v in _fields(vi):
                        if f == 1 and isinstance(v, bytes):
                            names.append(v.decode())
    return names
