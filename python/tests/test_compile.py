"""vmrpc.compile: ONNX models (written here with onnx_proto.py, and the node
cases of Debian's libonnx-testdata when installed) compiled in-process,
uploaded and run on a live agent's OpenCL device against NumPy references
or the test data's outputs; the compiler's errors as exception classes
with its messages."""

from __future__ import annotations

import os
import pathlib
import sys
import threading
from typing import Any, Dict, List

import numpy as np
import pytest

import vmrpc
import onnx_proto as op

NODE_DATA = pathlib.Path("/usr/share/libonnx-testdata/data/node")


def mlp_model() -> bytes:
    """y = Relu(x @ W + b): x [N, 4] with a dynamic N, W [4, 3] a graph input
    (bound as a constant by the tests), b [3] an initializer."""
    b = np.array([0.5, -1.0, 0.25], np.float32)
    return op.model(
        [
            op.node("MatMul", ["x", "W"], ["t"]),
            op.node("Add", ["t", "b"], ["u"]),
            op.node("Relu", ["u"], ["y"], name="act"),
        ],
        [op.value_info("x", ["N", 4]), op.value_info("W", [4, 3])],
        [op.value_info("y", ["N", 3])],
        [op.tensor("b", b)],
    )


def fancy_model() -> bytes:
    """One node of an operator nobody supports, named 'f'."""
    return op.model(
        [op.node("FancyOp", ["x"], ["y"], name="f")],
        [op.value_info("x", [2])],
        [op.value_info("y", [2])],
    )


W = np.arange(12, dtype=np.float32).reshape(4, 3) / 10 - 0.5
B = np.array([0.5, -1.0, 0.25], np.float32)


@pytest.fixture
def gpu(sess: vmrpc.Session) -> str:
    if "opencl:0" not in sess.devices:
        pytest.skip("the agent has no OpenCL device (the cl.* operators run there)")
    return "opencl:0"


def run(sess: vmrpc.Session, exe: Any, device: str, *inputs: np.ndarray) -> Any:
    with sess.create_vm(sess.upload(exe), device=device) as vm:
        return vm["main"](*inputs)


def test_compile_bind_run_matches_numpy(
    sess: vmrpc.Session, gpu: str, tmp_path: pathlib.Path
) -> None:
    c = vmrpc.compile(mlp_model(), input_shapes={"x": (2, 4)}, consts={"W": W})
    assert isinstance(c, vmrpc.Compiled) and bytes(c) == c.data and len(c) == len(c.data)
    r = c.report
    assert r["opset"] == 13 and r["nodes"] == 3
    assert r["ops"] == {"MatMul": 1, "Add": 1, "Relu": 1}
    assert r["constants"] >= 2 and r["constants_bytes"] >= W.nbytes + B.nbytes
    mem = r["memory"]
    assert mem["output_bytes"] == 2 * 3 * 4
    # one intermediate, 24 bytes: MatMul and the bias Add are one cl.gemm
    # (its bias epilogue), whose output the Relu reads
    assert mem["unplanned_bytes"] == 24 and mem["planned_tensors"] == 1
    assert mem["planned_bytes"] >= 24
    assert set(mem) == {
        "planned_bytes",
        "unplanned_bytes",
        "live_peak_bytes",
        "storages",
        "planned_tensors",
        "output_bytes",
    }
    x = np.array([[1, 2, 3, 4], [-4, 0.5, -2, 1]], np.float32)
    y = run(sess, c, gpu, x)
    np.testing.assert_allclose(y, np.maximum(x @ W + B, 0), rtol=1e-5, atol=1e-6)

    # Deterministic: the same model and options give the same bytes, which
    # the agent's store already has.
    again = vmrpc.compile(bytearray(mlp_model()), {"x": [2, 4]}, {"W": W.copy()})
    assert again.data == c.data and again.sha256 == c.sha256
    ex = sess.upload(again)
    assert ex.store_hit and ex.sha256 == c.sha256

    # output=, save(), and the file uploads as any .vmx
    out = tmp_path / "mlp.vmx"
    vmrpc.compile(mlp_model(), input_shapes={"x": (2, 4)}, consts={"W": W}, output=out)
    assert out.read_bytes() == c.data
    c.save(tmp_path / "copy.vmx")
    assert sess.upload(tmp_path / "copy.vmx").sha256 == c.sha256


