"""What the farm adds per job, for docs/farm.md: the same `run` job of the
example MLP on one local vmagent, called directly (the same-run baseline)
and dispatched through the farm (a head and a node on loopback).

    VMRPC_BUILD_DIR=build build/venv-py/bin/python bench/bench_farm.py [--jobs 40]

Prints one JSON object: direct_s (one job run directly, median), farm_job_s
(one dispatch of one job, median: select + submit + run + result),
farm_batch_per_job_s (--jobs jobs in one dispatch, wall / jobs), overhead
per job and the ratios to the baseline, and head_rss_bytes / node_rss_bytes
(resident memory of the head and of a node serving one agent, idle after
the jobs).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python" / "farm_tests"))
sys.path.insert(0, str(ROOT / "bench"))

import numpy as np  # noqa: E402
from bench_farm_engines import rss_tree  # noqa: E402
from farm_proc import BUILD, Agent, Head, Node, gen_mlp  # noqa: E402

from vmrpc_farm import Farm, JobSpec, Where  # noqa: E402
from vmrpc_farm import jobs as farm_jobs  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=40)
    a = ap.parse_args()
    work = pathlib.Path(tempfile.mkdtemp(prefix="bench-farm.", dir=BUILD))
    vmx, x, _ = gen_mlp(work)
    spec = JobSpec("run", "mlp.vmx", vmx.read_bytes(), args=(np.load(x),))
    agent = Agent(work / "cache")
    head = node = None
    try:
        slot = farm_jobs.AgentSlot("direct", agent.url, None, {})
        direct = []
        for _ in range(a.jobs):
            t0 = time.perf_counter()
            farm_jobs._run(slot, spec, {})
            direct.append(time.perf_counter() - t0)
        head = Head(work)
        node = Node(work, head.address, [agent], ["bench=farm"], interval=2.0)
        where = [Where.parse("bench=farm")]
        with Farm(head.address) as farm:
            for _ in range(600):
                if farm.select(where):
                    break
                time.sleep(0.1)
            one = []
            for _ in range(max(5, a.jobs // 4)):
                t0 = time.perf_counter()
                js = farm.dispatch(spec, where, mode="any")
                one.append(time.perf_counter() - t0)
                assert js[0].state == "ok", js[0].to_dict()
            t0 = time.perf_counter()
            js = farm.dispatch(spec, where, mode="any", count=a.jobs)
            batch = (time.perf_counter() - t0) / a.jobs
            assert all(j.state == "ok" for j in js)
        time.sleep(1.0)
        d, o = statistics.median(direct), statistics.median(one)
        print(
            json.dumps(
                {
                    "jobs": a.jobs,
                    "direct_s": d,
                    "farm_job_s": o,
                    "farm_batch_per_job_s": batch,
                    "overhead_job_s": o - d,
                    "overhead_batch_per_job_s": batch - d,
                    "ratio_job_to_direct": o / d,
                    "ratio_batch_to_direct": batch / d,
                    "head_rss_bytes": rss_tree(head.proc.pid),
                    "node_rss_bytes": rss_tree(node.proc.pid),
                }
            )
        )
    finally:
        for p in (node, head):
            if p is not None:
                p.stop()
        agent.stop()
        subprocess.run(["rm", "-rf", str(work)], check=False)


if __name__ == "__main__":
    main()
