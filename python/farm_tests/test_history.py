"""The farm remembers (docs/farm.md): three labels benchmarked by real
agents through the real engine into a store (SQLite, and a real PostgreSQL
server), the third label's executable doing more work; `check` flags exactly
that (model, device), the change point lands on the third label, and the
report opens in a real headless Chromium."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import xml.etree.ElementTree as ET
from typing import Any, Callable, Dict, List, Tuple

import numpy as np
import pytest

from conftest import Cluster, Mlp, chromium, new_pg_database
from farm_proc import BUILD, farm_cmd
from vmrpc_farm import JobSpec, stats

LABELS = ["c1", "c2", "c3"]
RUNS = ["c1", "c2", "c3", "c3", "c2", "c1"]
REPEATS = 10


@dataclasses.dataclass(frozen=True)
class Plan:
    """What the story measures: b.vmx is the MLP with `base` more GEMMs
    under c1 and c2 and with `heavy` more under c3; `threshold` is the
    relative difference that matters; c3's change must exceed `min_ratio`."""

    threshold: str
    base: int
    heavy: int
    min_ratio: float


FINE = Plan(threshold="0.05", base=40, heavy=46, min_ratio=1.05)
COARSE = Plan(threshold="2.0", base=0, heavy=48, min_ratio=3.0)
# how far the control may stray from 1 for the fine plan to be judged: its
# estimate within half the 5 % threshold, so that b.vmx, measured in the
# same calls, keeps c2 against c1 `same` and c3's 14 % above the threshold
# with a margin on both sides. The estimate, not the whole interval: the
# interval comes from the repeats of two calls, and calls of one unchanged
# executable differ by 1-4 % even on a quiet machine while the repeats of a
# call agree closely, so a whole-interval gate set aside a quiet machine's
# story whose control `check` itself called `same` (1.015 [1.005, 1.029]).
QUIET_AA = 0.025
# fine stories tried before the coarse one: one, since a second try found the
# host no quieter in any run on the development guest (four of four set
# aside, controls 0.78-1.30) and cost 40 s of a suite that must stay short
FINE_TRIES = 1


