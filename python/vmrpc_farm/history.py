"""What the store says over time (docs/farm.md): ``history`` (per series,
each label's median with its interval), ``check`` (a label against a
baseline per (model, device), with change points over the whole series)
and their JSON and JUnit.

The comparison is :func:`vmrpc_farm.stats.hl_ratio` on the raw per-call
repeats of the two labels (every stored run of a label pooled). Change
points are Apache Otava's (the e-divisive method with its t-test merge
step, ``otava.analysis.compute_change_points``) over one point per job
(the median of its repeats) in label order; a change point is reported at
the label of the first job after it. A change point counts only when it is
significant (p < CP_PVALUE) and at least as large as the check's threshold
(Otava's min_magnitude): the slow drift of a shared machine is not a change.

Control-normalized series (``bench --control``): where every repeat of
both labels has its paired control repeat, timed interleaved in the same
job, and both labels ran the same control executable, ``check`` judges
the model's time over its paired control's time instead of the raw time
(``"measure": "normalized"`` in its verdict; on the device timer where
every repeat of both has a reading, ``"time_base"``), with the same
statistics; and change points are found over the normalized series where
every label of it has one. Elsewhere the raw repeats are judged (``"measure": "raw"``,
with ``why_raw``). ``--raw`` asks for raw figures throughout.
"""

from __future__ import annotations

import json
import statistics
import time
import xml.etree.ElementTree as ET
from typing import Any, Dict, List, Optional, Sequence

from . import stats
from .store import Series

__all__ = ["change_points", "history_rows", "check", "to_json", "to_junit", "to_table"]

# Otava's significance for a change point (its own default) and window.
CP_PVALUE = 0.001
CP_WINDOW = 50


def time_base(s: Series, labels: Sequence[str]) -> str:
    """The clock that normalized repeats of these labels are judged on:
    the device timer where every repeat of each (model and control) has a
    reading, else the wall clock."""
    return "device" if all(s.time_base(x) == "device" for x in labels) else "wall"


def normalized_series(s: Series) -> Optional[Dict[str, List[float]]]:
    """label -> normalized repeats, where every label of s has them with
    one and the same control executable; else None."""
    out = {}
    shas = set()
    base = time_base(s, s.labels)
    for label in s.labels:
        n = s.normalized(label, base)
        if n is None or len(s.control_sha.get(label) or []) != 1:
            return None
        shas.update(s.control_sha[label])
        out[label] = n
    return out if out and len(shas) == 1 else None


def change_points(
    s: Series, min_magnitude: float, raw: bool = False
) -> List[Dict[str, Any]]:
    """Change points of s in label order, over one point per job: the
    median of the job's repeats (normalized ones where the whole series
    has them and raw is False, else wall-clock), as Otava reads a history
    of one figure per run. [{label, index (of the job, in order), pvalue,
    before, after}] (means of the points either side)."""
    from otava.analysis import compute_change_points

    values = None if raw else normalized_series(s)
    if values is None:
        values = s.wall
    flat: List[float] = []
    owner: List[str] = []
    for label in s.labels:
        jobs: Dict[int, List[float]] = {}
        for rid, x in zip(s.result_at[label], values[label]):
            jobs.setdefault(rid, []).append(x)
        flat += [statistics.median(xs) for xs in jobs.values()]
        owner += [label] * len(jobs)
    if len(flat) < 4:
        return []
    cps, _ = compute_change_points(
        flat, window_len=CP_WINDOW, max_pvalue=CP_PVALUE, min_magnitude=min_magnitude
    )
    out = []
    for cp in cps:
        st = cp.stats
        out.append(
            {
                "label": owner[cp.index],
                "index": int(cp.index),
                "at_label_start": cp.index == 0 or owner[cp.index - 1] != owner[cp.index],
                "pvalue": float(getattr(st, "pvalue", float("nan"))),
                "before": float(getattr(st, "mean_1", float("nan"))),
                "after": float(getattr(st, "mean_2", float("nan"))),
            }
        )
    return out


def history_rows(s: Series, level: float = 0.95) -> List[Dict[str, Any]]:
    rows = []
    base = time_base(s, s.labels)
    for label in s.labels:
        w = s.wall[label]
        if not w:
            continue
        med, lo, hi = stats.median_ci(w, level)
        dev = s.device_s.get(label) or []
        rows.append(
            {
                "label": label,
                "repeats": len(w),
                "median_s": med,
                "ci_lo_s": lo,
                "ci_hi_s": hi,
                "device_median_s": stats.median_ci(dev, level)[0] if dev else None,
                "normalized_median": (
                    stats.median_ci(norm, level)[0] if (norm := s.normalized(label, base)) else None
                ),
                "control_sha256": s.control_sha.get(label, []),
                "exe_sha256": s.sha.get(label, []),
                "device_states": [x for x in s.states.get(label, []) if x is not None],
            }
        )
    return rows


