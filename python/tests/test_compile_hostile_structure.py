"""vmrpc.compile on models whose structure is hostile: nested 200,000 If
levels deep (the protobuf runtime recurses: this used to kill the Python
process), a shape of rank 1,000, a node of 100,000 inputs, a graph with a
cycle or a missing input, opsets 0 and 2^62, external data outside the
model's folder, at a huge offset or in a FIFO (which used to hang). Each
raises vmrpc.InvalidArgument with a message naming the problem, and the
process carries on. The models are protobuf bytes written here."""

from __future__ import annotations

import os
import pathlib
import threading
from typing import Any, Callable, List

import pytest

import vmrpc
import onnx_proto as op

D24 = [2, 4]


def xy_model(nodes: List[bytes], opset: int = 17) -> bytes:
    """nodes over graph input x and output y, both float [2, 4]."""
    return op.model(nodes, [op.value_info("x", D24)], [op.value_info("y", D24)], opset=opset)


def refused(model: Any, want: str) -> None:
    """vmrpc.compile(model) raises exactly InvalidArgument containing want."""
    with pytest.raises(vmrpc.InvalidArgument) as ei:
        vmrpc.compile(model)
    assert type(ei.value) is vmrpc.InvalidArgument
    assert want in ei.value.message


def refused_both(model: bytes, tmp_path: pathlib.Path, want: str) -> None:
    """Refused from its bytes and from a file."""
    refused(model, want)
    path = tmp_path / "model.onnx"
    path.write_bytes(model)
    refused(path, want)


def nested_if(levels: int) -> bytes:
    """A graph holding an If whose then_branch holds an If ... levels deep,
    written outside in from the lengths computed inside out."""
    v = op._varint
    glen, nlen, alen = [0] * (levels + 1), [0] * (levels + 1), [0] * (levels + 1)
    for k in range(1, levels + 1):
        alen[k] = 13 + 3 + 1 + len(v(glen[k - 1])) + glen[k - 1]
        nlen[k] = 4 + 1 + len(v(alen[k])) + alen[k]
        glen[k] = 1 + len(v(nlen[k])) + nlen[k]
    out = bytearray(op._int(1, 7) + v(7 << 3 | 2) + v(glen[levels]))
    for k in range(levels, 0, -1):
        out += b"\x0a" + v(nlen[k]) + op._len(4, "If") + b"\x2a" + v(alen[k])
        out += op._len(1, "then_branch") + op._int(20, 5) + b"\x32" + v(glen[k - 1])
    out += op._len(8, op._int(2, 17))
    return bytes(out)


def test_deep_nesting_is_refused_not_a_crash(tmp_path: pathlib.Path) -> None:
    refused_both(
        nested_if(200_000),
        tmp_path,
        "onnx: messages nest more than 100 levels deep (in attribute 'then_branch'): "
        "at most 100 are accepted",
    )
    # within the bound the model parses; then the graph is judged
    refused(nested_if(30), "the graph has no outputs")


def test_rank_and_width(tmp_path: pathlib.Path) -> None:
    rank = op.model(
        [op.node("Relu", ["x"], ["y"])],
        [op.value_info("x", [1] * 1000)],
        [op.value_info("y", D24)],
    )
    refused_both(rank, tmp_path, "onnx: a shape in value 'x' has 1000 dims, at most 64 are accepted")
    wide = xy_model([op.node("Concat", ["x"] * 100_000, ["y"], name="cat")])
    refused_both(
        wide, tmp_path, "onnx: node 'cat' has 100000 inputs, at most 4096 are accepted: split"
    )


def test_cycle_and_missing_input(tmp_path: pathlib.Path) -> None:
    cycle = xy_model(
        [
            op.node("Add", ["x", "t2"], ["t1"], name="n1"),
            op.node("Relu", ["t1"], ["t2"], name="n2"),
            op.node("Relu", ["t2"], ["y"], name="n3"),
        ]
    )
    refused_both(
        cycle,
        tmp_path,
        "node 'n1' (Add): input 't2' is computed by node 'n2' (Relu), which depends on this "
        "node: the graph has a cycle",
    )
    missing = xy_model([op.node("Relu", ["ghost"], ["y"], name="r")])
    refused_both(
        missing,
        tmp_path,
        "node 'r' (Relu): input 'ghost' is never defined: no graph input, initializer or node "
        "output has that name",
    )


@pytest.mark.parametrize("opset", [0, 2**62, -1])
def test_bogus_opsets(opset: int, tmp_path: pathlib.Path) -> None:
    model = xy_model([op.node("Relu", ["x"], ["y"])], opset=opset)
    refused_both(
        model, tmp_path, f"opset {opset} is not a valid opset of the default ONNX domain: fix"
    )


def external(location: str, offset: str = "") -> bytes:
    """y = Add(x, w), x and y float [4], w [4] in external data at location."""
    entries = op._len(13, op._len(1, "location") + op._len(2, location))
    if offset:
        entries += op._len(13, op._len(1, "offset") + op._len(2, offset))
    w = op._int(1, 4) + op._int(2, 1) + op._len(8, "w") + entries + op._int(14, 1)
    graph = (
        op._len(1, op.node("Add", ["x", "w"], ["y"]))
        + op._len(5, w)
        + op._len(11, op.value_info("x", [4]))
        + op._len(12, op.value_info("y", [4]))
    )
    return op._int(1, 7) + op._len(7, graph) + op._len(8, op._int(2, 17))


def no_hang(fn: Callable[[], None], fifo: pathlib.Path) -> None:
    """Runs fn on a thread; if it is still blocked after 60 s, opens the
    FIFO for writing to release it, and fails."""
    err: List[BaseException] = []

    def body() -> None:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 (reported below)
            err.append(e)

    t = threading.Thread(target=body)
    t.start()
    t.join(60)
    if t.is_alive():
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        t.join(30)
        pytest.fail(f"compiling blocked on the FIFO {fifo}")
    if err:
        raise err[0]


def test_external_data(tmp_path: pathlib.Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    w = b"\x00\x00\x80\x3f" * 4
    (folder / "w.bin").write_bytes(w)
    (tmp_path / "secret.bin").write_bytes(w)
    (folder / "link.bin").symlink_to(tmp_path / "secret.bin")
    os.mkfifo(folder / "w.fifo")
    ok = folder / "ok.onnx"
    ok.write_bytes(external("w.bin"))
    assert len(vmrpc.compile(ok)) > 0
    cases = [
        ("../secret.bin", "", "must be a relative path inside the model's folder"),
        ("/etc/passwd", "", "must be a relative path inside the model's folder"),
        ("link.bin", "", "external data 'link.bin' resolves outside the model's folder"),
        ("w.bin", "9223372036854775808", "has 16 bytes, the tensor needs 16 at offset 9223372036854775808"),
        ("w.bin", "18446744073709551615", "the tensor needs 16 at offset 18446744073709551615"),
        ("w.bin", "99999999999999999999", "external data offset '99999999999999999999' is not a number"),
    ]
    for i, (loc, offset, want) in enumerate(cases):
        path = folder / f"m{i}.onnx"
        path.write_bytes(external(loc, offset))
        refused(path, want)
    fifo_model = folder / "fifo.onnx"
    fifo_model.write_bytes(external("w.fifo"))
    no_hang(
        lambda: refused(
            fifo_model, "external data 'w.fifo' is not a regular file (a FIFO, device or folder)"
        ),
        folder / "w.fifo",
    )
    # a FIFO in place of the model itself
    os.mkfifo(folder / "model.onnx")
    no_hang(lambda: refused(folder / "model.onnx", "is not a regular file"), folder / "model.onnx")
