#!/usr/bin/env python3
"""Writes the committed seeds of fuzz_onnx beyond Debian's node models
(tests/fuzz/corpus/fuzz_onnx/): small recurrent models that reach what the
node models do not (layout 1, every optional input, activations with alpha
and beta, clip, input_forget, linear_before_reset 0 with sequence_lens,
com.microsoft DynamicQuantizeLSTM per tensor and per channel).

    BUILD/pyenv/bin/python tests/fuzz/gen_onnx_seeds.py tests/fuzz/corpus/fuzz_onnx

Needs the onnx package (scripts/onnx-node-1.23.sh installs it into
BUILD/pyenv). Deterministic: fixed weights, so the same files each time."""
import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(22)


def arr(shape, dtype=np.float32, scale=0.3):
    if dtype in (np.int8, np.uint8):
        lo, hi = (-128, 127) if dtype == np.int8 else (0, 255)
        return rng.integers(lo, hi + 1, size=shape).astype(dtype)
    return (rng.standard_normal(shape) * scale).astype(dtype)


def save(name, node, x_shape, inits, outs, opset=14, extra_opsets=()):
    g = helper.make_graph(
        [node], name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs if o],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), *extra_opsets])
    m.ir_version = 8
    with open(os.path.join(out, name + ".onnx"), "wb") as f:
        f.write(m.SerializeToString())


T, B, I, H = 4, 2, 3, 5
# LSTM: bidirectional, layout 1, every input, every output
save("lstm_layout1_all_inputs", helper.make_node(
    "LSTM", ["x", "W", "R", "B", "lens", "h0", "c0", "P"], ["y", "yh", "yc"], hidden_size=H,
    direction="bidirectional", layout=1, clip=2.5, input_forget=1,
    activations=["HardSigmoid", "Elu", "Softsign", "Sigmoid", "ScaledTanh", "Affine"],
    activation_alpha=[0.3, 0.9, 0.8, 1.2], activation_beta=[0.45, 0.7, 0.1]),
    [B, T, I], {"W": arr((2, 4 * H, I)), "R": arr((2, 4 * H, H)), "B": arr((2, 8 * H)),
                "lens": np.array([T, 2], np.int32), "h0": arr((B, 2, H)), "c0": arr((B, 2, H)),
                "P": arr((2, 3 * H))}, ["y", "yh", "yc"])
# GRU: reverse, linear_before_reset 0, sequence_lens, Y_h alone
save("gru_reverse_lens_yh", helper.make_node(
    "GRU", ["x", "W", "R", "B", "lens"], ["", "yh"], hidden_size=H, direction="reverse",
    activations=["Sigmoid", "ThresholdedRelu"], activation_alpha=[0.05]),
    [T, B, I], {"W": arr((1, 3 * H, I)), "R": arr((1, 3 * H, H)), "B": arr((1, 6 * H)),
                "lens": np.array([3, T], np.int32)}, ["", "yh"])
# RNN: bidirectional, Relu and Softplus
save("rnn_bidirectional", helper.make_node(
    "RNN", ["x", "W", "R"], ["y"], hidden_size=H, direction="bidirectional",
    activations=["Relu", "Softplus"]),
    [T, B, I], {"W": arr((2, H, I)), "R": arr((2, H, H))}, ["y"])
# DynamicQuantizeLSTM: int8 per channel, uint8 per tensor
ms = [helper.make_opsetid("com.microsoft", 1)]
for name, dt, per_channel in (("dq_lstm_int8_per_channel", np.int8, True),
                              ("dq_lstm_uint8_per_tensor", np.uint8, False)):
    sshape = (1, 4 * H) if per_channel else (1,)
    zp = np.full(sshape, 0 if dt == np.int8 else 128, dtype=dt)
    node = helper.make_node(
        "DynamicQuantizeLSTM",
        ["x", "W", "R", "B", "", "", "", "", "ws", "wz", "rs", "rz"], ["y", "yh", "yc"],
        domain="com.microsoft", hidden_size=H)
    save(name, node, [T, B, I],
         {"W": arr((1, I, 4 * H), dt), "R": arr((1, H, 4 * H), dt), "B": arr((1, 8 * H)),
          "ws": np.full(sshape, 0.01, np.float32), "wz": zp,
          "rs": np.full(sshape, 0.02, np.float32), "rz": zp},
         ["y", "yh", "yc"], extra_opsets=ms)
