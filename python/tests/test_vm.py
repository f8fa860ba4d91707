"""VMs: every call of the API against a real agent, tuples, dtypes, errors."""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

import vmrpc

from conftest import Mlp, cancel_until_done, spin_in_thread


def test_mlp_matches_reference(sess: vmrpc.Session, mlp: Mlp) -> None:
    if "opencl:0" not in sess.devices:
        pytest.skip("the agent has no OpenCL device")
    ex = sess.upload(mlp.vmx)
    for mode in ("bytecode", "compiled"):
        for memory in ("pooled", "naive"):
            with sess.create_vm(ex, device="opencl:0", memory=memory, exec_mode=mode) as vm:
                vm.set_input("main", mlp.x)
                vm.invoke_stateful("main")
                out = vm.get_outputs("main")
                assert isinstance(out, np.ndarray) and out.dtype == mlp.expected.dtype
                np.testing.assert_allclose(out, mlp.expected, rtol=1e-4, atol=1e-5)
                np.testing.assert_allclose(vm["main"](mlp.x), mlp.expected, rtol=1e-4, atol=1e-5)
                np.testing.assert_allclose(
                    vm["main"](x=mlp.x), mlp.expected, rtol=1e-4, atol=1e-5
                )
    st = sess.stats()
    assert st["session_vms"] == 0
    assert any(a["device"] == "opencl:0" for a in st["allocators"]) or st["allocators"] == []


def test_set_input_by_position_and_name(vm: vmrpc.VirtualMachine) -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    vm.set_input("tup", x, 7)
    vm.invoke_stateful("tup")
    a, shape, n = vm.get_outputs("tup")
    np.testing.assert_array_equal(a, x)
    assert shape == vmrpc.Shape((2, 3)) and isinstance(shape, vmrpc.Shape)
    assert n == 7 and type(n) is int
    vm.set_input("tup", n=8, x=x[::-1])
    vm.invoke_stateful("tup")
    a, shape, n = vm.get_outputs("tup")
    np.testing.assert_array_equal(a, x[::-1])
    assert n == 8
    # one field at a time, by path
    assert vm.get_output("tup", 2) == 8
    assert vm.get_output("tup", 1) == (2, 3)


def test_function_handle(vm: vmrpc.VirtualMachine) -> None:
    f = vm["ident"]
    assert vm["ident"] is f and isinstance(f, vmrpc.Function)
    assert f.name == "ident" and "ident" in repr(f)
    assert f(x=3) == 3  # by name
    assert vm["tup"](np.zeros(2), n=1)[2] == 1  # mixed
    with pytest.raises(vmrpc.NotFound):
        vm["nosuch"]()


def test_tuples_stay_tuples(vm: vmrpc.VirtualMachine) -> None:
    a = np.ones((2,), np.int32)
    b = np.float64(2.5)
    out = vm["nest"](a, b)
    assert isinstance(out, tuple) and len(out) == 2
    assert isinstance(out[0], tuple) and len(out[0]) == 2
    np.testing.assert_array_equal(out[0][0], a)
    assert out[0][1].dtype == np.float64 and out[0][1].shape == () and out[0][1] == 2.5
    assert out[1] == 2.5
    np.testing.assert_array_equal(vm.get_output("nest", 0, 0), a)


DTYPES = [
    np.float16,
    np.float32,
    np.float64,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.bool_,
]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_dtypes_round_trip_bit_exact(vm: vmrpc.VirtualMachine, dtype: type) -> None:
    rng = np.random.default_rng(1)
    raw = rng.integers(0, 256, size=4 * 5 * np.dtype(dtype).itemsize, dtype=np.uint8)
    x = raw.view(dtype).reshape(4, 5) if dtype is not np.bool_ else raw.reshape(4, 5) > 127
    y = vm["ident"](x)
    assert y.dtype == x.dtype and y.shape == x.shape
    assert y.tobytes() == x.tobytes()
    assert y.flags.c_contiguous and y.flags.writeable and y.flags.owndata is False
    z = vm["ident"](x[0, 0].copy())  # 0-d
    assert z.shape == () and z.dtype == x.dtype


def test_shapes_and_layouts(vm: vmrpc.VirtualMachine) -> None:
    empty = np.zeros((0, 3), np.float32)
    assert vm["ident"](empty).shape == (0, 3)
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(vm["ident"](x[:, ::2, 1:]), x[:, ::2, 1:])  # strided
    f = np.asfortranarray(x)
    np.testing.assert_array_equal(vm["ident"](f), x)  # Fortran order
    np.testing.assert_array_equal(vm["ident"]([[1.0, 2.0]]), np.array([[1.0, 2.0]]))  # a list
    big = np.random.default_rng(2).standard_normal((3, 512, 1024)).astype(np.float32)  # 6 MiB
    np.testing.assert_array_equal(vm["ident"](big), big)  # chunked both ways
    sixteen = np.zeros((1,) * 16, np.int8)
    assert vm["ident"](sixteen).shape == (1,) * 16
    with pytest.raises(ValueError, match="at most 16"):
        vm["ident"](np.zeros((1,) * 17, np.int8))


