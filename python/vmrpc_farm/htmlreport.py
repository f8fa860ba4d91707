"""``vmrpc-farm report``: one self-contained HTML page of a results store
(docs/farm.md). Plots by plotly, its JavaScript inlined once in the page:
it opens without a network. Per (model, device): the distribution of the
latest label's repeats against the baseline's, the trend of medians over
labels with their intervals, the change points and the verdict marked, the
device state of each run, the per-operator profile where one was stored;
then a table of every verdict."""

from __future__ import annotations

import html
import json
import time
from typing import Any, Dict, List, Sequence

from . import history
from .store import Series

__all__ = ["render"]

COLOURS = {"slower": "#c0392b", "faster": "#1e8449", "same": "#566573", "inconclusive": "#b9770e"}

CSS = """
body { font-family: sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; font-size: 90%; }
th { background: #f2f2f2; }
.v-slower { color: #c0392b; font-weight: bold; }
.v-faster { color: #1e8449; font-weight: bold; }
.v-inconclusive { color: #b9770e; }
.series { border-top: 2px solid #ddd; margin-top: 1.5em; padding-top: 0.5em; }
.plots { display: flex; flex-wrap: wrap; gap: 1em; }
.plots > div { flex: 0 0 auto; }
"""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _fig_html(fig: Any, div_id: str, first: bool) -> str:
    return str(
        fig.to_html(
            full_html=False,
            include_plotlyjs=True if first else False,
            div_id=div_id,
            config={"displaylogo": False},
        )
    )


def _distribution(s: Series, label: str, baseline: str) -> Any:
    import plotly.graph_objects as go

    fig = go.Figure()
    for name in dict.fromkeys([baseline, label]):
        w = s.wall.get(name) or []
        fig.add_trace(
            go.Box(
                x=[f"{name} ({len(w)} repeats)"] * len(w),
                y=[x * 1e3 for x in w],
                name=name,
            )
        )
    fig.update_layout(
        title=f"{label} against {baseline}: ms per call",
        yaxis_title="ms per call (wall)",
        showlegend=False,
        boxmode="group",
        xaxis=dict(type="category"),
        width=640,
        height=380,
        margin=dict(l=50, r=20, t=50, b=40),
    )
    return fig


def _trend(s: Series, rows: List[Dict[str, Any]], v: Dict[str, Any]) -> Any:
    import plotly.graph_objects as go

    xs = [r["label"] for r in rows]
    med = [r["median_s"] * 1e3 for r in rows]
    up = [((r["ci_hi_s"] or r["median_s"]) - r["median_s"]) * 1e3 for r in rows]
    down = [(r["median_s"] - (r["ci_lo_s"] or r["median_s"])) * 1e3 for r in rows]
    fig = go.Figure(
        go.Scatter(
            x=xs,
            y=med,
            mode="lines+markers",
            name="median (95% CI)",
            error_y=dict(type="data", array=up, arrayminus=down, visible=True),
        )
    )
    norm = [r.get("normalized_median") for r in rows]
    if any(x is not None for x in norm):
        # bench --control: the model's time over its paired control's,
        # what `check` judges where both labels have it
        fig.add_trace(
            go.Scatter(x=xs, y=norm, mode="lines+markers", yaxis="y2",
                       name="model / control (median)", line=dict(dash="dot"))
        )
        fig.update_layout(yaxis2=dict(title="model / control", overlaying="y", side="right"))
    for cp in v.get("change_points", []):
        fig.add_vline(x=xs.index(cp["label"]) if cp["label"] in xs else 0, line_dash="dash",
                      line_color="#8e44ad")
        fig.add_annotation(
            x=cp["label"], y=max(med), text=f"change point (p={cp['pvalue']:.1g})",
            showarrow=False, yshift=14, font=dict(color="#8e44ad"),
        )
    if v["label"] in xs:
        i = xs.index(v["label"])
        fig.add_trace(
            go.Scatter(
                x=[v["label"]],
                y=[med[i]],
                mode="markers+text",
                marker=dict(size=14, color=COLOURS[v["verdict"]], symbol="diamond"),
                text=[v["verdict"]],
                textposition="bottom center",
                name=f"verdict against {v['baseline']}",
            )
        )
    fig.update_layout(
        title="median over labels",
        xaxis=dict(type="category", title="label"),
        yaxis_title="ms per call (wall)",
        width=640,
        height=380,
        margin=dict(l=50, r=20, t=50, b=40),
        legend=dict(orientation="h", y=-0.25),
    )
    return fig