def check(
    series: Sequence[Series],
    label: str,
    baseline: str,
    threshold: float,
    level: float = 0.95,
    raw: bool = False,
) -> List[Dict[str, Any]]:
    """One verdict per series that has the label or the baseline: judged
    on the normalized repeats where both labels have them (same control),
    unless raw."""
    out = []
    for s in series:
        a, b = s.wall.get(baseline) or [], s.wall.get(label) or []
        raw_a, raw_b = a, b
        measure, why_raw = "raw", _why_raw(s, label, baseline, raw)
        if why_raw is None:
            measure = "normalized"
            raw_r = stats.hl_ratio(a, b, level)
            base = time_base(s, (baseline, label))
            a, b = s.normalized(baseline, base) or [], s.normalized(label, base) or []
        if not a and not b:
            continue
        v: Dict[str, Any] = {
            "model": s.model,
            "agent": s.agent,
            "device": s.device,
            "label": label,
            "baseline": baseline,
            "threshold": threshold,
            "level": level,
            "baseline_repeats": len(a),
            "repeats": len(b),
            "measure": measure,
        }
        if why_raw is not None:
            v["why_raw"] = why_raw
        if not a or not b:
            v["verdict"] = "inconclusive"
            v["why"] = f"no ok repeats under {'the baseline ' + baseline if not a else label}"
        else:
            r = stats.hl_ratio(a, b, level)
            v.update(
                verdict=stats.verdict(r, threshold),
                ratio=r.ratio,
                ci_lo=r.lo,
                ci_hi=r.hi,
                # seconds, whichever measure is judged
                baseline_median_s=stats.median_ci(raw_a)[0] if raw_a else None,
                median_s=stats.median_ci(raw_b)[0] if raw_b else None,
            )
            if measure == "normalized":
                # the normalized medians (model time over the control's: no
                # unit) and the raw figures beside them, for the record
                v.update(baseline_median_normalized=stats.median_ci(a)[0],
                         median_normalized=stats.median_ci(b)[0],
                         raw_ratio=raw_r.ratio, raw_ci_lo=raw_r.lo, raw_ci_hi=raw_r.hi,
                         control=s.control_sha[label][0], time_base=base)
            if r.lo is None:
                v["why"] = "too few repeats for an interval at this level"
        v["regression"] = v["verdict"] == "slower"
        cps = change_points(s, threshold, raw)
        v["change_points"] = cps
        v["change_point_at_label"] = any(c["label"] == label for c in cps)
        out.append(v)
    return out


def _why_raw(s: Series, label: str, baseline: str, raw: bool) -> Optional[str]:
    """None where the check judges normalized repeats, else why not."""
    if raw:
        return "--raw"
    for x in (baseline, label):
        if x not in s.wall:
            return f"no ok repeats under {x}"
        if s.normalized(x) is None:
            return f"{x} was not benchmarked with a control for every repeat"
    ca, cb = s.control_sha[baseline], s.control_sha[label]
    if len(ca) != 1 or ca != cb:
        return f"{baseline} and {label} were benchmarked with different controls"
    return None


def to_json(verdicts: Sequence[Dict[str, Any]], meta: Dict[str, Any]) -> str:
    doc = {
        "check": meta,
        "summary": {k: sum(v["verdict"] == k for v in verdicts) for k in stats.VERDICTS},
        "verdicts": list(verdicts),
    }
    return json.dumps(doc, indent=2, default=str) + "\n"


def _fmt(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.4f}"


def _line(v: Dict[str, Any]) -> str:
    if "ratio" not in v:
        return f"{v['verdict']}: {v.get('why', '')}"
    return (
        f"{v['verdict']}: {v['label']}/{v['baseline']} = {v['ratio']:.4f} "
        f"({v.get('measure', 'raw')}) "
        f"[{_fmt(v['ci_lo'])}, {_fmt(v['ci_hi'])}] at {v['level']:.0%} "
        f"(threshold {v['threshold']:.1%}; {v['baseline_repeats']} vs {v['repeats']} repeats)"
    )


def to_junit(verdicts: Sequence[Dict[str, Any]], meta: Dict[str, Any]) -> str:
    """One testcase per (model, device): failed on a regression, skipped
    when inconclusive."""
    root = ET.Element("testsuites")
    ts = ET.SubElement(
        root,
        "testsuite",
        name="vmrpc-farm.check",
        tests=str(len(verdicts)),
        failures=str(sum(v["regression"] for v in verdicts)),
        errors="0",
        skipped=str(sum(v["verdict"] == "inconclusive" for v in verdicts)),
        timestamp=time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()),
    )
    props = ET.SubElement(ts, "properties")
    for k, val in meta.items():
        ET.SubElement(props, "property", name=str(k), value=str(val))
    for v in verdicts:
        tc = ET.SubElement(
            ts, "testcase", classname=f"{v['model']}.check", name=f"{v['agent']} {v['device']}"
        )
        if v["regression"]:
            ET.SubElement(tc, "failure", message=_line(v), type="regression").text = json.dumps(
                v, default=str
            )
        elif v["verdict"] == "inconclusive":
            ET.SubElement(tc, "skipped", message=_line(v))
        cps = ", ".join(f"{c['label']} (p={c['pvalue']:.2g})" for c in v["change_points"])
        ET.SubElement(tc, "system-out").text = _line(v) + f"\nchange points: {cps or 'none'}"
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def to_table(rows: List[List[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows) + "\n"
