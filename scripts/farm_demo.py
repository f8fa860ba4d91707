"""The farm demo's driver (scripts/farm-demo.sh runs it in the venv).

On loopback: a head, three vmagents each served by its own node (as three
hosts would be), a `vmrpc-farm bench --all` fanned out over them as CI would
run it, one agent killed while it holds a job, then the results checked:
exit 0 when every job is accounted for (in the JSON and the JUnit XML, each
with a final state), 1 otherwise.

With --board DIR (scripts/farm-demo.sh --board) a fourth agent joins: the
aarch64 vmagent of DIR (scripts/board-aarch64.sh's cross build and arm64
root) under qemu-user, an emulated board whose node tags it arch=aarch64
(the others arch=x86_64); a `check --where arch=aarch64` job must land on it
and pass.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python" / "farm_tests"))
sys.path.insert(0, str(ROOT / "scripts"))

from farm_proc import BUILD, Agent, Head, Node, gen_mlp, farm_cmd  # noqa: E402

from vmrpc_farm import Farm  # noqa: E402

AGENTS, COUNT = 3, 2


def say(msg: str) -> None:
    print(f"\n== {msg}", flush=True)


def show(args: list) -> list:
    print("$ vmrpc-farm " + " ".join(str(a) for a in args[len(farm_cmd()) :]), flush=True)
    return args


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".", help="where farm-results.json and .xml go")
    ap.add_argument("--board", type=pathlib.Path,
                    help="an aarch64 build with its arm64 root (DIR/sysroot): an emulated board")
    a = ap.parse_args()
    out = pathlib.Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    js, xml = out / "farm-results.json", out / "farm-results.xml"
    for f in (js, xml):
        f.unlink(missing_ok=True)
    work = pathlib.Path(tempfile.mkdtemp(prefix="farm-demo.", dir=BUILD))
    procs: list = []
    agents: list = []
    try:
        say("model: the example MLP")
        vmx, x, y = gen_mlp(work)

        say("the head (engine scheduler) on loopback")
        head = Head(work, lifetime=900)
        procs.append(head)
        print(f"head at {head.address}")

        say(f"{AGENTS} vmagents, each served by a node of its own (as {AGENTS} hosts)")
        for i in range(AGENTS):
            ag = Agent(work / f"cache-{i}")
            agents.append(ag)
            node = Node(
                work,
                head.address,
                [ag],
                [f"board=loopback-{i}", "farm=demo", f"arch={os.uname().machine}"],
                name=f"node-{i}",
                interval=1.0,
                lifetime=900,
            )
            procs.append(node)
            print(
                f"node {i}: vmrpc-farm serve --address {head.address} --agent {ag.url} "
                f"--tag board=loopback-{i} --tag farm=demo --tag arch={os.uname().machine}"
            )
        nagents = AGENTS
        if a.board:
            from board_aarch64 import start_board_agent  # noqa: E402

            brd = a.board.resolve()
            board = start_board_agent(brd, brd / "sysroot", work / "agent-board.log")
            agents.append(board)
            procs.append(Node(work, head.address, [board], ["arch=aarch64", "farm=board"],
                              name="node-board", interval=1.0, lifetime=900))
            nagents += 1
            print(f"node-board: vmrpc-farm serve --address {head.address} --agent {board.url} "
                  f"--tag arch=aarch64 --tag farm=board   (the aarch64 vmagent under qemu-user)")
        for _ in range(600):
            st = subprocess.run(
                farm_cmd() + ["status", "--address", head.address, "--json"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            up = (
                [x for x in json.loads(st.stdout)["agents"] if x["state"] == "up"]
                if st.returncode == 0
                else []
            )
            if len(up) == nagents:
                break
            time.sleep(0.2)
        else:
            raise RuntimeError("the agents never all came up")
        subprocess.run(show(farm_cmd() + ["status", "--address", head.address]), check=True)

        say(f"bench --all, {COUNT} jobs per agent; agent 2 is killed while it holds a job")
        cmd = show(
            farm_cmd()
            + [
                "bench",
                str(vmx),
                "--address",
                head.address,
                "--input",
                f"0={x}",
                "--where",
                "farm=demo",
                "--all",
                "--count",
                str(COUNT),
                "-n",
                "1",
                "--min-repeat-ms",
                "1500",
                "--deadline",
                "300",
                "--json",
                str(js),
                "--junit",
                str(xml),
            ]
        )
        bench = subprocess.Popen(cmd)
        victim = agents[2]
        victim_name = held = None
        with Farm(head.address) as farm:
            for _ in range(3000):
                for ag in farm.agents(with_leases=True):
                    if ag.props.get("agent") == victim.url and ag.lease:
                        victim_name, held = ag.name, ag.lease
                if victim_name:
                    break
                time.sleep(0.05)
            if victim_name is None:
                bench.kill()
                raise RuntimeError("agent 2 never got a job")
            victim.proc.send_signal(signal.SIGKILL)
        print(
            f"\n>>> killed (SIGKILL) the vmagent of {victim_name} while it ran {held}\n", flush=True
        )
        rc = bench.wait(400)
        print(f"(vmrpc-farm bench exited {rc})")
        subprocess.run(show(farm_cmd() + ["status", "--address", head.address]), check=True)

        say(f"accounting: {js.name} and {xml.name}")
        doc = json.loads(js.read_text())
        jobs = doc["jobs"]
        want = AGENTS * COUNT
        final = {"ok", "mismatch", "error", "lost"}
        unaccounted = [j["id"] for j in jobs if j["state"] not in final]
        moved = [j for j in jobs if j["target"] == victim_name]
        suite = ET.parse(xml).getroot().find("testsuite")
        cases = suite.findall("testcase") if suite is not None else []
        problems = []
        if len(jobs) != want:
            problems.append(f"{len(jobs)} jobs in the JSON, {want} dispatched")
        if unaccounted:
            problems.append(f"jobs without a final state: {unaccounted}")
        if len(cases) != want:
            problems.append(f"{len(cases)} test cases in the JUnit XML, {want} dispatched")
        for j in moved:
            tried = [t["agent"] for t in j["attempts"]]
            print(f"job {j['id']} (for {victim_name}): {j['state']}, attempts {tried}")
        print(f"summary: {doc['summary']}")
        if a.board:
            problems += board_job(head.address, board.url, vmx, x, y, out)
        if problems:
            print("demo: NOT every job is accounted for: " + "; ".join(problems))
            return 1
        print(
            f"demo: every one of the {want} jobs is accounted for "
            f"({doc['summary']['ok']} ok, {doc['summary']['retried']} retried after the kill, "
            f"{doc['summary']['lost']} lost); results in {js} and {xml}"
        )
        return 0
    finally:
        for p in reversed(procs):
            p.stop()
        for ag in agents:
            ag.stop()
        subprocess.run(["rm", "-rf", str(work)], check=False)


def board_job(address: str, board_url: str, vmx, x, y, out: pathlib.Path) -> list:
    """A check job for arch=aarch64: it must land on the emulated board and pass."""
    say("a job for the board: check --where arch=aarch64")
    js = out / "farm-board.json"
    js.unlink(missing_ok=True)
    with Farm(address) as farm:
        names = [ag.name for ag in farm.agents() if ag.props.get("agent") == board_url]
    cmd = show(farm_cmd() + ["check", str(vmx), "--address", address, "--input", f"0={x}",
                             "--expected", str(y), "--rtol", "1e-4", "--atol", "1e-5",
                             "--where", "arch=aarch64", "--all", "--deadline", "1500",
                             "--json", str(js)])
    rc = subprocess.run(cmd).returncode
    jobs = json.loads(js.read_text())["jobs"] if js.exists() else []
    # where each job ran: the agent of its last attempt
    landed = [j["attempts"][-1]["agent"] if j["attempts"] else None for j in jobs]
    print(f"(vmrpc-farm check exited {rc}; jobs: "
          f"{[(j['id'], j['state'], landed[i]) for i, j in enumerate(jobs)]}; the board is {names})")
    if rc != 0 or len(jobs) != 1 or jobs[0]["state"] != "ok" or landed != names:
        return [f"the arch=aarch64 job did not pass on the board {names}: exit {rc}, {jobs}"]
    print(f"demo: the arch=aarch64 job ran on the emulated board {names[0]} and passed")
    return []


if __name__ == "__main__":
    sys.exit(main())