def test_scalars_strings_shapes(vm: vmrpc.VirtualMachine) -> None:
    assert vm["ident"](5) == 5 and type(vm["ident"](5)) is int
    assert vm["ident"](-2.5) == -2.5
    assert vm["ident"](True) is True
    assert vm["ident"]("héllo") == "héllo"
    s = vm["ident"](vmrpc.Shape((4, 0, 2)))
    assert isinstance(s, vmrpc.Shape) and s == (4, 0, 2)
    with pytest.raises(OverflowError):
        vm["ident"](2**70)


def test_unsupported_inputs(vm: vmrpc.VirtualMachine) -> None:
    with pytest.raises(TypeError, match="unsupported element type"):
        vm["ident"](np.zeros(3, np.complex64))
    with pytest.raises(ValueError, match="big-endian"):
        vm["ident"](np.zeros(3, ">f4"))
    with pytest.raises(TypeError, match="parameter names must be strings"):
        vm._conn.set_inputs(vm.id, "ident", (), {1: 2})  # type: ignore[dict-item]


def test_get_output_into_reuses_memory(vm: vmrpc.VirtualMachine) -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = np.empty_like(x)
    for k in range(3):
        vm.set_input("ident", x + k)
        vm.invoke_stateful("ident")
        assert vm.get_output("ident", out=out) is out
        np.testing.assert_array_equal(out, x + k)
    with pytest.raises(vmrpc.OutOfRange) as ei:
        vm.get_output("ident", out=np.empty(2, np.float32))
    assert "needs 48 bytes" in ei.value.message
    with pytest.raises(ValueError, match=r"float32\(3, 4\)"):
        vm.get_output("ident", out=np.empty(12, np.float32))
    with pytest.raises(ValueError):
        vm.get_output("ident", out=np.empty((3, 4), np.float32)[:, ::2])


def test_inputs_are_not_copied_or_kept(vm: vmrpc.VirtualMachine) -> None:
    x = np.ones(1000, np.float32)
    before = sys.getrefcount(x)
    for _ in range(10):
        vm.set_input("ident", x)
        vm["ident"](x)
    assert sys.getrefcount(x) == before  # every buffer view was released
    x.resize(10, refcheck=False)  # no view is still exported


@pytest.mark.parametrize(
    "call, cls, words",
    [
        (lambda s, vm, ex: s.create_vm(ex, device="nope"), vmrpc.NotFound, "device 'nope' not found"),
        (lambda s, vm, ex: s.create_vm(ex, memory="weird"), vmrpc.InvalidArgument, "weird"),
        (lambda s, vm, ex: s.create_vm(ex, exec_mode="jit"), vmrpc.InvalidArgument, "jit"),
        (lambda s, vm, ex: vm.invoke_stateful("nosuch"), vmrpc.NotFound, "nosuch"),
        (lambda s, vm, ex: vm.get_outputs("ident"), vmrpc.NotFound, "no result yet"),
        (lambda s, vm, ex: vm.invoke_stateful("ident"), vmrpc.FailedPrecondition, "not set: x"),
        (lambda s, vm, ex: vm.set_input("ident", 1, 2), vmrpc.OutOfRange, "index 1 out of range"),
        (lambda s, vm, ex: vm.set_input("ident", y=1), vmrpc.NotFound, "no parameter named 'y'"),
        (
            lambda s, vm, ex: vm.set_input("typed", np.zeros((2, 4), np.int32)),
            vmrpc.InvalidArgument,
            "float32",
        ),
        (
            lambda s, vm, ex: vm.invoke_stateful("spin", deadline=0.2),
            vmrpc.DeadlineExceeded,
            "deadline exceeded",
        ),
    ],
)
def test_errors_map_to_classes(
    sess: vmrpc.Session, prog: pathlib.Path, call, cls, words  # type: ignore[no-untyped-def]
) -> None:
    ex = sess.upload(prog)
    vm = sess.create_vm(ex, device="cpu")
    with pytest.raises(cls) as ei:
        call(sess, vm, ex)
    e = ei.value
    assert type(e) is cls and isinstance(e, vmrpc.VMError)
    assert words in e.message and str(e).startswith(e.code_name + ": ")
    assert vmrpc.errors.error_class(e.code) is cls