def test_compile_from_path_and_upload_onnx_path(
    sess: vmrpc.Session, gpu: str, tmp_path: pathlib.Path
) -> None:
    # A static model (every dim fixed, W an initializer): upload takes the
    # .onnx path and compiles it first.
    m = op.model(
        [op.node("MatMul", ["x", "W"], ["t"]), op.node("Relu", ["t"], ["y"])],
        [op.value_info("x", [3, 4])],
        [op.value_info("y", [3, 3])],
        [op.tensor("W", W)],
    )
    path = tmp_path / "static.onnx"
    path.write_bytes(m)
    c = vmrpc.compile(path)
    assert vmrpc.compile(str(path)).data == c.data == vmrpc.compile(m).data
    ex = sess.upload(path)
    assert ex.sha256 == c.sha256
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    with sess.create_vm(ex, device=gpu) as vm:
        np.testing.assert_allclose(vm["main"](x), np.maximum(x @ W, 0), rtol=1e-5, atol=1e-6)


def test_two_outputs_are_a_tuple(sess: vmrpc.Session, gpu: str) -> None:
    m = op.model(
        [op.node("Relu", ["x"], ["a"]), op.node("Neg", ["x"], ["b"])],
        [op.value_info("x", [5])],
        [op.value_info("a", [5]), op.value_info("b", [5])],
    )
    x = np.array([-2, -1, 0, 1, 2], np.float32)
    a, b = run(sess, vmrpc.compile(m), gpu, x)
    np.testing.assert_array_equal(a, np.maximum(x, 0))
    np.testing.assert_array_equal(b, -x)


@pytest.mark.parametrize(
    "case", ["test_relu", "test_gemm_all_attributes", "test_basic_conv_with_padding"]
)
def test_onnx_node_cases(sess: vmrpc.Session, gpu: str, case: str) -> None:
    """Cases of ONNX's own test data: input 0 is the run-time input, the
    others are bound as constants (as vmclient compile --const does)."""
    d = NODE_DATA / case
    if not (d / "model.onnx").exists():
        pytest.skip(f"{d} not installed (Debian libonnx-testdata)")
    data = d / "test_data_set_0"
    inputs = [op.read_tensor(str(p)) for p in sorted(data.glob("input_*.pb"))]
    expected = op.read_tensor(str(data / "output_0.pb"))
    names = op.graph_inputs((d / "model.onnx").read_bytes())
    c = vmrpc.compile(d / "model.onnx", consts=dict(zip(names[1:], inputs[1:])))
    y = run(sess, c, gpu, inputs[0])
    np.testing.assert_allclose(y, expected, rtol=1e-3, atol=1e-5)


# ---------------------------------------------------------------- errors


def test_dynamic_dim_left_unfixed_is_failed_precondition() -> None:
    with pytest.raises(vmrpc.FailedPrecondition) as ei:
        vmrpc.compile(mlp_model(), consts={"W": W})
    assert ei.value.message == (
        "input 'x': dim 0 ('N') is dynamic: fix it with an input shape "
        "(input_shapes={'x': (D0, D1, ...)})"
    )
    assert ei.value.code == 9


def test_options_that_do_not_fit_the_model() -> None:
    cases: List[Dict[str, Any]] = [
        dict(input_shapes={"nope": (1, 4)}, consts={"W": W}),
        dict(input_shapes={"x": (2, 5)}, consts={"W": W}),
        dict(input_shapes={"x": (2, 4)}, consts={"W": W.astype(np.float64)}),
        dict(input_shapes={"x": (2, 4)}, consts={"nope": W}),
        dict(input_shapes={"x": (-1, 4)}, consts={"W": W}),
    ]
    messages = [
        "input shape for 'nope': the graph has no such input",
        "input shape for 'x': dim 1 is 5, the graph fixes it to 4",
        "constant for 'W' has dtype float64, the graph declares float32",
        "constant for 'nope': the graph has no such input",
        "input shape for 'x': dim 0 is -1",
    ]
    for kw, msg in zip(cases, messages):
        with pytest.raises(vmrpc.FailedPrecondition) as ei:
            vmrpc.compile(mlp_model(), **kw)
        assert ei.value.message == msg


def test_unsupported_operator_is_unimplemented() -> None:
    m = fancy_model()
    with pytest.raises(vmrpc.Unimplemented) as ei:
        vmrpc.compile(m)
    msg = ei.value.message
    assert msg.startswith("node 'f' (FancyOp): operator FancyOp is not supported: supported: ")
    assert "Relu" in msg and "MatMul" in msg