def _profile(s: Series, label: str) -> Any:
    import plotly.graph_objects as go

    prof = [p for p in s.profiles.get(label, []) if isinstance(p, dict) and p.get("rows")]
    if not prof:
        return None
    rows = sorted(prof[-1]["rows"], key=lambda r: -float(r.get("total_s") or 0))[:20]
    fig = go.Figure(
        go.Bar(
            x=[float(r.get("total_s") or 0) * 1e3 for r in rows],
            y=[str(r.get("name")) for r in rows],
            orientation="h",
        )
    )
    fig.update_layout(title=f"per-operator profile of {label}", xaxis_title="ms", width=640, height=380)
    return fig


def _states(s: Series) -> str:
    out = ["<table><tr><th>label</th><th>runs</th><th>device state of each run</th></tr>"]
    for label in s.labels:
        st = s.states.get(label, [])
        cells = [
            "not recorded" if x is None else _e(json.dumps(x, sort_keys=True)) for x in st
        ]
        out.append(
            f"<tr><td>{_e(label)}</td><td>{len(st)}</td><td>{'<br>'.join(cells)}</td></tr>"
        )
    out.append("</table>")
    return "".join(out)


def _verdict_table(verdicts: Sequence[Dict[str, Any]]) -> str:
    out = [
        "<table id='verdicts'><tr><th>model</th><th>agent</th><th>device</th><th>verdict</th>"
        "<th>ratio</th><th>95% CI</th><th>measure</th><th>repeats (baseline, label)</th>"
        "<th>change points</th></tr>"
    ]
    for v in verdicts:
        ci = "-" if v.get("ci_lo") is None else f"{v['ci_lo']:.4f} .. {v['ci_hi']:.4f}"
        ratio = f"{v['ratio']:.4f}" if "ratio" in v else "-"
        cps = ", ".join(c["label"] for c in v["change_points"]) or "-"
        out.append(
            f"<tr><td>{_e(v['model'])}</td><td>{_e(v['agent'])}</td><td>{_e(v['device'])}</td>"
            f"<td class='v-{v['verdict']}'>{v['verdict']}</td><td>{ratio}</td><td>{ci}</td>"
            f"<td>{_e(v['measure'])}</td>"
            f"<td>{v['baseline_repeats']}, {v['repeats']}</td><td>{_e(cps)}</td></tr>"
        )
    out.append("</table>")
    return "".join(out)


def render(
    series: Sequence[Series],
    labels: Sequence[str],
    label: str,
    baseline: str,
    threshold: float,
    source: str,
) -> str:
    verdicts = history.check(series, label, baseline, threshold)
    by_key = {(v["model"], v["agent"], v["device"]): v for v in verdicts}
    body = [
        f"<h1>vmrpc-farm report: {_e(label)} against {_e(baseline)}</h1>",
        f"<p>Store {_e(source)}; {len(labels)} labels; {len(series)} series; threshold "
        f"{threshold:.1%}; written {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}.</p>",
        "<h2>Verdicts</h2>",
        _verdict_table(verdicts),
    ]
    first = True
    for n, s in enumerate(series):
        v = by_key.get((s.model, s.agent, s.device))
        if v is None:
            continue
        rows = history.history_rows(s)
        body.append(f"<div class='series' id='series-{n}'><h2>{_e(s.key)}</h2>")
        body.append(
            f"<p class='v-{v['verdict']}'>{_e(history._line(v))}</p><div class='plots'>"
        )
        for kind, fig in (
            ("dist", _distribution(s, label, baseline)),
            ("trend", _trend(s, rows, v)),
            ("profile", _profile(s, label)),
        ):
            if fig is None:
                continue
            body.append(f"<div>{_fig_html(fig, f'{kind}-{n}', first)}</div>")
            first = False
        body.append("</div>")
        if not any(isinstance(p, dict) for p in s.profiles.get(label, [])):
            body.append(f"<p>No per-operator profile was stored for {_e(label)}.</p>")
        body.append("<h3>Device state per run</h3>" + _states(s) + "</div>")
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>vmrpc-farm report: {_e(label)}</title><style>{CSS}</style></head><body>"
        + "\n".join(body)
        + "</body></html>\n"
    )
