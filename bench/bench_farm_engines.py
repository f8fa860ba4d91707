"""What a distributed engine costs on this machine, for docs/farm.md: Dask
distributed against Ray, each run in its own venv with a local cluster of one
worker process with one thread/CPU, on loopback.

    python bench/bench_farm_engines.py --engine dask|ray [--tasks 200]

Prints one JSON object: start_s (cluster up), rtt_s (one no-op task,
submitted and its result fetched, median of --tasks), per_task_s (--tasks
no-op tasks submitted at once, wall / count), rss_bytes (the resident memory
of this process and every process it started, cluster up and idle, minus
this process's before the engine was imported), install_bytes (the files of
the engine's distribution and everything it requires, not counting numpy
and what a bare venv has), and baseline_call_s (the same no-op called in
this process: the same-run baseline; ratio = rtt_s / baseline_call_s).
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import os
import re
import statistics
import time
from typing import Callable, Dict, List, Set


def noop(x: int) -> int:
    return x


def rss_tree(pid: int) -> int:
    """Resident bytes of pid and all its descendants (/proc)."""
    children: Dict[int, List[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        children.setdefault(ppid, []).append(int(d))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo.extend(children.get(p, []))
        try:
            with open(f"/proc/{p}/status") as f:
                m = re.search(r"VmRSS:\s+(\d+) kB", f.read())
            total += int(m.group(1)) * 1024 if m else 0
        except OSError:
            pass
    return total


def install_bytes(dist: str) -> int:
    base = {"pip", "setuptools", "numpy"}
    seen: Set[str] = set()
    todo = [dist]
    total = 0
    while todo:
        name = re.split(r"[\s;<>=!~\[(]", todo.pop(), maxsplit=1)[0].lower().replace("_", "-")
        if not name or name in seen or name in base:
            continue
        seen.add(name)
        try:
            d = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        for f in d.files or []:
            try:
                total += os.path.getsize(d.locate_file(f))
            except OSError:
                pass
        for r in d.requires or []:
            if "extra ==" not in r:
                todo.append(r)
    return total


def median_rtt(call: Callable[[int], int], n: int) -> float:
    ts = []
    for i in range(n):
        t0 = time.perf_counter()
        assert call(i) == i
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", choices=("dask", "ray"), required=True)
    ap.add_argument("--tasks", type=int, default=200)
    a = ap.parse_args()
    rss0 = rss_tree(os.getpid())
    out: Dict[str, object] = {"engine": a.engine, "tasks": a.tasks}
    t0 = time.perf_counter()
    if a.engine == "dask":
        import distributed
        from distributed import Client, LocalCluster

        cluster = LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            memory_limit=0,
        )
        client = Client(cluster)
        out["version"] = distributed.__version__
        out["start_s"] = time.perf_counter() - t0

        def one(i: int) -> int:
            return client.submit(noop, i, pure=False).result()

        def many(n: int) -> List[int]:
            return client.gather([client.submit(noop, i, pure=False) for i in range(n)])

        def close() -> None:
            client.close()
            cluster.close()

        dist = "distributed"
    else:
        import ray

        ray.init(
            num_cpus=1,
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            logging_level="ERROR",
            log_to_driver=False,
        )
        rnoop = ray.remote(num_cpus=1)(noop)
        out["version"] = ray.__version__
        out["start_s"] = time.perf_counter() - t0

        def one(i: int) -> int:
            return ray.get(rnoop.remote(i))

        def many(n: int) -> List[int]:
            return ray.get([rnoop.remote(i) for i in range(n)])

        close = ray.shutdown
        dist = "ray"
    one(0)  # warm: the worker imports this module once
    out["rtt_s"] = median_rtt(one, a.tasks)
    t1 = time.perf_counter()
    assert many(a.tasks) == list(range(a.tasks))
    out["per_task_s"] = (time.perf_counter() - t1) / a.tasks
    time.sleep(1.0)
    out["rss_bytes"] = rss_tree(os.getpid()) - rss0
    base = median_rtt(noop, a.tasks)
    out["baseline_call_s"] = base
    out["ratio_rtt_to_baseline"] = float(out["rtt_s"]) / max(base, 1e-9)  # type: ignore[arg-type]
    out["install_bytes"] = install_bytes(dist)
    close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
