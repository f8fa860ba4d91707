#!/usr/bin/env python3
"""Writes the committed seeds of fuzz_onnx for the storage types
(tests/fuzz/corpus/fuzz_onnx/storage_*.onnx): packed int4/int2 and float4
initializers (odd element counts, so the padding half-byte is there to
mutate), float8 and bfloat16 tensors, and the operators that take them
(Cast with saturate and round_mode, CastLike, BitCast, QuantizeLinear and
DequantizeLinear per tensor, per axis and blocked, a bfloat16 Celu).

    BUILD/pyenv/bin/python tests/fuzz/gen_onnx_storage_seeds.py tests/fuzz/corpus/fuzz_onnx

Needs the onnx package (scripts/onnx-node-1.23.sh installs it into
BUILD/pyenv). Deterministic: the same files each time."""
import os
import sys

from onnx import TensorProto as T, helper

out = sys.argv[1]
os.makedirs(out, exist_ok=True)


def raw(name, elem, dims, data):
    return helper.make_tensor(name, elem, dims, bytes(data), raw=True)


def save(name, nodes, x_type, x_shape, y_type, inits, opset=26):
    g = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", x_type, x_shape)],
        [helper.make_tensor_value_info("y", y_type, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 12
    with open(os.path.join(out, "storage_" + name + ".onnx"), "wb") as f:
        f.write(m.SerializeToString())


n = helper.make_node
# y = x + float(w): w int4 of 5 elements (3 bytes, the last half padding)
save("cast_int4_init", [n("Cast", ["w"], ["wf"], to=T.FLOAT), n("Add", ["x", "wf"], ["y"])],
     T.FLOAT, [5], T.FLOAT, [raw("w", T.INT4, [5], [0x21, 0x43, 0x0d])])
# x -> float8e4m3fn without saturation -> float
save("cast_f8_nosat", [n("Cast", ["x"], ["q"], to=T.FLOAT8E4M3FN, saturate=0),
                       n("Cast", ["q"], ["y"], to=T.FLOAT)], T.FLOAT, [2, 3], T.FLOAT, [])
# x -> float8e8m0 rounding to nearest
save("cast_e8m0_nearest", [n("Cast", ["x"], ["y"], to=T.FLOAT8E8M0, round_mode="nearest")],
     T.FLOAT, [4], T.FLOAT8E8M0, [])
# CastLike to a float4 constant (7 elements: packed with padding)
save("castlike_f4", [n("CastLike", ["x", "like"], ["y"])], T.FLOAT, [7], T.FLOAT4E2M1,
     [raw("like", T.FLOAT4E2M1, [1], [0x02])])
# BitCast float32 -> int32
save("bitcast", [n("BitCast", ["x"], ["y"], to=T.INT32)], T.FLOAT, [3], T.INT32, [])
# QuantizeLinear to int4, blocked along axis 1 (block 2), zero point int4
save("quantize_int4_blocked",
     [n("QuantizeLinear", ["x", "s", "z"], ["y"], axis=1, block_size=2)], T.FLOAT, [2, 4],
     T.INT4, [helper.make_tensor("s", T.FLOAT, [2, 2], [0.5, 1.0, 2.0, 0.25]),
              raw("z", T.INT4, [2, 2], [0x1f, 0x70])])
# DequantizeLinear of a uint2 initializer per axis
save("dequantize_uint2_axis", [n("DequantizeLinear", ["w", "s", "z"], ["d"], axis=0),
                               n("Add", ["x", "d"], ["y"])], T.FLOAT, [3, 2], T.FLOAT,
     [raw("w", T.UINT2, [3, 2], [0xe4, 0x0b]), helper.make_tensor("s", T.FLOAT, [3], [1, 2, 3]),
      raw("z", T.UINT2, [3], [0x24])])
# DequantizeLinear of a float8e5m2 input
save("dequantize_e5m2", [n("DequantizeLinear", ["x", "s"], ["y"])], T.FLOAT8E5M2, [4], T.FLOAT,
     [helper.make_tensor("s", T.FLOAT, [], [2.0])])
# a bfloat16 Celu (computed in float32 around casts)
save("celu_bf16", [n("Celu", ["x"], ["y"], alpha=2.0)], T.BFLOAT16, [3], T.BFLOAT16, [])
