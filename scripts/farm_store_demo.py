"""The end of the farm demo (scripts/farm-demo.sh): the farm remembers.

On loopback, a head and one vmagent under a node; the example MLP
benchmarked under two labels into the results store DIR/farm-results.db,
then `vmrpc-farm history`, `vmrpc-farm check --label demo-2 --baseline
demo-1` (DIR/farm-check.xml and .json) and `vmrpc-farm report`
(DIR/farm-report.html). Exit 0 when both runs were stored, the check ran
and wrote its files (whatever its verdict: the same executable twice is
`same` on a quiet machine, but a machine shared with other work may drift
between the runs) and the report was written; 1 otherwise.
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python" / "farm_tests"))

from farm_proc import BUILD, Agent, Head, Node, farm_cmd, gen_mlp  # noqa: E402


def farm(*args: str) -> int:
    print("$ vmrpc-farm " + " ".join(args), flush=True)
    return subprocess.run(farm_cmd() + list(args)).returncode


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".", help="where farm-results.db and the rest go")
    out = pathlib.Path(ap.parse_args().out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    db, report = out / "farm-results.db", out / "farm-report.html"
    for f in (db, report, out / "farm-check.xml", out / "farm-check.json"):
        f.unlink(missing_ok=True)
    work = pathlib.Path(tempfile.mkdtemp(prefix="farm-store-demo.", dir=BUILD))
    head = agent = node = None
    try:
        vmx, x, _ = gen_mlp(work)
        head = Head(work, lifetime=600)
        agent = Agent(work / "cache")
        node = Node(work, head.address, [agent], ["farm=store-demo"], lifetime=600)
        # the control: a fixed reference timed beside the model in each job
        # (here the same MLP, a copy), so that check judges model / control
        ref = work / "ref.vmx"
        shutil.copy(vmx, ref)
        print(f"\n== the farm remembers: two labels into {db}", flush=True)
        for label in ("demo-1", "demo-2"):
            rc = farm("bench", str(vmx), str(x), "--address", head.address, "--where",
                      "farm=store-demo", "--all", "-r", "10", "--min-repeat-ms", "30",
                      "--label", label, "--store", str(db), "--tag", "source=farm-demo",
                      "--control", str(ref))
            if rc != 0:
                print(f"demo: bench under {label} failed ({rc})")
                return 1
        if farm("history", "--store", str(db)) != 0:
            return 1
        rc = farm("check", "--store", str(db), "--label", "demo-2", "--baseline", "demo-1",
                  "--junit", str(out / "farm-check.xml"), "--json", str(out / "farm-check.json"))
        if rc not in (0, 1) or not (out / "farm-check.xml").exists():
            print(f"demo: check failed ({rc})")
            return 1
        if rc == 1:
            # The same executable twice: on a machine shared with other work
            # its speed drifts, and one VM may run off its control's VM by
            # where its memory landed (docs/farm.md).
            print("demo: check calls the second run slower: the machine's speed drifted")
        if farm("report", "--store", str(db), "-o", str(report)) != 0 or not report.exists():
            return 1
        print(f"demo: store {db}, check {out / 'farm-check.xml'}, report {report}")
        return 0
    finally:
        for p in (node, head):
            if p is not None:
                p.stop()
        if agent is not None:
            agent.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
