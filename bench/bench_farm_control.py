"""Whether `vmrpc-farm check` gets the three-label story of
python/farm_tests/test_history.py right on a busy machine, for docs/farm.md:
the story told --rounds times, each into a fresh SQLite store, with the
test's parameters unless told otherwise, and each comparison judged twice
from the same runs: normalized (model time / paired control time, on the
device timer where every repeat has it) and raw (`check --raw`).

    VMRPC_BUILD_DIR=build build/venv-py/bin/python bench/bench_farm_control.py \\
        [--rounds 10] [--heavy 46] [--count 4] [-r 10] [--best-of 3] [-n 1]

a.vmx is the base executable (the MLP with 40 more GEMMs) under every
label; b.vmx is the base under c1 and c2 and the base with HEAVY more GEMMs
under c3 (46: 14 % more multiply-adds; 45: 12 %), rounds taking the --heavy
values in turn. Each label is benchmarked once (c1 c2 c3), as the test
does, each bench --control REF (a copy of the base executable) with --count
jobs (each its own two VMs) of -r interleaved repeat pairs, each repeat the
fastest of --best-of batches of -n calls. The agent runs PoCL on one
thread, real-time where allowed, as the test's.

Prints one JSON object: per round the load average and, per comparison
(a.vmx c2/c1, a.vmx c3/c2, b.vmx c2/c1, b.vmx c3/c2), the normalized and
the raw ratio with their 95 % intervals, verdicts at --threshold and
Otava's change points; and a summary: the largest distance from 1 of a
same-work comparison (max |log ratio| as a ratio), the rounds whose three
same-work comparisons were all `same`, those that flagged b.vmx c3 as
slower, and those whose every verdict and change point is the test's
(`story_right`), normalized and raw.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import pathlib
import shutil
import sys
import tempfile
import time
from typing import Any, Dict, List

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python" / "farm_tests"))

import numpy as np  # noqa: E402
from farm_proc import BUILD, Agent, Head, Node, gen_mlp  # noqa: E402

sys.path.insert(0, str(ROOT / "python" / "farm_tests"))  # its conftest, not python/tests'
from test_history import (  # noqa: E402
    BASE, BEST_OF, COUNT, HEAVY, REPEATS, RUNS, THRESHOLD, heavier, realtime_wrap)

from vmrpc_farm import Farm, JobSpec, Where, history  # noqa: E402
from vmrpc_farm.jobs import Control  # noqa: E402
from vmrpc_farm.store import Store  # noqa: E402

WHERE = [Where.parse("bench=control")]
SAME = (("a.vmx", "c2", "c1"), ("a.vmx", "c3", "c2"), ("b.vmx", "c2", "c1"))


def bench(farm: Farm, exe: pathlib.Path, name: str, label: str, ref: pathlib.Path,
          x: Any, store: str, a: argparse.Namespace) -> None:
    """What `vmrpc-farm bench NAME --control REF --count ... --label LABEL
    --store STORE` does, through the Python API: the same jobs, the same
    rows, without a process start per bench (tens of seconds on a loaded
    machine, which would make ten rounds take an hour)."""
    model = exe.read_bytes()
    spec = JobSpec("bench", name, model, args=(x,), number=a.number, repeat=a.repeat,
                   min_repeat_ms=a.min_repeat_ms, best_of=a.best_of,
                   control=Control(ref.name, ref.read_bytes(), args=(x,)))
    jobs = farm.dispatch(spec, WHERE, "all", deadline=600, count=a.count)
    if [j.state for j in jobs] != ["ok"] * a.count:
        raise RuntimeError(json.dumps([j.to_dict() for j in jobs], default=str)[:4000])
    with Store(store) as s:
        s.add_run(label, name, "main", hashlib.sha256(model).hexdigest(),
                  [j.to_dict() for j in jobs])


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
                    "time_base": v.get("time_base", "wall"),
                    # where Otava put change points: (label, on its first repeat)
                    "change_points": [[c["label"], c["at_label_start"]]
                                      for c in v["change_points"]],
                }
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--heavy", default=str(HEAVY))
    ap.add_argument("--threshold", type=float, default=float(THRESHOLD))
    ap.add_argument("--count", type=int, default=COUNT, help="jobs (VMs) per bench")
    ap.add_argument("-r", "--repeat", type=int, default=REPEATS)
    ap.add_argument("-n", "--number", type=int, default=1)
    ap.add_argument("--best-of", type=int, default=BEST_OF)
    ap.add_argument("--min-repeat-ms", type=int, default=0)
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
        with Farm(head.address) as farm:
            for _ in range(600):
                if farm.select(WHERE):
                    break
                time.sleep(0.1)
            x = np.load(mlp.x)
            for i, exe in enumerate([base] + [heavier(mlp.vmx, work, h) for h in heavies]):
                warm = JobSpec("bench", f"warm-{i}", exe.read_bytes(), args=(x,), number=1,
                               repeat=3, min_repeat_ms=300)
                assert [j.state for j in farm.dispatch(warm, WHERE, deadline=120)] == ["ok"]
            for k in range(a.rounds):
                h = heavies[k % len(heavies)]
                heavy = heavier(mlp.vmx, work, h)
                store = str(work / f"round{k}.db")
                load0 = os.getloadavg()[0]
                t0 = time.time()
                for label in RUNS:
                    for name in ("a.vmx", "b.vmx"):
                        exe = heavy if (name, label) == ("b.vmx", "c3") else base
                        bench(farm, exe, name, label, ref, x, store, a)
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

    def story(kind: str) -> int:
        """rounds whose every verdict is the test's: the three same-work
        comparisons `same`, b c3/c2 `slower`, one change point of b.vmx on
        c3's first repeat and none of a.vmx there"""
        def ok(r: Dict[str, Any]) -> bool:
            c = r["comparisons"]
            at = [cp for cp in c["b.vmx c3/c2"][kind]["change_points"] if cp[0] == "c3"]
            return (all(c[f"{m} {lb}/{bl}"][kind]["verdict"] == "same" for m, lb, bl in SAME)
                    and c["b.vmx c3/c2"][kind]["verdict"] == "slower"
                    and at == [["c3", True]]
                    and ["c3", True] not in c["a.vmx c3/c2"][kind]["change_points"])
        return sum(ok(r) for r in rounds)

    print(json.dumps({
        "parameters": vars(a),
        "rounds": rounds,
        "realtime": bool(wrap),
        "summary": {kind: {"same_work_max_ratio": spread(kind), "c3_flagged": flagged(kind),
                           "same_work_all_same": same(kind), "story_right": story(kind),
                           "rounds": len(rounds)}
                    for kind in ("normalized", "raw")},
    }, indent=1))


if __name__ == "__main__":
    main()
