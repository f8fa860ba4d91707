"""The results store on its own: its schema version and migrations, refusals,
and 8 concurrent writer processes that lose no row (SQLite and a real
PostgreSQL server)."""

from __future__ import annotations

import json
import pathlib
import sqlite3
import statistics
import subprocess
import sys
import textwrap
from typing import Any, Dict, List, Tuple

import pytest

from conftest import new_pg_database
from vmrpc_farm import history
from vmrpc_farm.store import SCHEMA_VERSION, Store, StoreError, store_url

WRITERS, RUNS_EACH, JOBS, REPEATS = 8, 8, 2, 10


def job(i: int, agent: str, base: float) -> Dict[str, Any]:
    return {
        "id": f"bench-t-{i}",
        "target": agent,
        "state": "ok",
        "error": "",
        "attempts": [],
        "result": {
            "agent": agent,
            "device": "0",
            "version": "0.1.0",
            "properties": {"agent": agent, "vendor": ["pocl"]},
            "device_info": {"name": "cpu"},
            "device_state": {"throttled": False, "temp_c": 41.5},
            "start": 1000.0 + i,
            "end": 1001.0 + i,
            "timing": {
                "number": 5,
                "results": [base * (1 + k / 100) for k in range(REPEATS)],
                "device_results": [base * 0.9] * REPEATS,
            },
        },
    }


