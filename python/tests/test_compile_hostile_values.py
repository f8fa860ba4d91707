"""vmrpc.compile on models whose numbers are hostile (written here with
onnx_proto.py): dims, shapes, strides, kernels, pads, groups, steps and
ranges at +-2^62, INT64_MIN, 0 and below, and initializers whose dims
overflow, are negative or outrun their data. Each is vmrpc.InvalidArgument
with the compiler's message naming the node, the op and the value (the
same refusals as tests/compiler/test_onnx_hostile_values.c, where
`vmclient compile` exits 3); none may crash the process that compiles."""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import numpy as np
import pytest

import vmrpc
import onnx_proto as op

P62 = 1 << 62
I32 = (1 << 31) - 1
MIN = -(1 << 63)
MAX = (1 << 63) - 1

INT, STRING, INTS = 2, 3, 7  # AttributeProto.AttributeType


def attr(name: str, value: object) -> bytes:
    """An AttributeProto of an int, a list of ints or a string."""
    if isinstance(value, str):
        return op._len(1, name) + op._len(4, value) + op._int(20, STRING)
    if isinstance(value, (list, tuple)):
        return op._len(1, name) + b"".join(op._int(8, v) for v in value) + op._int(20, INTS)
    assert isinstance(value, int)
    return op._len(1, name) + op._int(3, value) + op._int(20, INT)


def node(opname: str, inputs: Sequence[str], name: str, **attrs: object) -> bytes:
    """A NodeProto with output 'y' and attributes of any kind above."""
    return op.node(opname, inputs, ["y"], name=name) + b"".join(
        op._len(5, attr(k, v)) for k, v in attrs.items()
    )


def ints(name: str, values: Sequence[int]) -> bytes:
    return op.tensor(name, np.array(values, np.int64))


def model(n: bytes, inputs: List[bytes], inits: Sequence[bytes] = (), opset: int = 13) -> bytes:
    return op.model([n], inputs, [op.value_info("y", ["N"])], list(inits), opset=opset)


X = op.value_info("x", [1, 3, 8, 8])


def conv(opname: str, c: int, w: Sequence[int], **attrs: object) -> bytes:
    return model(
        node(opname, ["x", "W"], "cv", **attrs),
        [op.value_info("x", [1, c, 8, 8]), op.value_info("W", list(w))],
    )


def pool(opname: str, **attrs: object) -> bytes:
    a: Dict[str, object] = {"kernel_shape": [2, 2]}
    a.update(attrs)
    return model(node(opname, ["x"], "pl", **a), [X])


def slice_(start: int, end: int, step: int) -> bytes:
    return model(
        node("Slice", ["x", "st", "en", "ax", "sp"], "sl"),
        [op.value_info("x", [2, 4])],
        [ints("st", [start]), ints("en", [end]), ints("ax", [1]), ints("sp", [step])],
    )


def initializer(dims: Sequence[int], raw: bytes) -> bytes:
    t = (
        b"".join(op._int(1, d) for d in dims)
        + op._int(2, op.FLOAT)
        + op._len(8, "w")
        + op._len(9, raw)
    )
    return model(node("Add", ["x", "w"], "a"), [op.value_info("x", [4])], [t])


W4 = np.arange(4, dtype=np.float32).tobytes()

