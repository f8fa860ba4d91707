"""ONNX import benchmark: the PP-OCRv4 text recognizer compiled by vmrpc and
timed on a live agent's OpenCL device, against onnxruntime on this machine's
CPU, in the same run; plus compile time and peak compile memory for the
recognizer (11 MB) and for a generated 20 MB model.

Run by scripts/bench-onnx.sh (which makes the venv: onnxruntime,
rapidocr-onnxruntime 1.4.4, onnx, numpy); prints one JSON object:

  rec.vmrpc_device_median_s    agent-side median per call (OpenCL event time)
  rec.vmrpc_wall_median_s      agent-side wall median per call (host clock
                               around the call and a device sync, no network)
  rec.ort_median_s             onnxruntime median per call (CPU, all threads)
  rec.ratio_wall_vs_ort        vmrpc wall / onnxruntime (aim <= 1.5)
  rec_fused.*                  the same three vmrpc figures for the model
                               compiled with --fuse-elementwise
  compile.{rec,mlp20}          seconds and peak resident memory of
                               `vmclient compile` (its own process), with the
                               model's size for the ratio peak / model bytes

Medians of many repeats: the machine is shared and noisy.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np


def compile_model(vmclient, model, out, shapes):
    """Runs `vmclient compile` in a child of a fresh helper process so that
    RUSAGE_CHILDREN's peak is this compile's alone."""
    cmd = [vmclient, "compile", model, "-o", out, "--json"]
    for name, dims in shapes.items():
        cmd += ["--input-shape", "%s=%s" % (name, ",".join(str(d) for d in dims))]
    probe = (
        "import resource, subprocess, sys, time, json\n"
        "t = time.perf_counter()\n"
        "r = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE)\n"
        "dt = time.perf_counter() - t\n"
        "ru = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(json.dumps({'rc': r.returncode, 'seconds': dt, 'peak_rss_bytes': ru.ru_maxrss * 1024}))\n"
    )
    r = subprocess.run([sys.executable, "-c", probe] + cmd, check=True, stdout=subprocess.PIPE)
    res = json.loads(r.stdout)
    if res["rc"] != 0:
        raise SystemExit("bench_onnx: %s failed (exit %d)" % (" ".join(cmd), res["rc"]))
    res["model_bytes"] = os.path.getsize(model)
    res["executable_bytes"] = os.path.getsize(out)
    res["peak_over_model"] = res["peak_rss_bytes"] / res["model_bytes"]
    return res


def make_mlp20(path):
    """A 20 MB float32 MLP (5 Gemm layers of 1024x1024 weights + biases)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)
    n, layers = 1024, 5
    inits, nodes, prev = [], [], "x"
    for i in range(layers):
        w = (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
        b = rng.standard_normal(n).astype(np.float32) * 0.01
        inits += [numpy_helper.from_array(w, "w%d" % i), numpy_helper.from_array(b, "b%d" % i)]
        out = "h%d" % i if i < layers - 1 else "y"
        nodes.append(helper.make_node("Gemm", [prev, "w%d" % i, "b%d" % i], ["g%d" % i]))
        nodes.append(helper.make_node("Relu", ["g%d" % i], [out]))
        prev = out
    g = helper.make_graph(
        nodes, "mlp20",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", n])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(m, path)


def ort_median(model, x, repeat):
    import onnxruntime as ort
    s = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    name = s.get_inputs()[0].name
    for _ in range(3):
        s.run(None, {name: x})
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        s.run(None, {name: x})
        ts.append(time.perf_counter() - t)
    return float(np.median(ts)), ort.__version__


def vmrpc_bench(vmclient, host, vmx, x_npy, repeat):
    r = subprocess.run([vmclient, "--host", host, "bench", vmx, "--input", "x=" + x_npy,
                        "--device", "opencl:0", "-n", "1", "-r", str(repeat), "--json"],
                       check=True, stdout=subprocess.PIPE)
    j = json.loads(r.stdout)
    return j


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--repeat", type=int, default=20)
    a = ap.parse_args()
    vmclient = os.path.join(a.build, "client", "vmclient")
    vmagent = os.path.join(a.build, "agent", "vmagent")
    import rapidocr_onnxruntime
    rec = os.path.join(os.path.dirname(rapidocr_onnxruntime.__file__), "models",
                       "ch_PP-OCRv4_rec_infer.onnx")
    work = tempfile.mkdtemp(prefix="bench-onnx.")
    x = (np.random.default_rng(1).random((1, 3, 48, 320), dtype=np.float32) - 0.5) * 2
    x_npy = os.path.join(work, "x.npy")
    np.save(x_npy, x)

    result = {"bench": "onnx", "model": "ch_PP-OCRv4_rec_infer.onnx", "input": [1, 3, 48, 320]}
    comp = {"rec": compile_model(vmclient, rec, os.path.join(work, "rec.vmx"), {"x": [1, 3, 48, 320]})}
    # the same with --fuse-elementwise (timed too: rec_fused)
    subprocess.run([vmclient, "compile", rec, "-o", os.path.join(work, "rec_fused.vmx"),
                    "--input-shape", "x=1,3,48,320", "--fuse-elementwise"], check=True,
                   stdout=subprocess.DEVNULL)
    mlp = os.path.join(work, "mlp20.onnx")
    make_mlp20(mlp)
    comp["mlp20"] = compile_model(vmclient, mlp, os.path.join(work, "mlp20.vmx"), {"x": [8, 1024]})
    result["compile"] = comp

    agent_out = open(os.path.join(work, "agent.out"), "w+")
    agent = subprocess.Popen([vmagent, "--listen", "tcp://127.0.0.1:0", "--device", "opencl:0",
                              "--cache-dir", os.path.join(work, "cache")],
                             stdout=agent_out, stderr=subprocess.STDOUT)
    try:
        host = None
        for _ in range(600):
            agent_out.seek(0)
            for line in agent_out:
                if line.startswith("vmagent listening on "):
                    host = line.split()[-1]
            if host or agent.poll() is not None:
                break
            time.sleep(0.1)
        if not host:
            raise SystemExit("bench_onnx: vmagent did not start")
        vj = vmrpc_bench(vmclient, host, os.path.join(work, "rec.vmx"), x_npy, a.repeat)
        vf = vmrpc_bench(vmclient, host, os.path.join(work, "rec_fused.vmx"), x_npy, a.repeat)
    finally:
        agent.terminate()
        agent.wait(timeout=30)
    ort_s, ort_v = ort_median(rec, x, a.repeat)
    dev = vj.get("device") or {}
    result["rec"] = {
        "vmrpc_wall_median_s": vj["wall"]["median_s"],
        "vmrpc_device_median_s": dev.get("median_s"),
        "vmrpc_device": vj.get("device_name") or vj.get("device_info") or "opencl:0",
        "ort_median_s": ort_s,
        "ort_version": ort_v,
        "ort_threads": os.cpu_count(),
        "ratio_wall_vs_ort": vj["wall"]["median_s"] / ort_s,
        "aim_ratio": 1.5,
    }
    df = vf.get("device") or {}
    result["rec_fused"] = {
        "vmrpc_wall_median_s": vf["wall"]["median_s"],
        "vmrpc_device_median_s": df.get("median_s"),
        "ratio_wall_vs_ort": vf["wall"]["median_s"] / ort_s,
    }
    result["loadavg"] = open("/proc/loadavg").read().split()[:3]
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