def test_new_store_has_the_schema_and_keeps_a_run(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "r.db"
    with Store(str(db)) as s:
        assert s.version() == SCHEMA_VERSION
        rid = s.add_run("abc123", "m.vmx", "main", "00" * 32, [job(0, "n/a:1", 0.002)], {"ci": "x"})
        assert rid == 1
        (ser,) = s.series()
        assert (ser.model, ser.agent, ser.device, ser.labels) == ("m.vmx", "n/a:1", "0", ["abc123"])
        assert len(ser.wall["abc123"]) == REPEATS and ser.device_s["abc123"][0] == pytest.approx(0.0018)
        assert ser.states["abc123"] == [{"throttled": False, "temp_c": 41.5}]
    with Store(str(db)) as s:  # opened again: nothing migrated twice, nothing lost
        assert s.version() == SCHEMA_VERSION and s.counts() == {
            "runs": 1,
            "results": 1,
            "samples": REPEATS,
            "controls": 0,
            "control_samples": 0,
        }
    c = sqlite3.connect(db)
    assert c.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    c.close()


def test_store_of_a_newer_schema_is_refused(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "new.db"
    Store(str(db)).close()
    c = sqlite3.connect(db)
    c.execute("UPDATE vmrpc_schema SET version = ?", (SCHEMA_VERSION + 1,))
    c.commit()
    c.close()
    with pytest.raises(StoreError, match=f"schema version {SCHEMA_VERSION + 1}; .*upgrade"):
        Store(str(db))


def test_not_a_database_and_bad_urls_are_refused(tmp_path: pathlib.Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not SQLite\n" * 100)
    with pytest.raises(StoreError, match="not a database"):
        Store(str(junk))
    with pytest.raises(StoreError, match="expected a file path"):
        store_url("mysql://x/y")
    assert store_url("postgres://u@h:1/d") == "postgresql+psycopg://u@h:1/d"
    with pytest.raises(StoreError, match="label"):
        with Store(str(tmp_path / "ok.db")) as s:
            s.add_run("", "m", "main", "0" * 64, [])


WRITER = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, sys.argv[3])
    from test_store import job, RUNS_EACH, JOBS
    from vmrpc_farm.store import Store
    w = int(sys.argv[2])
    with Store(sys.argv[1]) as s:
        for r in range(RUNS_EACH):
            s.add_run(f"label-{r % 3}", "m.vmx", "main", "ab" * 32,
                      [job(j, f"node/agent-{w}-{j}", 0.001 * (w + 1)) for j in range(JOBS)])
    print("ok")
    """
)


def write_concurrently(where: str) -> None:
    here = str(pathlib.Path(__file__).resolve().parent)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, where, str(w), here],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for w in range(WRITERS)
    ]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * WRITERS, outs
    with Store(where) as s:
        assert s.counts() == {
            "runs": WRITERS * RUNS_EACH,
            "results": WRITERS * RUNS_EACH * JOBS,
            "samples": WRITERS * RUNS_EACH * JOBS * REPEATS,
            "controls": 0,
            "control_samples": 0,
        }
        series = s.series()
        assert len(series) == WRITERS * JOBS
        for ser in series:  # every writer's every run, whole
            assert sum(len(v) for v in ser.wall.values()) == RUNS_EACH * REPEATS
        assert s.labels() == ["label-0", "label-1", "label-2"]


def test_eight_concurrent_writers_sqlite(tmp_path: pathlib.Path) -> None:
    write_concurrently(str(tmp_path / "shared.db"))  # the schema made by the racing writers too


def test_eight_concurrent_writers_postgresql(postgres_url: str) -> None:
    write_concurrently(new_pg_database(postgres_url, "writers"))


def test_cli_refusals(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture) -> None:
    from vmrpc_farm.cli import main

    db = str(tmp_path / "cli.db")
    with Store(db) as s:
        s.add_run("v1", "m.vmx", "main", "0" * 64, [job(0, "n/a:1", 0.002)])

    def run(*args: str) -> Tuple[int, str]:
        rc = main(list(args))
        return rc, capsys.readouterr().err

    rc, err = run("check", "--store", db, "--label", "v1")
    assert rc == 2 and "check --store needs --label and --baseline" in err
    rc, err = run("check", "--store", db, "--label", "v1", "--baseline", "v0")
    assert rc == 2 and "--baseline 'v0': no such label" in err and "it has: v1" in err
    rc, err = run("check", "m.vmx", "--store", db, "--label", "v1", "--baseline", "v1")
    assert rc == 2 and "give no MODEL.vmx or --expected" in err
    rc, err = run("check", "m.vmx")
    assert rc == 2 and "check needs MODEL.vmx and --expected" in err
    rc, err = run("check", "--store", "mysql://h/d", "--label", "a", "--baseline", "b")
    assert rc == 2 and "expected a file path (SQLite)" in err
    rc, err = run("bench", "m.vmx", "--label", "x")
    assert rc == 2 and "--store and --label go together" in err
    rc, err = run("report", "--store", str(tmp_path / "empty.db"), "-o", str(tmp_path / "r.html"))
    assert rc == 2 and "holds no runs yet" in err
    # a label against itself: ratio 1, same, exit 0
    rc = main(["check", "--store", db, "--label", "v1", "--baseline", "v1", "--json", "-"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["verdicts"][0]["verdict"] == "same" and out["verdicts"][0]["ratio"] == 1.0


def test_report_escapes_what_the_store_holds(tmp_path: pathlib.Path) -> None:
    from vmrpc_farm import htmlreport

    evil = "<script>alert(1)</script>"
    with Store(str(tmp_path / "e.db")) as s:
        for label in ("base", evil):
            s.add_run(label, evil + ".vmx", "main", "0" * 64, [job(0, evil, 0.002)])
        page = htmlreport.render(s.series(), s.labels(), evil, "base", 0.05, evil)
    assert evil not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def drifting(i: int, work: float, drift: List[float], ref: str = "ab" * 32) -> Dict[str, Any]:
    """A bench job with a control: repeat k of the model takes work *
    drift[k] seconds and its paired control drift[k] (a device whose speed
    moves between repeats, alike for both)."""
    j = job(i, "n/a:1", 1.0)
    j["result"]["timing"] = {"number": 1, "results": [work * d for d in drift],
                             "device_results": [None] * len(drift)}
    j["result"]["control"] = {"model": "ref.vmx", "func": "main", "exe_sha256": ref,
                              "number": 1, "results": list(drift),
                              "device_results": [None] * len(drift)}
    return j


def test_control_normalized_check(tmp_path: pathlib.Path) -> None:
    """Repeats stored with their paired control; `check` judges model /
    control: a device 30 % slower under the second label (raw: slower) is
    the same work (normalized: same), and 12 % more work under the third is
    found under a drift that hides it in the raw figures."""
    steady = [0.010 * (1 + k / 200) for k in range(REPEATS)]
    slow = [1.3 * d for d in steady]
    fast = [d / 1.12 for d in steady]
    with Store(str(tmp_path / "c.db")) as s:
        s.add_run("c1", "m.vmx", "main", "00" * 32, [drifting(0, 2.0, steady)])
        s.add_run("c2", "m.vmx", "main", "00" * 32, [drifting(1, 2.0, slow)])
        s.add_run("c3", "m.vmx", "main", "11" * 32, [drifting(2, 2.24, fast)])
        assert s.counts()["controls"] == 3 and s.counts()["control_samples"] == 3 * REPEATS
        (ser,) = s.series()
    assert ser.control["c2"] == pytest.approx(slow) and ser.control_sha["c1"] == ["ab" * 32]
    assert ser.normalized("c1") == pytest.approx([2.0] * REPEATS)
    (v,) = history.check([ser], "c2", "c1", 0.05)
    assert (v["measure"], v["verdict"], v["ratio"]) == ("normalized", "same", pytest.approx(1.0))
    assert v["raw_ratio"] == pytest.approx(1.3) and "why_raw" not in v
    # medians: seconds under *_s whatever is judged, the ratios beside them
    assert v["median_s"] == pytest.approx(2.0 * statistics.median(slow))  # model = 2 x control
    assert v["median_normalized"] == pytest.approx(2.0)
    (v,) = history.check([ser], "c2", "c1", 0.05, raw=True)
    assert (v["measure"], v["verdict"], v["why_raw"]) == ("raw", "slower", "--raw")
    (v,) = history.check([ser], "c3", "c2", 0.05)
    assert (v["measure"], v["verdict"], v["ratio"]) == ("normalized", "slower", pytest.approx(1.12))
    assert v["raw_ratio"] < 1  # raw: the device got faster by more than the work grew
    assert history.history_rows(ser)[2]["normalized_median"] == pytest.approx(2.24)
    assert "(normalized)" in history.to_junit([v], {})


def test_control_mixed_or_changed_is_judged_raw(tmp_path: pathlib.Path) -> None:
    steady = [0.010] * REPEATS
    with Store(str(tmp_path / "m.db")) as s:
        s.add_run("c1", "m.vmx", "main", "00" * 32, [job(0, "n/a:1", 0.02)])
        s.add_run("c2", "m.vmx", "main", "00" * 32, [drifting(1, 2.0, steady)])
        s.add_run("c3", "m.vmx", "main", "00" * 32, [drifting(2, 2.0, steady, ref="cd" * 32)])
        (ser,) = s.series()
    (v,) = history.check([ser], "c2", "c1", 0.05)
    assert (v["measure"], v["why_raw"]) == (
        "raw", "c1 was not benchmarked with a control for every repeat")
    (v,) = history.check([ser], "c3", "c2", 0.05)
    assert (v["measure"], v["why_raw"]) == (
        "raw", "c2 and c3 were benchmarked with different controls")
    assert history.normalized_series(ser) is None


def test_store_of_schema_1_opens_and_reads(tmp_path: pathlib.Path) -> None:
    """A store written before controls existed (schema 1: no controls
    tables) is migrated when opened, keeps its rows and is judged raw."""
    db = tmp_path / "v1.db"
    with Store(str(db)) as s:
        s.add_run("c1", "m.vmx", "main", "00" * 32, [job(0, "n/a:1", 0.002)])
        s.add_run("c2", "m.vmx", "main", "00" * 32, [job(1, "n/a:1", 0.002)])
    c = sqlite3.connect(db)  # back to schema 1 as version 1 wrote it
    c.executescript("DROP TABLE control_samples; DROP TABLE controls; "
                    "UPDATE vmrpc_schema SET version = 1;")
    c.close()
    with Store(str(db)) as s:
        assert s.version() == SCHEMA_VERSION == 2
        assert s.counts() == {"runs": 2, "results": 2, "samples": 2 * REPEATS,
                              "controls": 0, "control_samples": 0}
        (ser,) = s.series()
    assert ser.control["c1"] == [None] * REPEATS and ser.normalized("c1") is None
    (v,) = history.check([ser], "c2", "c1", 0.05)
    assert (v["measure"], v["verdict"]) == ("raw", "same")
    assert v["why_raw"] == "c1 was not benchmarked with a control for every repeat"
    tables = {r[0] for r in sqlite3.connect(db).execute(
        "SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"controls", "control_samples"} <= tables


def paired(i: int, model: List[float], ctl: List[float], dev: float = 0.9,
           ctl_dev: Any = 0.9) -> Dict[str, Any]:
    """A --control job whose device timer reads `dev` (model) and `ctl_dev`
    (control; None: no reading) of each wall repeat."""
    j = job(i, "n/a:1", 1.0)
    j["result"]["timing"] = {"number": 1, "results": list(model),
                             "device_results": [dev * x for x in model]}
    j["result"]["control"] = {"model": "ref.vmx", "func": "main", "exe_sha256": "ab" * 32,
                              "number": 1, "results": list(ctl),
                              "device_results": [None if ctl_dev is None else ctl_dev * x
                                                 for x in ctl]}
    return j


def test_normalized_on_the_device_timer(tmp_path: pathlib.Path) -> None:
    """Where every repeat of model and control has a device timer reading,
    `check` judges the device's normalized figure: c2's model wall times
    carry 20 % of host overhead that its device timer does not (same by the
    device, what the wall would call slower); a label whose control lacks
    a reading is judged on the wall clock, both sides alike."""
    steady = [0.010 * (1 + k / 200) for k in range(REPEATS)]
    with Store(str(tmp_path / "d.db")) as s:
        s.add_run("c1", "m.vmx", "main", "00" * 32, [paired(0, steady, steady)])
        s.add_run("c2", "m.vmx", "main", "00" * 32,
                  [paired(1, [1.2 * x for x in steady], steady, dev=0.9 / 1.2)])
        s.add_run("c3", "m.vmx", "main", "00" * 32,
                  [paired(2, steady, steady, ctl_dev=None)])
        (ser,) = s.series()
    assert [ser.time_base(x) for x in ("c1", "c2", "c3")] == ["device", "device", "wall"]
    assert ser.normalized("c2", "device") == pytest.approx([1.0] * REPEATS)
    assert ser.normalized("c2") == pytest.approx([1.2] * REPEATS)  # the wall clock's
    assert ser.normalized("c3", "device") is None
    (v,) = history.check([ser], "c2", "c1", 0.05)
    assert (v["time_base"], v["verdict"], v["ratio"]) == ("device", "same", pytest.approx(1.0))
    (v,) = history.check([ser], "c3", "c2", 0.05)
    assert (v["time_base"], v["verdict"], v["ratio"]) == ("wall", "faster", pytest.approx(1 / 1.2))


def test_change_points_one_per_job(tmp_path: pathlib.Path) -> None:
    """Change points come from one point per job (its repeats' median), as
    Otava reads a history of one figure per run: a 15 % step at c3's first
    job is found there, at job index 8, even though c3's first repeat and
    c2's last are as wild as repeats get on a busy machine."""
    # each job a little off the next (its VMs' own speed, the moment)
    jitter = [4, -6, 9, -2, 1, -8, 6, -3, 2, -5, 7, -1]
    with Store(str(tmp_path / "p.db")) as s:
        n = 0
        for label, level in (("c1", 1.0), ("c2", 1.0), ("c3", 1.15)):
            jobs = []
            for k in range(4):
                model = [0.010 * level * (1 + jitter[n] / 1000) * (1 + ((n + r) % 5) / 100)
                         for r in range(REPEATS)]
                if (label, k) == ("c2", 3):
                    model[-1] *= 1.4  # c2's last repeat: slow
                if (label, k) == ("c3", 0):
                    model[0] /= 1.3  # c3's first: fast
                jobs.append(paired(n, model, [0.005] * REPEATS))
                n += 1
            s.add_run(label, "m.vmx", "main", "00" * 32, jobs)
        (ser,) = s.series()
    cps = history.change_points(ser, 0.05)
    assert [(c["label"], c["index"], c["at_label_start"]) for c in cps] == [("c3", 8, True)]
    assert cps[0]["after"] / cps[0]["before"] == pytest.approx(1.15, rel=0.01)
    (v,) = history.check([ser], "c3", "c2", 0.05)
    assert v["verdict"] == "slower" and v["change_point_at_label"]
