#!/usr/bin/env python3
"""Time a model on an agent and plot the distribution of its run times.

    python/examples/plot_timing.py MODEL.vmx [INPUT.npy ...] [--host URL]
        [--device SEL] [--func NAME] [--number N] [--repeat N] [--out FILE.png]

Uploads MODEL.vmx (nothing is sent when the agent has it), sets the inputs
(.npy files, in parameter order), checks one run, times the function with
TVM's time_evaluator on the agent and prints the summary. With matplotlib
installed (pip install matplotlib) it also saves a histogram of the per-repeat
times, the device timer's beside the wall time when the device has one;
without it, the summary alone. Ctrl-C stops the timing on the agent.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import vmrpc


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("inputs", nargs="*", help=".npy files, one per parameter, in order")
    ap.add_argument("--host", default="tcp://127.0.0.1:9090")
    ap.add_argument("--token-file")
    ap.add_argument("--device", default=None, help="e.g. opencl:0 (default: the agent's first)")
    ap.add_argument("--exec-mode", default=None, choices=["bytecode", "compiled"])
    ap.add_argument("--func", default="main")
    ap.add_argument("--number", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--out", default="timing.png")
    a = ap.parse_args()

    with vmrpc.connect(a.host, token_file=a.token_file) as sess:
        ex = sess.upload(a.model)
        vm = sess.create_vm(ex, device=a.device, exec_mode=a.exec_mode)
        args = [np.load(p) for p in a.inputs]
        out = vm[a.func](*args)
        leaves = out if isinstance(out, tuple) else (out,)
        print(f"{a.func} on {vm.devices[0]}: outputs " + ", ".join(
            f"{np.asarray(v).dtype}{list(np.shape(v))}" for v in leaves))
        r = vm.time_evaluator(a.func, number=a.number, repeat=a.repeat)()
    print(r)

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib is not installed: no plot; pip install matplotlib)", file=sys.stderr)
        return 0
    wall = np.array(r.results) * 1e3
    dev = np.array([d for d in r.device_results if d is not None]) * 1e3
    both = np.concatenate([wall, dev])
    bins = list(np.histogram_bin_edges(both, bins=min(40, max(5, len(wall) // 2))))
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.hist(wall, bins=bins, alpha=0.7, label="wall (agent)")
    if dev.size:
        ax.hist(dev, bins=bins, alpha=0.7, label="device timer")
    ax.axvline(r.median * 1e3, color="k", linestyle="--", label=f"median {r.median * 1e3:.3f} ms")
    ax.set_xlabel(f"ms per call ({r.number} calls per repeat, {len(wall)} repeats)")
    ax.set_ylabel("repeats")
    ax.set_title(f"{a.model}: {a.func} on {vm.devices[0]}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(a.out, dpi=120)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