def test_compiles_on_several_threads_at_once() -> None:
    # The GIL is released while compiling: each thread gets the same bytes,
    # and the same message for an unsupported operator.
    fancy = fancy_model()
    with pytest.raises(vmrpc.Unimplemented) as ei:
        vmrpc.compile(fancy)
    want_msg, want_data = ei.value.message, vmrpc.compile(mlp_model(), {"x": (2, 4)}, {"W": W}).data
    got: List[Any] = []

    def work() -> None:
        for _ in range(20):
            try:
                vmrpc.compile(fancy)
            except vmrpc.Unimplemented as e:
                got.append(e.message)
            got.append(vmrpc.compile(mlp_model(), {"x": (2, 4)}, {"W": W}).data)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got.count(want_msg) == 80 and got.count(want_data) == 80


def test_names_that_are_not_utf8_keep_the_error_class() -> None:
    bad = op.node("FancyOp", ["x"], ["y"], name=b"n\xff")
    m = op.model([bad], [op.value_info("x", [2])], [op.value_info("y", [2])])
    with pytest.raises(vmrpc.Unimplemented) as ei:
        vmrpc.compile(m)
    assert ei.value.message.startswith("node 'n\ufffd' (FancyOp): operator FancyOp is not")


def test_bad_files(tmp_path: pathlib.Path) -> None:
    with pytest.raises(vmrpc.InvalidArgument) as ei:
        vmrpc.compile(b"\xff\xff\xffnot a model")
    assert ei.value.message == "not an ONNX model: the protobuf does not parse as a ModelProto"
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\xff\xff\xffnot a model")
    with pytest.raises(vmrpc.InvalidArgument) as ei:
        vmrpc.compile(junk)
    assert ei.value.message == (
        f"compiling '{junk}': not an ONNX model: the protobuf does not parse as a ModelProto"
    )
    assert isinstance(ei.value, ValueError)
    missing = tmp_path / "missing.onnx"
    with pytest.raises(vmrpc.NotFound) as ei2:
        vmrpc.compile(missing)
    assert ei2.value.message == f"cannot open '{missing}': No such file or directory"
    with pytest.raises(vmrpc.InvalidArgument) as ei:
        vmrpc.compile(tmp_path)
    assert ei.value.message == f"'{tmp_path}' is not a regular file"


def test_upload_of_a_bad_onnx_path_raises_before_sending(
    sess: vmrpc.Session, tmp_path: pathlib.Path
) -> None:
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x00junk")
    before = sess.stats()["session_executables"]
    with pytest.raises(vmrpc.InvalidArgument):
        sess.upload(junk)
    assert sess.stats()["session_executables"] == before


def test_python_type_errors() -> None:
    m = mlp_model()
    with pytest.raises(TypeError, match=r"input_shapes\['x'\] must be a sequence of ints"):
        vmrpc.compile(m, input_shapes={"x": 3})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match=r"dims must be ints, not float"):
        vmrpc.compile(m, input_shapes={"x": (2.0, 4)})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="names must be str"):
        vmrpc.compile(m, input_shapes={1: (2, 4)})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="has 9 dims; at most 8"):
        vmrpc.compile(m, input_shapes={"x": (1,) * 9})
    with pytest.raises(ValueError, match="constant for 'W' must be an array of at most 8 dims"):
        vmrpc.compile(m, input_shapes={"x": (2, 4)}, consts={"W": np.zeros((1,) * 9, np.float32)})
    with pytest.raises(TypeError):
        vmrpc.compile(12)  # type: ignore[arg-type]


def test_error_names_are_exported_literally() -> None:
    # mypy --strict users write `except vmrpc.VMError`: __all__ must name
    # every exception class, and each must be the errors module's.
    for name in vmrpc.errors.__all__:
        if name != "error_class":
            assert name in vmrpc.__all__
            assert getattr(vmrpc, name) is getattr(vmrpc.errors, name)
    for name in vmrpc.__all__:
        assert hasattr(vmrpc, name)


def test_no_leaks_over_300_compiles() -> None:
    # A 64 KiB constant: a leaked copy of it, or of the executable holding
    # it, would be about 19 MiB over 300 compilations.
    w = np.ones((4, 4096), np.float32)
    m = op.model(
        [op.node("MatMul", ["x", "W"], ["y"])],
        [op.value_info("x", ["N", 4]), op.value_info("W", [4, 4096])],
        [op.value_info("y", ["N", 4096])],
    )

    def round_() -> None:
        c = vmrpc.compile(m, input_shapes={"x": (2, 4)}, consts={"W": w})
        assert c.report["constants_bytes"] >= w.nbytes
        try:
            vmrpc.compile(m, consts={"W": w})
        except vmrpc.FailedPrecondition:
            pass

    for _ in range(30):
        round_()
    with open("/proc/self/statm") as f:
        rss0 = int(f.read().split()[1])
    refs0 = sys.getrefcount(w)
    for _ in range(300):
        round_()
    with open("/proc/self/statm") as f:
        rss1 = int(f.read().split()[1])
    grew = (rss1 - rss0) * os.sysconf("SC_PAGE_SIZE")
    assert grew < 4 * 1024 * 1024, f"RSS grew by {grew / 1024:.0f} KiB"
    assert sys.getrefcount(w) == refs0