CASES: List[Tuple[str, bytes, Tuple[str, ...]]] = [
    (
        "reshape_dims_overflow",
        model(node("Reshape", ["x", "s"], "r"), [X], [ints("s", [I32, I32, I32])]),
        ("node 'r' (Reshape): shape [2147483647,2147483647,2147483647]", "overflows 64 bits"),
    ),
    (
        "reshape_2_62",
        model(node("Reshape", ["x", "s"], "r"), [X], [ints("s", [P62, 3])]),
        ("node 'r' (Reshape): shape[0] = 4611686018427387904",),
    ),
    (
        "reshape_int64_min",
        model(node("Reshape", ["x", "s"], "r"), [X], [ints("s", [MIN, -1])]),
        ("node 'r' (Reshape): shape[0] = -9223372036854775808",),
    ),
    (
        "expand_2_62",
        model(node("Expand", ["x", "s"], "e"), [X], [ints("s", [P62, 3, 8, 8])]),
        ("node 'e' (Expand): output [4611686018427387904,3,8,8]: dim 0 is 4611686018427387904",),
    ),
    (
        "expand_overflow",
        model(node("Expand", ["x", "s"], "e"), [X], [ints("s", [I32, I32, I32, 3, 8, 8])]),
        ("node 'e' (Expand): output [2147483647,2147483647,", "overflows 64 bits"),
    ),
    (
        "expand_int64_min",
        model(node("Expand", ["x", "s"], "e"), [X], [ints("s", [MIN, 3, 8, 8])]),
        ("node 'e' (Expand): shape [-9223372036854775808,3,8,8]: dim 0 is negative",),
    ),
    (
        "constant_of_shape_overflow",
        model(node("ConstantOfShape", ["s"], "c"), [], [ints("s", [I32] * 8)]),
        ("node 'c' (ConstantOfShape): shape [2147483647,", "overflows 64 bits"),
    ),
    (
        "constant_of_shape_2_62",
        model(node("ConstantOfShape", ["s"], "c"), [], [ints("s", [P62, 2])]),
        ("node 'c' (ConstantOfShape): shape [4611686018427387904,2]: dim 0 is",),
    ),
    (
        "range_int64_extremes",
        model(
            node("Range", ["s", "l", "d"], "rg"),
            [],
            [
                op.tensor("s", np.array(MIN, np.int64)),
                op.tensor("l", np.array(MAX, np.int64)),
                op.tensor("d", np.array(1, np.int64)),
            ],
        ),
        (
            "node 'rg' (Range): limit 9223372036854775807 - start -9223372036854775808 "
            "overflows 64 bits",
        ),
    ),
    (
        "range_delta_0",
        model(
            node("Range", ["s", "l", "d"], "rg"),
            [],
            [
                op.tensor("s", np.array(-P62, np.int64)),
                op.tensor("l", np.array(P62, np.int64)),
                op.tensor("d", np.array(0, np.int64)),
            ],
        ),
        ("node 'rg' (Range): delta is 0",),
    ),
    (
        "resize_sizes_2_62",
        model(node("Resize", ["x", "", "", "sz"], "rs"), [X], [ints("sz", [1, 3, P62, 8])]),
        ("node 'rs' (Resize): sizes[2] = 4611686018427387904",),
    ),
    (
        "resize_sizes_int64_min",
        model(node("Resize", ["x", "", "", "sz"], "rs"), [X], [ints("sz", [1, 3, MIN, 8])]),
        ("node 'rs' (Resize): sizes[2] = -9223372036854775808",),
    ),
    (
        "resize_roi_infinite_on_empty_axis",
        model(
            node("Resize", ["x", "roi", "sc"], "rs",
                 coordinate_transformation_mode="tf_crop_and_resize"),
            [op.value_info("x", [1, 1, 0, 4])],
            [
                op.tensor("roi", np.array([0, 0, 0, 0, 1, 1, np.inf, 1], np.float32)),
                op.tensor("sc", np.array([1, 1, 2, 1], np.float32)),
            ],
        ),
        ("node 'rs' (Resize): axis 2: output size ", "nan"),
    ),
    (
        "pad_2_62",
        model(node("Pad", ["x", "p"], "p"), [X], [ints("p", [0, 0, 0, 0, 0, 0, P62, 0])]),
        ("node 'p' (Pad): pads 0 and 4611686018427387904 on axis 2 of size 8",),
    ),
    (
        "pad_int64_min",
        model(node("Pad", ["x", "p"], "p"), [X], [ints("p", [0, 0, MIN, 0, 0, 0, 0, 0])]),
        ("node 'p' (Pad): pads -9223372036854775808 and 0 on axis 2 of size 8",),
    ),
    ("slice_step_0", slice_(0, 4, 0), ("node 'sl' (Slice): a step is 0",)),
    (
        "conv_group_2_62_no_channels",
        conv("Conv", 0, [0, 4, 3, 3], group=P62),
        ("node 'cv' (Conv): group 4611686018427387904 does not fit C=0",),
    ),
    (
        "conv_group_0",
        conv("Conv", 2, [2, 1, 3, 3], group=0),
        ("node 'cv' (Conv): group 0 does not fit",),
    ),
    (
        "conv_group_int64_min",
        conv("Conv", 2, [2, 1, 3, 3], group=MIN),
        ("node 'cv' (Conv): group -9223372036854775808 does not fit",),
    ),
    (
        "conv_stride_0",
        conv("Conv", 1, [2, 1, 3, 3], strides=[0, 1]),
        ("node 'cv' (Conv): spatial axis 0: kernel 3, stride 0",),
    ),
    (
        "conv_dilation_int64_min",
        conv("Conv", 1, [2, 1, 3, 3], dilations=[1, MIN]),
        ("node 'cv' (Conv): spatial axis 1: kernel 3, stride 1, dilation -9223372036854775808",),
    ),
    (
        "conv_pad_2_62",
        conv("Conv", 1, [2, 1, 3, 3], pads=[0, P62, 0, 0]),
        ("node 'cv' (Conv): spatial axis 1: kernel 3, stride 1, dilation 1, pads "
         "4611686018427387904 and 0",),
    ),
    (
        "conv_transpose_group_2_62",
        conv("ConvTranspose", 0, [0, 4, 3, 3], group=P62),
        ("node 'cv' (ConvTranspose): group 4611686018427387904 times W's 4 output channels "
         "per group overflows",),
    ),
    (
        "conv_transpose_stride_negative",
        conv("ConvTranspose", 1, [1, 2, 3, 3], strides=[-1, 1]),
        ("node 'cv' (ConvTranspose): spatial axis 0: stride -1",),
    ),
    (
        "conv_transpose_output_padding_2_62",
        conv("ConvTranspose", 1, [1, 2, 3, 3], output_padding=[0, P62]),
        ("node 'cv' (ConvTranspose): spatial axis 1: stride 1, dilation 1, output_padding "
         "4611686018427387904",),
    ),
    (
        "conv_transpose_output_shape_2_62",
        conv("ConvTranspose", 1, [1, 2, 3, 3], output_shape=[8, P62]),
        ("node 'cv' (ConvTranspose): output_shape value 4611686018427387904",),
    ),
    (
        "maxpool_kernel_2_62",
        pool("MaxPool", kernel_shape=[P62, 2]),
        ("node 'pl' (MaxPool): spatial axis 0: kernel 4611686018427387904",),
    ),
    (
        "maxpool_kernel_0",
        pool("MaxPool", kernel_shape=[2, 0]),
        ("node 'pl' (MaxPool): spatial axis 1: kernel 0",),
    ),
    (
        "maxpool_stride_0",
        pool("MaxPool", strides=[0, 1]),
        ("node 'pl' (MaxPool): spatial axis 0: kernel 2, stride 0",),
    ),
    (
        "averagepool_kernel_int64_min",
        pool("AveragePool", kernel_shape=[MIN, 2]),
        ("node 'pl' (AveragePool): spatial axis 0: kernel -9223372036854775808",),
    ),
    (
        "averagepool_stride_negative",
        pool("AveragePool", strides=[1, -P62]),
        ("node 'pl' (AveragePool): spatial axis 1: kernel 2, stride -4611686018427387904",),
    ),
    (
        "averagepool_pad_int64_min",
        pool("AveragePool", pads=[0, 0, MIN, 0]),
        ("node 'pl' (AveragePool): spatial axis 0: kernel 2, stride 1, dilation 1, pads 0 and "
         "-9223372036854775808",),
    ),
    (
        "initializer_dims_overflow",
        initializer([I32] * 4, W4),
        ("initializer 'w': dims [2147483647,2147483647,2147483647,2147483647]: their product "
         "overflows 64 bits",),
    ),
    (
        "initializer_dim_negative",
        initializer([-P62], W4),
        ("initializer 'w': dim 0 is -4611686018427387904",),
    ),
    (
        "initializer_dim_int64_min",
        initializer([MIN], W4),
        ("initializer 'w': dim 0 is -9223372036854775808",),
    ),
    (
        "initializer_data_shorter_than_dims",
        initializer([4], W4[:12]),
        ("initializer 'w': raw_data has 12 bytes, expected 16",),
    ),
]


