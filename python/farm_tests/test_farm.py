"""vmrpc-farm against real agents: exclusive leases, queueing, retry after a
killed agent, lost jobs accounted for, and the reports (JSON, JUnit)."""

from __future__ import annotations

import hashlib
import json
import pathlib
import signal
import subprocess
import threading
import time
import traceback
import xml.etree.ElementTree as ET
from typing import Any, Callable, Dict, List

import numpy as np

from conftest import Cluster, Mlp, overlaps
from farm_proc import farm_cmd
from vmrpc_farm import Farm, Job, JobSpec, Where


def bench_spec(mlp: Mlp, min_repeat_ms: int) -> JobSpec:
    return JobSpec(
        "bench",
        "mlp.vmx",
        mlp.vmx.read_bytes(),
        args=(np.load(mlp.x),),
        number=1,
        repeat=1,
        min_repeat_ms=min_repeat_ms,
    )


def by_agent(jobs: List[Job]) -> Dict[str, List[tuple]]:
    out: Dict[str, List[tuple]] = {}
    for j in jobs:
        assert j.result is not None, j.to_dict()
        out.setdefault(j.result["agent"], []).append((j.result["start"], j.result["end"]))
    return out


def test_six_jobs_on_two_agents_never_share_one(
    cluster: Callable[[int], Cluster], mlp: Mlp, head: Any
) -> None:
    c = cluster(2)
    spec = bench_spec(mlp, 150)
    results: List[List[Job]] = []
    errors: List[str] = []

    def ci_job() -> None:  # two CI jobs at once, each with its own client
        try:
            with Farm(head.address) as f:
                results.append(f.dispatch(spec, c.where, mode="any", count=3, deadline=300))
        except BaseException:
            errors.append(traceback.format_exc())

    threads = [threading.Thread(target=ci_job) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert not errors, errors
    jobs = [j for r in results for j in r]
    assert len(jobs) == 6
    assert [j.state for j in jobs] == ["ok"] * 6, [j.to_dict() for j in jobs]
    per_agent = by_agent(jobs)
    assert set(per_agent) <= {a.name for a in c.farm.select(c.where)}
    for agent, spans in per_agent.items():
        assert overlaps(spans) == [], f"{agent} ran two jobs at once: {spans}"
    assert sum(len(s) for s in per_agent.values()) == 6


def test_jobs_queue_while_the_agent_is_busy(cluster: Callable[[int], Cluster], mlp: Mlp) -> None:
    c = cluster(1)
    out: List[Job] = []
    t = threading.Thread(
        target=lambda: out.extend(
            c.farm.dispatch(bench_spec(mlp, 400), c.where, mode="any", count=3, deadline=300)
        )
    )
    t.start()
    seen_waiting = 0
    seen_lease = None
    while t.is_alive():
        for a in c.farm.agents(with_leases=True):
            if a.name.endswith(c.agents[0].url.split("://")[1]) and a.lease:
                seen_lease = a.lease
                seen_waiting = max(seen_waiting, len(a.waiting) + len(c.farm.queue()))
        time.sleep(0.05)
    t.join()
    assert [j.state for j in out] == ["ok"] * 3
    spans = by_agent(out)
    assert len(spans) == 1 and overlaps(next(iter(spans.values()))) == []
    assert seen_lease is not None and seen_lease.startswith("vmrpc-bench-")
    assert seen_waiting >= 1, "status never showed a job waiting for the busy agent"


def run_and_kill(
    c: Cluster, spec: JobSpec, victim: int, mode: str, count: int, retries: int = 2
) -> List[Job]:
    out: List[Job] = []
    errors: List[BaseException] = []

    def go() -> None:
        try:
            out.extend(
                c.farm.dispatch(
                    spec, c.where, mode=mode, count=count, retries=retries, deadline=300
                )
            )
        except BaseException as e:
            errors.append(e)

    name = c.name_of(c.agents[victim])
    t = threading.Thread(target=go)
    t.start()
    for _ in range(3000):  # until the victim holds a job
        if any(a.name == name and a.lease for a in c.farm.agents(with_leases=True)):
            break
        time.sleep(0.02)
    else:
        raise AssertionError("the victim never got a job")
    c.agents[victim].proc.send_signal(signal.SIGKILL)
    t.join(600)
    assert not errors, errors
    return out


def test_killed_agent_job_retried_on_another(cluster: Callable[[int], Cluster], mlp: Mlp) -> None:
    c = cluster(2)
    victim = c.name_of(c.agents[1])
    other = c.name_of(c.agents[0])
    # Jobs of 4 s at least: the victim is killed well inside its job.
    jobs = run_and_kill(c, bench_spec(mlp, 4000), 1, "all", 1)
    assert len(jobs) == 2
    assert [j.state for j in jobs] == ["ok", "ok"], [j.to_dict() for j in jobs]
    moved = [j for j in jobs if j.target == victim][0]
    assert moved.result is not None and moved.result["agent"] == other, moved.to_dict()
    assert [a["agent"] for a in moved.attempts] == [victim, other], moved.attempts
    assert moved.attempts[0]["error"]
    assert moved.result["properties"]["agent"] == c.agents[0].url
    assert moved.result["version"] and moved.result["timing"]["number"] >= 1
    states = {a.name: a.state for a in c.farm.agents()}
    for _ in range(600):  # the node marks it down after closing its worker
        if states[victim] == "down":
            break
        time.sleep(0.05)
        states = {a.name: a.state for a in c.farm.agents()}
    assert states[victim] == "down" and states[other] == "up", states


def test_job_lost_when_no_match_is_left(cluster: Callable[[int], Cluster], mlp: Mlp) -> None:
    c = cluster(1)
    victim = c.name_of(c.agents[0])
    jobs = run_and_kill(c, bench_spec(mlp, 3000), 0, "any", 2)
    assert [j.state for j in jobs] == ["lost", "lost"], [j.to_dict() for j in jobs]
    for j in jobs:
        assert j.error == f"no matching agent left to run it (tried: {victim})" or (
            j.error == "no matching agent left to run it (tried: none)"
        ), j.error


def test_cli_check_json_and_junit(
    cluster: Callable[[int], Cluster], mlp: Mlp, head: Any, tmp_path: pathlib.Path
) -> None:
    c = cluster(2)
    wrong = tmp_path / "wrong.npy"
    y = np.load(mlp.y)
    np.save(wrong, y + 1)
    cmd = farm_cmd() + [
        "check",
        str(mlp.vmx),
        str(mlp.x),
        "--address",
        head.address,
        "--where",
        f"test={c.name}",
        "--all",
        "-q",
    ]

    def check(expected: pathlib.Path, out: str) -> "subprocess.CompletedProcess[str]":
        files = ["--json", str(tmp_path / f"{out}.json"), "--junit", str(tmp_path / f"{out}.xml")]
        return subprocess.run(
            cmd + ["-e", str(expected)] + files, capture_output=True, text=True, timeout=300
        )

    ok = check(mlp.y, "ok")
    assert ok.returncode == 0, ok.stderr
    bad = check(wrong, "bad")
    assert bad.returncode == 1, bad.stderr

    doc = json.loads((tmp_path / "bad.json").read_text())
    assert doc["summary"] == {
        "jobs": 2,
        "ok": 0,
        "mismatch": 2,
        "error": 0,
        "lost": 0,
        "pending": 0,
        "retried": 0,
        "accounted": 2,
    }
    r = doc["jobs"][0]["result"]
    assert r["match"] is False and r["outputs"][0]["check"]["mismatched"] == y.size
    assert r["properties"]["vendor"] and r["version"] == r["properties"]["version"]

    for name, failures in (("ok.xml", 0), ("bad.xml", 2)):
        root = ET.parse(tmp_path / name).getroot()
        suite = root.find("testsuite")
        assert suite is not None and suite.get("tests") == "2"
        assert suite.get("failures") == str(failures) and suite.get("errors") == "0"
        cases = suite.findall("testcase")
        assert len(cases) == 2
        assert {c.get("classname") for c in cases} == {"mlp.vmx.check"}
        assert len([x for x in cases if x.find("failure") is not None]) == failures
        assert all(float(x.get("time", "-1")) >= 0 for x in cases)


def test_cli_errors(head: Any, tmp_path: pathlib.Path, mlp: Mlp) -> None:
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(farm_cmd() + list(args), capture_output=True, text=True, timeout=120)

    r = run("bench", str(mlp.vmx), "--address", head.address, "--where", "test=nobody-has-it")
    assert r.returncode == 3
    assert "no agent that is up matches test=nobody-has-it" in r.stderr
    r = run("bench", str(tmp_path / "missing.vmx"), "--address", head.address)
    assert r.returncode == 2 and "missing.vmx: No such file or directory" in r.stderr
    r = run("bench", str(mlp.vmx), "--address", head.address, "--where", "=x")
    assert r.returncode == 2 and "expected KEY=VALUE" in r.stderr
    r = run("bench", str(mlp.vmx), "--address", head.address, "-i", "x")
    assert r.returncode == 2 and "--input 'x': expected NAME=FILE.npy" in r.stderr
    r = run("bench", str(mlp.vmx), "--address", head.address, "-r", "400000", "--best-of", "3")
    assert r.returncode == 2
    assert "--repeat 400000 x --best-of 3: at most 1048576 batches" in r.stderr
    bad = tmp_path / "bad.npy"
    bad.write_bytes(b"\x93NUMPY garbage")
    r = run("bench", str(mlp.vmx), str(bad), "--address", head.address)
    assert r.returncode == 2 and "bad.npy: not a readable .npy array" in r.stderr
    r = run("status", "--address", "nonsense")
    assert r.returncode == 2 and "expected HOST:PORT" in r.stderr
    r = run("serve", "--address", head.address, "--agent", "http://x", "--lifetime", "5")
    assert r.returncode == 2 and "--agent 'http://x': expected tcp://HOST:PORT" in r.stderr
    r = run(
        "serve", "--address", head.address, "--agent", "tcp://127.0.0.1:1", "--tag", "vendor=ARM"
    )
    assert r.returncode == 2 and "'vendor' is a property the node fills" in r.stderr


def make_cert(d: pathlib.Path, name: str, ca: str = "", san: str = "") -> List[str]:
    """[certificate, key] of name: a self-signed CA, or signed by ca (with
    subjectAltName san when given); PEM files in d."""
    key, pem = d / f"{name}.key", d / f"{name}.pem"
    ext = []
    if san:
        (d / f"{name}.ext").write_text(f"subjectAltName={san}\nbasicConstraints=CA:FALSE\n")
        ext = ["-extfile", str(d / f"{name}.ext")]
    if not ca:
        subprocess.run(
            [
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-subj",
                f"/CN={name}",
                "-keyout",
                str(key),
                "-out",
                str(pem),
            ],
            check=True,
            capture_output=True,
        )
    else:
        csr = d / f"{name}.csr"
        subprocess.run(
            [
                "openssl",
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                f"/CN={name}",
                "-keyout",
                str(key),
                "-out",
                str(csr),
            ],
            check=True,
            capture_output=True,
        )
        subprocess.run(
            [
                "openssl",
                "x509",
                "-req",
                "-in",
                str(csr),
                "-CA",
                f"{d / ca}.pem",
                "-CAkey",
                f"{d / ca}.key",
                "-CAcreateserial",
                "-days",
                "2",
                *ext,
                "-out",
                str(pem),
            ],
            check=True,
            capture_output=True,
        )
    return [str(pem), str(key)]


def test_tls_farm_lets_in_only_its_ca(
    workdir: pathlib.Path, tmp_path: pathlib.Path, mlp: Mlp
) -> None:
    from farm_proc import Agent, Head, Node

    make_cert(tmp_path, "ca")
    cert, key = make_cert(tmp_path, "farm", ca="ca")
    tls = ["--tls-ca", str(tmp_path / "ca.pem"), "--tls-cert", cert, "--tls-key", key]
    head = Head(tmp_path, extra=tls, name="tls-head")
    agent = node = None
    try:
        assert head.address.startswith("tls://127.0.0.1:")
        agent = Agent(tmp_path / "cache")
        node = Node(tmp_path, head.address, [agent], ["test=tls"], name="tls-node", extra=tls)
        node.wait_line("vmrpc-farm serve: agent ")
        r = subprocess.run(
            farm_cmd()
            + [
                "run",
                str(mlp.vmx),
                str(mlp.x),
                "--address",
                head.address,
                "--where",
                "test=tls",
                "-q",
                "--json",
                "-",
            ]
            + tls,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["summary"]["ok"] == 1
        # A certificate from another CA is turned away; so is plain TCP.
        other = make_cert(tmp_path, "other")
        r = subprocess.run(
            farm_cmd()
            + [
                "status",
                "--address",
                head.address,
                "--tls-ca",
                str(tmp_path / "ca.pem"),
                "--tls-cert",
                other[0],
                "--tls-key",
                other[1],
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 3 and "cannot reach the head" in r.stderr
        r = subprocess.run(
            farm_cmd() + ["status", "--address", head.address],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 2 and "a tls:// head needs --tls-ca" in r.stderr
    finally:
        if node is not None:
            assert node.stop() == 0
        if agent is not None:
            agent.stop()
        assert head.stop() == 0


def test_node_comes_back_after_the_head_restarts(tmp_path: pathlib.Path, mlp: Mlp) -> None:
    import socket

    from farm_proc import Agent, Head, Node

    with socket.socket() as s:  # a free port for both heads
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    head = Head(tmp_path, name="head-1", port=port)
    agent = Agent(tmp_path / "cache")
    node = Node(
        tmp_path, head.address, [agent], ["test=restart"], name="restart-node", interval=0.5
    )
    head2 = None
    try:
        node.wait_line("vmrpc-farm serve: agent ")
        assert head.stop() == 0
        head2 = Head(tmp_path, name="head-2", port=port)
        where = [Where.parse("test=restart")]
        with Farm(head2.address) as f:
            for _ in range(600):  # the new head knows nothing until the node says again
                if f.select(where):
                    break
                time.sleep(0.1)
            jobs = f.dispatch(
                JobSpec("run", "mlp.vmx", mlp.vmx.read_bytes(), args=(np.load(mlp.x),)),
                where,
                deadline=120,
            )
        assert [j.state for j in jobs] == ["ok"], [j.to_dict() for j in jobs]
    finally:
        assert node.stop() == 0
        agent.stop()
        if head2 is not None:
            assert head2.stop() == 0
        head.stop()


def test_bench_with_a_control(
    cluster: Callable[[int], Cluster], mlp: Mlp, head: Any, tmp_path: pathlib.Path
) -> None:
    """bench --control: the model and the control timed interleaved in one
    job, both kept paired in the store, `check` judging their ratio; a
    control that does not load and a model on two devices fail the job
    with what to do, and the agent keeps serving."""
    c = cluster(1)
    ref = tmp_path / "ref.vmx"
    ref.write_bytes(mlp.vmx.read_bytes())
    store = str(tmp_path / "c.db")

    def bench(label: str, *extra: str) -> "subprocess.CompletedProcess[str]":
        return subprocess.run(
            farm_cmd() + ["bench", str(mlp.vmx), str(mlp.x), "--address", head.address,
                          "--where", f"test={c.name}", "-n", "1", "-r", "4", "-q",
                          "--label", label, "--store", store, "--json", "-", *extra],
            capture_output=True, text=True, timeout=300,
        )

    first = []
    for label in ("c1", "c2"):
        r = bench(label, "--control", str(ref))
        assert r.returncode == 0, r.stderr
        (job,) = json.loads(r.stdout)["jobs"]
        first.append(job["result"]["control_first"])
    # which VM is created first alternates from job to job on the agent
    assert first == [False, True]
    t, ctl = job["result"]["timing"], job["result"]["control"]
    assert len(t["results"]) == len(ctl["results"]) == 4 and t["interleaved"]
    assert t["best_of"] == ctl["best_of"] == 3  # the default with --control
    assert ctl["model"] == "ref.vmx" and ctl["exe_sha256"] == hashlib.sha256(
        ref.read_bytes()).hexdigest()
    chk = subprocess.run(
        farm_cmd() + ["check", "--store", store, "--label", "c2", "--baseline", "c1",
                      "--threshold", "3", "--json", "-"],
        capture_output=True, text=True, timeout=120,
    )
    assert chk.returncode == 0, chk.stderr
    (v,) = json.loads(chk.stdout)["verdicts"]
    assert v["measure"] == "normalized" and v["verdict"] == "same" and v["repeats"] == 4
    assert v["time_base"] == "device"  # PoCL's event timer on both sides

    bad = tmp_path / "bad.vmx"
    bad.write_bytes(b"not an executable")
    r = bench("c3", "--control", str(bad))
    assert r.returncode == 1, r.stderr
    (job,) = json.loads(r.stdout)["jobs"]
    assert job["state"] == "error"
    assert job["error"].startswith("the control bad.vmx did not load: "), job["error"]
    r = bench("c3", "--control", str(ref), "-d", "opencl:0,cpu")
    assert r.returncode == 1, r.stderr
    (job,) = json.loads(r.stdout)["jobs"]
    assert job["error"] == (
        "--control times the model and the control on one device; the model runs on 2 "
        "(opencl:0,cpu): give one device with -d"
    ), job["error"]
    r = bench("c3", "--control-input", f"0={mlp.x}")
    assert r.returncode == 2 and "--control-input goes with --control" in r.stderr
    r = bench("c3", "--control", str(tmp_path / "none.vmx"))
    assert r.returncode == 2 and "--control " in r.stderr and "No such file" in r.stderr
    r = bench("c3", "--control", str(ref), "--control-input", "x")
    assert r.returncode == 2 and "--control-input 'x': expected NAME=FILE.npy" in r.stderr
    # the agent served on; the control's inputs given apart from the model's
    r = bench("c3", "--control", str(ref), "--control-input", f"0={mlp.x}")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["jobs"][0]["result"]["control"]["results"]
