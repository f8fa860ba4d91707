"""Whether `vmrpc-farm bench --control` steadies `check` on a busy machine,
for docs/farm.md: the three-label story of python/farm_tests/test_history.py
told --rounds times, each into a fresh SQLite store, every bench with the
control (the MLP with 40 more GEMMs, the same executable every time), and
each comparison judged twice from the same runs: normalized (model time /
paired control time) and raw (`check --raw`).

    VMRPC_BUILD_DIR=build build/venv-py/bin/python bench/bench_farm_control.py \\
        [--rounds 3] [--heavy 45] [--count 3] [-r 6] [--min-repeat-ms 40]

a.vmx is the base executable (the MLP with 40 more GEMMs) under every
label; b.vmx is the base under c1 and c2 and the base with HEAVY more GEMMs
under c3 (46: 14 % more multiply-adds; 45: 12 %), rounds taking the --heavy
values in turn. Each label is benchmarked twice, mirrored (c1 c2 c3 c3 c2
c1), as the test does, each bench --count jobs (each its own VMs) of -r
interleaved repeat pairs. The agent runs PoCL on one thread, real-time
where allowed, as the test's.

Prints one JSON object: per round the load average and, per comparison
(a.vmx c2/c1, a.vmx c3/c2, b.vmx c2/c1, b.vmx c3/c2), the normalized and
the raw ratio with their 95 % intervals and verdicts at --threshold; and a
summary: the largest distance from 1 of a same-work comparison (normalized
and raw: max |log ratio| as a ratio) and how many rounds flagged b.vmx c3
as slower (normalized and raw).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python" / "farm_tests"))

import numpy as np  # noqa: E402
from farm_proc import BUILD, Agent, Head, Node, farm_cmd, gen_mlp  # noqa: E402

sys.path.insert(0, str(ROOT / "python" / "farm_tests"))  # its conftest, not python/tests'
from test_history import RUNS, heavier, realtime_wrap  # noqa: E402

from vmrpc_farm import Farm, JobSpec, Where, history  # noqa: E402
from vmrpc_farm.store import Store  # noqa: E402

BASE = 40
COUNT, REPEATS = 3, 6  # jobs (VMs) per bench, interleaved repeat pairs per job
SAME = (("a.vmx", "c2", "c1"), ("a.vmx", "c3", "c2"), ("b.vmx", "c2", "c1"))


def bench(d: pathlib.Path, exe: pathlib.Path, name: str, label: str, ref: pathlib.Path,
          x: pathlib.Path, address: str, store: str, a: argparse.Namespace) -> None:
    d.mkdir(parents=True)
    shutil.copy(exe, d / name)
    r = subprocess.run(
        farm_cmd() + ["bench", str(d / name), str(x), "--address", address,
                      "--where", "bench=control", "--all", "-n", "2", "-r", str(a.repeat),
                      "--count", str(a.count), "--min-repeat-ms", str(a.min_repeat_ms), "--label", label, "--store", store,
                      "--control", str(ref), "-q"],
        capture_output=True, text=True, timeout=300,
    )
    if r.returncode != 0:
        raise RuntimeError(r.stdout + r.stderr)


def figures(store: str, threshold: float) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    with Store(store) as s:
        series = s.series()
    for label, baseline in (("c2", "c1"), ("c3", "c2")):
        for raw in (False, True):
            for v in history.check(series, label, baseline, threshold, raw=raw):
                key = f"{v['model']} {label}/{baseline}"
                out.setdefault(key, {})["raw" if raw else "normalized"] = {
                    "ratio": v.get("ratio"), "ci": [v.get("ci_lo"), v.get("ci_hi")],
                    "verdict": v["verdict"], "measure": v["measure"],
                }
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--heavy", default="45")
    ap.add_argument("--threshold", type=float, default=0.05)
    ap.add_argument("--count", type=int, default=COUNT, help="jobs (VMs) per bench")
    ap.add_argument("-r", "--repeat", type=int, default=REPEATS)
    ap.add_argument("--min-repeat-ms", type=int, default=40)
    ap.add_argument("--threads", action="store_true",
                    help="let PoCL use every core (default: one thread, as the test)")
    a = ap.parse_args()
    heavies = [int(h) for h in a.heavy.split(",")]
    work = pathlib.Path(tempfile.mkdtemp(prefix="bench-farm-control.", dir=BUILD))
    if not a.threads:
        os.environ["POCL_CPU_MAX_CU_COUNT"] = "1"
        os.environ["POCL_MAX_PTHREAD_COUNT"] = "1"
    mlp = gen_mlp(work)
    base = heavier(mlp.vmx, work, BASE)
    ref = work / "ref.vmx"
    shutil.copy(base, ref)
    wrap = realtime_wrap()
    agent = Agent(work / "cache", wrap=wrap)
    head = node = None
    rounds: List[Dict[str, Any]] = []
    try:
        head = Head(work)
        node = Node(work, head.address, [agent], ["bench=control"])
        where = [Where.parse("bench=control")]
        with Farm(head.address) as farm:
            for _ in range(600):
                if farm.select(where):
                    break
                time.sleep(0.1)
            x = np.load(mlp.x)
            for i, exe in enumerate([base] + [heavier(mlp.vmx, work, h) for h in heavies]):
                warm = JobSpec("bench", f"warm-{i}", exe.read_bytes(), args=(x,), number=1,
                               repeat=3, min_repeat_ms=300)
                assert [j.state for j in farm.dispatch(warm, where, deadline=120)] == ["ok"]
        for k in range(a.rounds):
            h = heavies[k % len(heavies)]
            heavy = heavier(mlp.vmx, work, h)
            store = str(work / f"round{k}.db")
            load0 = os.getloadavg()[0]
            t0 = time.time()
            for n, label in enumerate(RUNS):
                for name in ("a.vmx", "b.vmx"):
                    exe = heavy if (name, label) == ("b.vmx", "c3") else base
                    bench(work / f"r{k}" / f"{n}-{label}" / name[0], exe, name, label, ref,
                          mlp.x, head.address, store, a)
            rounds.append({"heavy": h, "more_work": (4.3 + 2.1 * h) / (4.3 + 2.1 * BASE) - 1,
                           "load": [load0, os.getloadavg()[0]], "seconds": time.time() - t0,
                           "comparisons": figures(store, a.threshold)})
            print(json.dumps(rounds[-1]), file=sys.stderr, flush=True)
    finally:
        if node is not None:
            node.stop()
        agent.stop()
        if head is not None:
            head.stop()

    def spread(kind: str) -> float:
        return max(math.exp(abs(math.log(r["comparisons"][f"{m} {lb}/{bl}"][kind]["ratio"])))
                   for r in rounds for m, lb, bl in SAME)

    def flagged(kind: str) -> int:
        return sum(r["comparisons"]["b.vmx c3/c2"][kind]["verdict"] == "slower" for r in rounds)

    def same(kind: str) -> int:
        return sum(all(r["comparisons"][f"{m} {lb}/{bl}"][kind]["verdict"] == "same"
                       for m, lb, bl in SAME) for r in rounds)

    print(json.dumps({
        "parameters": vars(a),
        "rounds": rounds,
        "realtime": bool(wrap),
        "summary": {kind: {"same_work_max_ratio": spread(kind), "c3_flagged": flagged(kind),
                           "same_work_all_same": same(kind), "rounds": len(rounds)}
                    for kind in ("normalized", "raw")},
    }, indent=1))


if __name__ == "__main__":
    main()
