#!/usr/bin/env python3
"""Writes the committed fuzz_onnx seeds of the sampling operators
(compiler/src/onnx_ops_spatial.c; tests/fuzz/corpus/fuzz_onnx/): GridSample
(cubic, reflection, a grid reaching past [-1, 1]), RoiAlign (max, boxes
across the image's edge), DeformConv (mask, bias, offset groups), MaxPool
with Indices, STFT with a window, Det, and a 3-D ConvTranspose, so the
fuzzer starts from models that reach every lowering.

    BUILD/pyenv/bin/python tests/fuzz/gen_onnx_spatial_seeds.py tests/fuzz/corpus/fuzz_onnx

Needs the onnx package (scripts/onnx-node-1.23.sh installs it into
BUILD/pyenv). Deterministic: fixed values, so the same files each time."""
import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(19)


def arr(shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def save(name, node, x_shape, inits, outs, opset):
    g = helper.make_graph(
        [node], name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info(o, TensorProto.INT64 if o == "i" else TensorProto.FLOAT,
                                       None) for o in outs],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    with open(os.path.join(out, name + ".onnx"), "wb") as f:
        f.write(m.SerializeToString())


save("grid_sample_cubic", helper.make_node(
    "GridSample", ["x", "grid"], ["y"], mode="cubic", padding_mode="reflection",
    align_corners=1), [1, 2, 4, 5], {"grid": arr((1, 3, 3, 2), -1.5, 1.5)}, ["y"], 20)
save("roi_align_max", helper.make_node(
    "RoiAlign", ["x", "rois", "bi"], ["y"], mode="max", output_height=2, output_width=3,
    sampling_ratio=2, spatial_scale=0.5),
    [2, 2, 6, 6], {"rois": np.array([[0, 0, 8, 6], [4, 2, 14, 13]], np.float32),
                   "bi": np.array([1, 0], np.int64)}, ["y"], 16)
save("deform_conv_mask", helper.make_node(
    "DeformConv", ["x", "w", "off", "b", "mask"], ["y"], offset_group=2, pads=[1, 1, 1, 1]),
    [1, 4, 4, 4], {"w": arr((2, 4, 2, 2)), "off": arr((1, 16, 5, 5), -2, 2),
                   "b": arr((2,)), "mask": arr((1, 8, 5, 5), 0, 1)}, ["y"], 19)
save("maxpool_indices", helper.make_node(
    "MaxPool", ["x"], ["y", "i"], kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1],
    storage_order=1), [1, 2, 5, 4], {}, ["y", "i"], 12)
save("stft_window", helper.make_node("STFT", ["x", "step", "win"], ["y"]),
     [1, 32, 1], {"step": np.array(4, np.int64), "win": arr((8,), 0, 1)}, ["y"], 17)
save("det_batch", helper.make_node("Det", ["x"], ["y"]), [2, 3, 3], {}, ["y"], 11)
save("conv_transpose_3d", helper.make_node(
    "ConvTranspose", ["x", "w"], ["y"], strides=[2, 1, 2], output_padding=[1, 0, 0]),
    [1, 2, 2, 3, 2], {"w": arr((2, 3, 2, 2, 2))}, ["y"], 11)