def realtime_wrap() -> Tuple[str, ...]:
    """chrt/taskset: the agent as a real-time (SCHED_FIFO) task on the last
    core this process may use, where that is allowed (root or
    CAP_SYS_NICE, as in CI); () elsewhere."""
    wrap = ("chrt", "-f", "1", "taskset", "-c", str(max(os.sched_getaffinity(0))))
    try:
        ok = subprocess.run([*wrap, "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return wrap if ok else ()


def heavier(vmx: pathlib.Path, d: pathlib.Path, extra: int) -> pathlib.Path:
    """The MLP with `extra` more 8x512x512 GEMMs before it returns (2.1 M
    multiply-adds each, beside its own 4.3 M): disassembled and assembled
    again with vmclient. A few ms per call: long enough that a loaded
    machine's scheduling evens out within a call."""
    if extra == 0:
        return vmx
    vmclient = str(BUILD / "client" / "vmclient")
    text = subprocess.run(
        [vmclient, "disasm", str(vmx)], check=True, capture_output=True, text=True
    ).stdout
    # Two fresh registers past the function's last (the emitter reuses
    # registers, so none below is sure to be free), on the scratch storage
    # %1 (32 KiB: two [8, 512] float32 tensors) before it is killed.
    anchor = "  %1 = call $vm.builtin.kill(%1)\n  ret %"
    regs = re.search(r"^\.func @main\(.*\) regs (\d+) \{$", text, re.M)
    assert anchor in text and regs, "the example MLP changed: update heavier()"
    for c in ("c0 float 1", "c1 float 0", "c4 tensor float32[512, 512]", "c11 dtype float32",
              "c12 shape [8192]", "c14 shape [8, 512]"):
        assert f".const {c}" in text, f"the example MLP changed ({c}): update heavier()"
    n = int(regs.group(1))
    a, b = f"%{n}", f"%{n + 1}"
    more = (
        f"  {a} = call $vm.builtin.alloc_tensor(%1, 0, c14, c11)\n"
        f"  {b} = call $vm.builtin.alloc_tensor(%1, 16384, c14, c11)\n"
        + f"  call $cl.gemm({a}, c4, 0, 0, c0, c1, {b})\n" * extra
        + f"  {a} = call $vm.builtin.kill({a})\n  {b} = call $vm.builtin.kill({b})\n"
    )
    text = text.replace(regs.group(0), regs.group(0).replace(f"regs {n} ", f"regs {n + 2} "))
    src, out = d / f"mlp+{extra}.vmasm", d / f"mlp+{extra}.vmx"
    src.write_text(text.replace(anchor, more + anchor))
    subprocess.run([vmclient, "asm", str(src), "-o", str(out)], check=True)
    return out


def farm(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        farm_cmd() + list(args), capture_output=True, text=True, timeout=timeout
    )


def fill(tmp: pathlib.Path, c: Cluster, address: str, store: str, mlp: Mlp, plan: Plan) -> None:
    """a.vmx: the base executable under every label; b.vmx: the base under
    c1 and c2, the heavy one under c3 (the plan says how much heavier)."""
    tmp.mkdir(parents=True, exist_ok=True)
    base, heavy = heavier(mlp.vmx, tmp, plan.base), heavier(mlp.vmx, tmp, plan.heavy)
    # Each label twice, mirrored (c1 c2 c3 c3 c2 c1): a shared machine's
    # speed drifts over the minute as its load comes and goes, and a drift
    # falls on every label alike.
    for n, label in enumerate(RUNS):
        for name in ("a.vmx", "b.vmx"):
            d = tmp / f"{n}-{label}" / name.split(".")[0]
            d.mkdir(parents=True)
            src = heavy if (name, label) == ("b.vmx", "c3") else base
            shutil.copy(src, d / name)
            r = farm(
                "bench", str(d / name), str(mlp.x), "--address", address,
                "--where", f"test={c.name}", "--all", "-n", "2", "-r", str(REPEATS),
                "--min-repeat-ms", "40", "--label", label, "--store", store,
                "--tag", "ci=test",
            )
            assert r.returncode == 0, r.stdout + r.stderr


def verdicts(
    store: str, label: str, baseline: str, tmp: pathlib.Path, plan: Plan
) -> Tuple[int, Dict[str, Any], ET.Element]:
    j, x = tmp / f"check-{label}.json", tmp / f"check-{label}.xml"
    r = farm("check", "--store", store, "--label", label, "--baseline", baseline,
             "--threshold", plan.threshold, "--json", str(j), "--junit", str(x))
    doc = json.loads(j.read_text())
    by_model = {v["model"]: v for v in doc["verdicts"]}
    return r.returncode, by_model, ET.parse(x).getroot()


def check_story(store: str, tmp: pathlib.Path, plan: Plan) -> None:
    rc, v, junit = verdicts(store, "c2", "c1", tmp, plan)
    assert rc == 0, v
    assert {m: x["verdict"] for m, x in v.items()} == {"a.vmx": "same", "b.vmx": "same"}, v
    assert junit.find("testsuite").get("failures") == "0"

    rc, v, junit = verdicts(store, "c3", "c2", tmp, plan)
    assert rc == 1, v
    assert {m: x["verdict"] for m, x in v.items()} == {"a.vmx": "same", "b.vmx": "slower"}, v
    assert v["b.vmx"]["regression"] and v["b.vmx"]["ci_lo"] > 1
    # The change point of b.vmx lands on c3's first repeat; a.vmx has none
    # there. (A shared machine's speed may drift by 2x within a minute, which
    # Otava may mark inside c1 or c2: not asserted either way.)
    at_c3 = [c for c in v["b.vmx"]["change_points"] if c["label"] == "c3" and c["at_label_start"]]
    assert len(at_c3) == 1, v["b.vmx"]["change_points"]
    assert at_c3[0]["after"] > plan.min_ratio * at_c3[0]["before"]
    assert v["b.vmx"]["change_point_at_label"] and not v["a.vmx"]["change_point_at_label"]
    assert not any(c["label"] == "c3" and c["at_label_start"] for c in v["a.vmx"]["change_points"])
    suite = junit.find("testsuite")
    assert suite.get("tests") == "2" and suite.get("failures") == "1"
    cases = {tc.get("classname"): tc for tc in suite.findall("testcase")}
    assert cases["b.vmx.check"].find("failure") is not None
    assert cases["a.vmx.check"].find("failure") is None

    h = farm("history", "--store", store, "--json", "-")
    assert h.returncode == 0, h.stderr
    hist = {s["model"]: s for s in json.loads(h.stdout)}
    assert [r["label"] for r in hist["b.vmx"]["labels"]] == LABELS
    assert [r["repeats"] for r in hist["b.vmx"]["labels"]] == [2 * REPEATS] * 3
    shas = [r["exe_sha256"] for r in hist["b.vmx"]["labels"]]
    assert shas[0] == shas[1] != shas[2]

    bad = farm("check", "--store", store, "--label", "nope", "--baseline", "c1")
    assert bad.returncode == 2 and "--label 'nope': no such label" in bad.stderr


def quiet_agent(
    cluster: Callable[..., Cluster], monkeypatch: pytest.MonkeyPatch, mlp: Mlp,
    tmp: pathlib.Path, store_kind: str,
) -> Tuple[Cluster, bool, Dict[str, Any]]:
    """One agent whose PoCL runs one thread (on a shared, loaded machine a
    kernel spread over threads waits for the slowest of them), real-time
    where allowed; whether the device is quiet enough to try the fine
    story, and the A/A figures that say so.

    A 10 % regression can be found only on a quiet device. On a test machine
    shared with builds (2 cores under a load of 8 to 20), an unchanged
    executable's medians were seen 2x apart between runs seconds apart, and
    1.45x apart even for a real-time agent on a core of its own (the other
    core's load slows it through what the cores share). So four runs of the
    fine plan's base executable measure the device first, compared A B B A
    with `check`'s own statistics: where that A/A estimate is within QUIET_AA
    of 1 and its interval within the threshold, the fine story may run (story()):
    c3 does 14 % more work (46 GEMMs of 2.1 M multiply-adds instead of 40,
    beside the MLP's own 4.3 M) against a 5 % threshold; elsewhere the story
    is told coarsely (25x the work against a 200 % threshold) and the test
    says so. The plan taken and the figures are written to
    BUILD/farm-history-plan-NAME.json."""
    monkeypatch.setenv("POCL_CPU_MAX_CU_COUNT", "1")
    monkeypatch.setenv("POCL_MAX_PTHREAD_COUNT", "1")
    wrap = realtime_wrap()
    c = cluster(1, wrap)
    x = np.load(mlp.x)
    # A fresh agent's first seconds are slower (kernels built, caches
    # cold), and so is each executable's first run (uploaded, its memory
    # planned: on a quiet machine the A/A's first run came out 4-35 %
    # slower than the other three): warm up the agent and the fine plan's
    # two executables first, storing nothing.
    base = heavier(mlp.vmx, tmp, FINE.base).read_bytes()
    for i, exe in enumerate((mlp.vmx.read_bytes(), base,
                             heavier(mlp.vmx, tmp, FINE.heavy).read_bytes())):
        warm = JobSpec("bench", f"warm-up-{i}", exe, args=(x,), number=1, repeat=3,
                       min_repeat_ms=300)
        assert [j.state for j in c.farm.dispatch(warm, c.where, deadline=120)] == ["ok"]
    # A/A: four runs of the base executable in the order A B B A, as `fill`
    # mirrors its labels; B's repeats against A's with `check`'s statistics
    medians, runs = [], []
    for i in range(4):
        job = JobSpec("bench", f"calibrate-{i}", base, args=(x,), number=2, repeat=REPEATS,
                      min_repeat_ms=40)
        (r,) = c.farm.dispatch(job, c.where, deadline=120)
        runs.append(list(r.result["timing"]["results"]))
        medians.append(statistics.median(runs[-1]))
    aa = stats.hl_ratio(runs[0] + runs[3], runs[1] + runs[2])
    # A busy device is not even tried: the A/A estimate within QUIET_AA and
    # its interval within the threshold (under a load of 10 an estimate of
    # 1.001 came with the interval 0.94-1.09).
    quiet = (near(aa.ratio, QUIET_AA)
             and within(aa.lo, aa.hi, float(FINE.threshold)))
    note = {"aa_ratio": aa.ratio, "aa_interval": [aa.lo, aa.hi], "medians_s": medians,
            "realtime": bool(wrap)}
    return c, quiet, note


def near(x: Any, margin: float) -> bool:
    return x is not None and 1 / (1 + margin) <= x <= 1 + margin


def within(lo: Any, hi: Any, margin: float) -> bool:
    return near(lo, margin) and near(hi, margin)


def control_quiet(store: str, tmp: pathlib.Path) -> Tuple[bool, Dict[str, Any]]:
    """Whether the device stayed quiet through the fine story: every
    comparison of an executable with itself, a.vmx (the control, the same
    executable under every label) c2 against c1 and c3 against c2, and
    b.vmx c2 against c1, must have its estimate within QUIET_AA of 1. (b's
    own: on a machine at load 1.5 a.vmx moved 2 % between c1 and c2 while
    b.vmx, benchmarked seconds later in the same runs, moved 16 %.)"""
    seen: Dict[str, Any] = {}
    (tmp / "control").mkdir(exist_ok=True)
    for label, baseline, models in (("c2", "c1", ("a.vmx", "b.vmx")), ("c3", "c2", ("a.vmx",))):
        _, v, _ = verdicts(store, label, baseline, tmp / "control", FINE)
        for model in models:
            x = v[model]
            seen[f"{model} {label}/{baseline}"] = [x.get("ratio"), x.get("ci_lo"), x.get("ci_hi")]
    return all(near(r, QUIET_AA) for r, _, _ in seen.values()), seen


def story(
    c: Cluster, address: str, new_store: Callable[[str], str], mlp: Mlp, tmp: pathlib.Path,
    quiet: bool, note: Dict[str, Any], store_kind: str,
) -> Tuple[str, Plan]:
    """The fine story where the device is quiet enough to judge 5 %, else
    the coarse one. Quietness is measured twice: the A/A gate before (no
    fine story is tried on a device that is plainly busy) and the control
    a.vmx during it. Under a load of 16 an A/A interval of 0.988-1.023 was
    followed by a c2 against c1 that was not `same`: a device's quiet
    minute says little about the next one, so a fine story whose control
    moved is set aside (written to the plan file, not judged) and the
    coarse story is told instead. A fine story whose control stayed quiet
    is judged in full. FINE_TRIES fine stories are tried, each with a
    fresh store."""
    note = dict(note, fine_tried=quiet, controls=[])
    plan = COARSE
    for k in range(FINE_TRIES if quiet else 0):
        store = new_store(f"fine{k}")
        fill(tmp / f"fine{k}", c, address, store, mlp, FINE)
        ok, seen = control_quiet(store, tmp / f"fine{k}")
        note["controls"].append(seen)
        if ok:
            plan = FINE
            break
    if plan is COARSE:
        store = new_store("coarse")
        fill(tmp / "coarse", c, address, store, mlp, COARSE)
    note["plan"] = "fine" if plan is FINE else "coarse"
    (BUILD / f"farm-history-plan-{store_kind}.json").write_text(json.dumps(note, indent=1))
    print(f"test_history: {note}")
    check_story(store, tmp, plan)
    return store, plan


def test_three_labels_sqlite(
    cluster: Callable[..., Cluster], mlp: Mlp, head: Any, tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    c, quiet, note = quiet_agent(cluster, monkeypatch, mlp, tmp_path, "sqlite")
    store, plan = story(c, head.address, lambda p: str(tmp_path / f"results-{p}.db"), mlp,
                        tmp_path, quiet, note, "sqlite")
    report = tmp_path / "report.html"
    r = farm("report", "--store", store, "-o", str(report), "--threshold", plan.threshold)
    assert r.returncode == 0, r.stderr
    open_in_chromium(report, tmp_path)


def test_three_labels_postgresql(
    cluster: Callable[..., Cluster], mlp: Mlp, head: Any, tmp_path: pathlib.Path,
    postgres_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    c, quiet, note = quiet_agent(cluster, monkeypatch, mlp, tmp_path, "postgresql")
    story(c, head.address, lambda p: new_pg_database(postgres_url, f"history_{p}"), mlp,
          tmp_path, quiet, note, "postgresql")


CONSOLE = re.compile(r"CONSOLE\(\d+\)\]|Uncaught|console-api", re.I)


def run_chromium(page: pathlib.Path, *extra: str) -> subprocess.CompletedProcess:
    exe = chromium()
    assert exe is not None
    return subprocess.run(
        [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--no-first-run", "--enable-logging=stderr", "--v=0", "--virtual-time-budget=8000",
         "--window-size=1400,2400",
         "--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={page.parent / 'chromium-profile'}",
         *extra, page.as_uri()],
        capture_output=True, text=True, timeout=120,
    )


def open_in_chromium(report: pathlib.Path, tmp: pathlib.Path) -> None:
    if chromium() is None:
        pytest.skip("no chromium (Debian package chromium; scripts/install-deps.sh)")
    text = report.read_text()
    # Nothing loaded from elsewhere: no script or stylesheet by address (and
    # Chromium below resolves no host name at all).
    assert re.findall(r"<script[^>]*\ssrc=|<link[^>]*\shref=", text) == []
    # The console check itself: a page with an error is seen to have one.
    broken = tmp / "broken.html"
    broken.write_text("<html><body><script>no_such_function_here();</script></body></html>")
    r = run_chromium(broken, "--dump-dom")
    assert "no_such_function_here" in r.stderr and CONSOLE.search(r.stderr), r.stderr[-3000:]

    r = run_chromium(report, "--dump-dom")
    assert r.returncode == 0, r.stderr[-3000:]
    errors = [ln for ln in r.stderr.splitlines() if CONSOLE.search(ln)]
    assert errors == [], errors
    dom = r.stdout
    for n in (0, 1):  # two series (a.vmx, b.vmx): distribution and trend of each
        for kind in ("dist", "trend"):
            m = re.search(rf'<div id="{kind}-{n}"[^>]*class="[^"]*js-plotly-plot', dom)
            assert m, f"{kind}-{n} was not drawn by plotly"
    assert dom.count('class="main-svg"') >= 4
    assert dom.count('class="trace boxes"') == 4  # label and baseline, per series
    assert "slower" in dom and "change point" in dom
    shot = BUILD / "farm-report.png"
    shot.unlink(missing_ok=True)
    r = run_chromium(report, f"--screenshot={shot}")
    assert shot.exists() and shot.stat().st_size > 10_000, r.stderr[-3000:]
    shutil.copy(report, BUILD / "farm-report.html")
