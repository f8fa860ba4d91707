"""Results of a dispatch: JSON for machines, JUnit XML for CI, a table for people."""

from __future__ import annotations

import json
import time
import xml.etree.ElementTree as ET
from typing import Any, Dict, List, Sequence

from .farm import Job

__all__ = ["to_json", "to_junit", "to_table", "summary"]


def summary(jobs: Sequence[Job]) -> Dict[str, int]:
    out = {
        "jobs": len(jobs),
        "ok": 0,
        "mismatch": 0,
        "error": 0,
        "lost": 0,
        "pending": 0,
        "retried": 0,
    }
    for j in jobs:
        out[j.state] = out.get(j.state, 0) + 1
        if len(j.attempts) > 1:
            out["retried"] += 1
    out["accounted"] = out["jobs"] - out["pending"]
    return out


def to_json(jobs: Sequence[Job], meta: Dict[str, Any]) -> str:
    doc = {"farm": meta, "summary": summary(jobs), "jobs": [j.to_dict() for j in jobs]}
    return json.dumps(doc, indent=2, default=str) + "\n"


def _ms(x: Any) -> str:
    return "-" if x is None else f"{float(x) * 1e3:.4f}"


def _case_name(j: Job) -> str:
    r = j.result or {}
    where = r.get("agent") or j.target or "any agent"
    return f"{where} [{j.id}]"


def to_junit(jobs: Sequence[Job], suite: str, meta: Dict[str, Any]) -> str:
    """One testsuite; one testcase per job (classname: the model and kind).
    mismatch -> failure, error and lost -> error."""
    s = summary(jobs)
    root = ET.Element("testsuites")
    ts = ET.SubElement(
        root,
        "testsuite",
        name=suite,
        tests=str(len(jobs)),
        failures=str(s["mismatch"]),
        errors=str(s["error"] + s["lost"] + s["pending"]),
        skipped="0",
        timestamp=time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()),
    )
    props = ET.SubElement(ts, "properties")
    for k, v in meta.items():
        ET.SubElement(props, "property", name=str(k), value=str(v))
    for j in jobs:
        r = j.result or {}
        took = (r["end"] - r["start"]) if "end" in r and "start" in r else 0.0
        tc = ET.SubElement(
            ts,
            "testcase",
            classname=f"{r.get('model', suite)}.{r.get('kind', 'job')}",
            name=_case_name(j),
            time=f"{max(0.0, took):.3f}",
        )
        if j.state == "mismatch":
            ET.SubElement(
                tc, "failure", message="outputs differ from the expected ones", type="mismatch"
            ).text = json.dumps(r.get("outputs"), default=str)
        elif j.state in ("error", "lost", "pending"):
            ET.SubElement(tc, "error", message=j.error or j.state, type=j.state).text = json.dumps(
                j.attempts, default=str
            )
        out: List[str] = []
        if len(j.attempts) > 1:
            out.append(
                "attempts: " + "; ".join(f"{a['agent']}: {a['error'] or 'ok'}" for a in j.attempts)
            )
        if r:
            p = r.get("properties") or {}
            out.append(
                f"agent {r.get('agent')} version {r.get('version')} device {r.get('device')} "
                f"vendor {','.join(p.get('vendor') or []) or '-'}"
            )
            t = r.get("timing")
            if t:
                out.append(
                    f"median {_ms(t.get('median'))} ms mean {_ms(t.get('mean'))} ms "
                    f"x{t.get('number')} calls x{len(t.get('results') or [])} repeats"
                )
        if out:
            ET.SubElement(tc, "system-out").text = "\n".join(out)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def to_table(jobs: Sequence[Job]) -> str:
    head = [
        "job",
        "state",
        "agent",
        "device",
        "vendor",
        "version",
        "median ms",
        "mean ms",
        "tries",
        "note",
    ]
    rows = [head]
    for j in jobs:
        r = j.result or {}
        t = r.get("timing") or {}
        p = r.get("properties") or {}
        rows.append(
            [
                j.id,
                j.state,
                str(r.get("agent") or j.target or "-"),
                str(r.get("device") or "-"),
                ",".join(p.get("vendor") or []) or "-",
                str(r.get("version") or "-"),
                _ms(t.get("median")) if t else "-",
                _ms(t.get("mean")) if t else "-",
                str(len(j.attempts)),
                (j.error or "")[:60],
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    s = summary(jobs)
    lines.append(
        f"{s['jobs']} jobs: {s['ok']} ok, {s['mismatch']} mismatch, {s['error']} error, "
        f"{s['lost']} lost; {s['retried']} retried"
    )
    return "\n".join(lines) + "\n"