def test_declared_output_shape_is_a_warning() -> None:
    """An output declared [3, 2] that the graph computes [2, 3] compiles (as
    onnxruntime ignores the declaration) and the report says so."""
    m = op.model(
        [op.node("Relu", ["x"], ["y"])],
        [op.value_info("x", [2, 3])],
        [op.value_info("y", [3, 2])],
    )
    c = vmrpc.compile(m)
    assert c.report["warnings"] == 1
    assert c.report["warning"] == (
        "graph output 'y': the model declares shape [3,2], the graph computes [2,3]: "
        "the computed shape is used, as onnxruntime does"
    )
    assert vmrpc.compile(mlp_model(), input_shapes={"x": [2, 4]}).report["warning"] == ""


def dynamic_matmul_model(w: np.ndarray, wz: np.ndarray, ws: np.ndarray) -> bytes:
    """y = x @ W as onnxruntime's quantize_dynamic writes it (x quantized by
    DynamicQuantizeLinear, MatMulInteger with int8 weights, Cast to float,
    Mul by x_scale * w_scale), and z = y ** 3 (GELU's tanh form)."""
    m, k = 5, w.shape[0]
    return op.model(
        [
            op.node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
            op.node("Mul", ["xs", "Ws"], ["s"]),
            op.node("MatMulInteger", ["xq", "W", "xz", "Wz"], ["acc"]),
            op.node("Cast", ["acc"], ["accf"], to=1),
            op.node("Mul", ["accf", "s"], ["y"]),
            op.node("Pow", ["y", "three"], ["z"]),
        ],
        [op.value_info("x", [m, k])],
        [op.value_info("y", [m, w.shape[1]]), op.value_info("z", [m, w.shape[1]])],
        [op.tensor("W", w), op.tensor("Wz", wz), op.tensor("Ws", ws),
         op.tensor("three", np.array(3.0, np.float32))],
    )


@pytest.mark.parametrize("k", [300, 301, 33026])
def test_dynamic_quantized_matmul_folds_its_dequantization(
    sess: vmrpc.Session, gpu: str, k: int
) -> None:
    """The Cast and Mul after MatMulInteger fold into cl.qgemm's float store
    (two nodes folded, no cl.cast call), with the very rounding of the two
    nodes; Pow(y, 3) is (y * y) * y, as onnxruntime computes it. Both are
    compared bit for bit with a NumPy reference. The constant weights are
    packed in k pairs for cl.qgemm_packed (odd K: a zero pad row) up to K =
    33,025; beyond, where int16 products could overflow the int32 sums,
    cl.qgemm takes them as they are."""
    rng = np.random.default_rng(5)
    n = 37 if k < 1000 else 3
    w = rng.integers(-128, 128, (k, n)).astype(np.int8)
    w[0, :] = -128
    wz, ws = np.array(3, np.int8), np.array(0.0123, np.float32)
    c = vmrpc.compile(dynamic_matmul_model(w, wz, ws))
    assert c.report["folded_nodes"] == 2
    assert (b"cl.qgemm_packed" in bytes(c)) == (k <= 33025)
    x = (rng.standard_normal((5, k)) * 2).astype(np.float32)
    x[1, 7] = 6.5  # the range's ends
    x[2, 9] = -4.25
    y, z = run(sess, c, gpu, x)
    mn, mx = np.float32(min(0.0, x.min())), np.float32(max(0.0, x.max()))
    s = np.float32((mx - mn) / np.float32(255))
    zp = np.float32(np.clip(np.rint(-mn / s), 0, 255))
    xq = np.clip(np.rint(x / s) + zp, 0, 255)
    acc = (xq.astype(np.int64) - int(zp)) @ (w.astype(np.int64) - int(wz))
    want = acc.astype(np.int32).astype(np.float32) * np.float32(s * ws)
    np.testing.assert_array_equal(y, want)
    np.testing.assert_array_equal(z, (want * want) * want)