def test_error_classes_are_python_errors_too() -> None:
    assert issubclass(vmrpc.InvalidArgument, ValueError)
    assert issubclass(vmrpc.NotFound, LookupError)
    assert issubclass(vmrpc.DeadlineExceeded, TimeoutError)
    assert [vmrpc.errors.error_class(c).code for c in range(1, 17)] == list(range(1, 17))


def test_cancel_from_another_thread(vm: vmrpc.VirtualMachine) -> None:
    th, raised = spin_in_thread(vm)
    cancel_until_done(vm, th)
    assert len(raised) == 1 and type(raised[0]) is vmrpc.Cancelled
    assert "cancelled" in raised[0].message  # type: ignore[attr-defined]
    assert vm["ident"](3) == 3  # usable again


def test_busy_vm_is_refused_not_queued(vm: vmrpc.VirtualMachine) -> None:
    th, raised = spin_in_thread(vm)
    with pytest.raises(vmrpc.FailedPrecondition, match="busy"):
        vm["ident"](1)
    cancel_until_done(vm, th)
    assert type(raised[0]) is vmrpc.Cancelled


def test_time_evaluator(vm: vmrpc.VirtualMachine) -> None:
    x = np.ones((64,), np.float32)
    r = vm.time_evaluator("ident", number=10, repeat=20, min_repeat_ms=0)(x)
    assert isinstance(r, vmrpc.TimeResult)
    assert len(r.results) == 20 and len(r.device_results) == 20 and r.number == 10
    assert r.min <= r.median <= r.max and r.min <= r.mean <= r.max and r.std >= 0
    assert all(s > 0 for s in r.results)
    assert r.device_median is None or r.device_median >= 0
    d = r.to_dict()
    assert d["results"] == list(r.results) and d["number"] == 10
    assert "mean (ms)" in str(r) and "repeat=20" in repr(r)
    # inputs already set: no arguments
    r2 = vm.time_evaluator("ident", number=2, repeat=3)()
    assert len(r2.results) == 3 and r2.number == 2
    with pytest.raises(vmrpc.InvalidArgument):
        vm.time_evaluator("ident", number=0, repeat=-1)()


def test_profile(sess: vmrpc.Session, mlp: Mlp) -> None:
    dev = "opencl:0" if "opencl:0" in sess.devices else pytest.skip("no OpenCL device")
    with sess.create_vm(sess.upload(mlp.vmx), device=dev) as vm:
        p = vm.profile("main", mlp.x)
        assert isinstance(p, vmrpc.ProfileReport) and len(p) > 0
        assert abs(sum(r.share for r in p.rows) - 1.0) < 1e-6
        assert all(r.calls >= 1 and r.total_s >= 0 for r in p.rows)
        totals = [r.total_s for r in p.rows]
        assert totals == sorted(totals, reverse=True)
        text = str(p)
        assert text.splitlines()[0].startswith("Name") and "Total" in text.splitlines()[-1]
        for r in p.rows:
            assert r.name in text
        d = p.to_dict()
        assert d["total_s"] == p.total_s and len(d["rows"]) == len(p)
        try:
            import pandas  # type: ignore[import-untyped,unused-ignore]  # noqa: F401
        except ImportError:
            with pytest.raises(ImportError, match="pip install pandas"):
                p.to_pandas()
        else:
            assert list(p.to_pandas()["name"]) == [r.name for r in p.rows]
        # no inputs: those already set
        assert len(vm.profile("main")) == len(p)


def test_memory_option_per_device(sess: vmrpc.Session, prog: pathlib.Path) -> None:
    ex = sess.upload(prog)
    with sess.create_vm(ex, memory={"cpu": "naive"}) as vm:
        assert vm.devices == ["cpu"] and vm["ident"](1) == 1
    with pytest.raises(ValueError, match="does not use"):
        sess.create_vm(ex, device="cpu", memory={"opencl:0": "naive"})
    with pytest.raises(TypeError):
        sess.create_vm("not an executable")  # type: ignore[arg-type]


def test_call_is_one_request(sess: vmrpc.Session, vm: vmrpc.VirtualMachine) -> None:
    # vm["f"](inputs by position) is one fused Run request: inputs, invoke
    # and a small result inline (the agent's counter also sees the Stats).
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    vm["ident"](x)
    before = sess.stats()["requests"]
    np.testing.assert_array_equal(vm["ident"](x), x)
    assert sess.stats()["requests"] - before == 2
    # named inputs take the stateful requests, with the same result
    np.testing.assert_array_equal(vm["ident"](x=x), x)