@pytest.mark.parametrize("name,data,want", CASES, ids=[c[0] for c in CASES])
def test_hostile_values_are_invalid_argument(name: str, data: bytes, want: Tuple[str, ...]) -> None:
    with pytest.raises(vmrpc.InvalidArgument) as ei:
        vmrpc.compile(data)
    for w in want:
        assert w in ei.value.message, (name, ei.value.message)


def test_tile_repeats_that_overflow_are_invalid_argument() -> None:
    # Tile's repeats times a dim overflowing 64 bits: refused at the node
    m = model(node("Tile", ["x", "r"], "t"), [X], [ints("r", [P62, P62, 1, 1])])
    with pytest.raises(vmrpc.InvalidArgument) as ei:
        vmrpc.compile(m)
    assert ei.value.message.startswith("node 't' (Tile): output dim 1 overflows")


@pytest.mark.parametrize(
    "start,end,step", [(-1, MIN, MIN), (MIN, MAX, MAX), (-1, MIN, -P62), (MIN, MAX, P62)]
)
def test_extreme_slice_steps_take_one_element(start: int, end: int, step: int) -> None:
    # valid ONNX: a step past the axis takes one element; the model declares [2, 1]
    m = op.model(
        [node("Slice", ["x", "st", "en", "ax", "sp"], "sl")],
        [op.value_info("x", [2, 4])],
        [op.value_info("y", [2, 1])],
        [ints("st", [start]), ints("en", [end]), ints("ax", [1]), ints("sp", [step])],
    )
    assert vmrpc.compile(m).data
