"""Results of timing (:class:`TimeResult`) and profiling (:class:`ProfileReport`)."""

from __future__ import annotations

import importlib
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

__all__ = ["TimeResult", "ProfileRow", "ProfileReport", "CompareResult"]


def _ms(s: Optional[float]) -> str:
    return "-" if s is None else f"{s * 1e3:.4f}"


class TimeResult:
    """What ``VirtualMachine.time_evaluator(...)(...)`` measured on the agent.

    As TVM's ``ProfileResult``: seconds per call, wall time on the agent.
    ``results`` has one entry per repeat; ``mean``, ``median``, ``std``,
    ``min`` and ``max`` are over them. Beside them, the device timer's
    figures where the device has one (``device_results`` entries and
    ``device_median`` are None otherwise). ``number`` is the calls per repeat
    actually used (min_repeat_ms may have grown it), ``warmup`` the
    seconds of the discarded first call, and ``gate_wait`` the seconds the
    measurement waited at the device's quiet gate for other sessions'
    copies to finish (0 when the device was quiet).
    """

    __slots__ = (
        "number",
        "results",
        "device_results",
        "mean",
        "median",
        "std",
        "min",
        "max",
        "device_median",
        "warmup",
        "gate_wait",
    )

    def __init__(self, d: Dict[str, Any]) -> None:
        self.number: int = d["number"]
        self.results: Tuple[float, ...] = tuple(d["seconds"])
        self.device_results: Tuple[Optional[float], ...] = tuple(d["device_seconds"])
        self.mean: float = d["mean"]
        self.median: float = d["median"]
        self.std: float = d["std"]
        self.min: float = d["min"]
        self.max: float = d["max"]
        self.device_median: Optional[float] = d["device_median"]
        self.warmup: float = d["warmup"]
        self.gate_wait: float = d.get("gate_wait", 0.0)

    def to_dict(self) -> Dict[str, Any]:
        """Every field, as a dict of plain Python values (JSON-ready)."""
        d = {k: getattr(self, k) for k in self.__slots__}
        d["results"] = list(self.results)
        d["device_results"] = list(self.device_results)
        return d

    def __repr__(self) -> str:
        return (
            f"TimeResult(mean={self.mean!r}, median={self.median!r}, std={self.std!r}, "
            f"repeat={len(self.results)}, number={self.number})"
        )

    def __str__(self) -> str:
        return (
            "Execution time summary (per call, "
            f"{len(self.results)} repeats x {self.number} calls):\n"
            f" {'mean (ms)':>12} {'median (ms)':>12} {'max (ms)':>12} {'min (ms)':>12} "
            f"{'std (ms)':>12} {'device (ms)':>12}\n"
            f" {_ms(self.mean):>12} {_ms(self.median):>12} {_ms(self.max):>12} "
            f"{_ms(self.min):>12} {_ms(self.std):>12} {_ms(self.device_median):>12}"
        )


@dataclass(frozen=True)
class ProfileRow:
    """One packed function (operator) of a profiled run."""

    name: str
    calls: int
    total_s: float
    mean_s: float
    device_s: Optional[float]  # None: the device has no timer
    share: float  # of the sum of total_s


class ProfileReport:
    """Per-operator timing of one run (``VirtualMachine.profile``), rows
    sorted by total time, largest first. ``str()`` is a table."""

    def __init__(self, rows: Sequence[Dict[str, Any]], total_s: float) -> None:
        self.rows: List[ProfileRow] = [ProfileRow(**r) for r in rows]
        self.total_s: float = total_s

    def to_dict(self) -> Dict[str, Any]:
        """``{"total_s": ..., "rows": [{name, calls, total_s, mean_s, device_s, share}]}``."""
        return {"total_s": self.total_s, "rows": [asdict(r) for r in self.rows]}

    def to_pandas(self) -> Any:
        """The rows as a ``pandas.DataFrame`` (needs pandas installed)."""
        try:
            pandas = importlib.import_module("pandas")
        except ImportError as e:
            raise ImportError("ProfileReport.to_pandas() needs pandas: pip install pandas") from e
        return pandas.DataFrame([asdict(r) for r in self.rows])

    def __len__(self) -> int:
        return len(self.rows)

    def __repr__(self) -> str:
        return f"ProfileReport({len(self.rows)} rows, total_s={self.total_s!r})"

    def __str__(self) -> str:
        width = max([len("Name")] + [len(r.name) for r in self.rows])
        lines = [
            f"{'Name':<{width}} {'Calls':>7} {'Total (ms)':>12} {'Mean (ms)':>12} "
            f"{'Device (ms)':>12} {'Percent':>8}"
        ]
        for r in self.rows:
            lines.append(
                f"{r.name:<{width}} {r.calls:>7} {_ms(r.total_s):>12} {_ms(r.mean_s):>12} "
                f"{_ms(r.device_s):>12} {r.share * 100:>7.2f}%"
            )
        lines.append(f"{'Total':<{width}} {'':>7} {_ms(self.total_s):>12}")
        return "\n".join(lines)


class CompareResult:
    """What ``Session.compare(a, b, ...)`` decided (docs/timing.md, Compare).

    ``verdict``: "same", "faster", "slower" or "inconclusive". ``ratio``:
    B / A (Hodges-Lehmann over rounds), ``ci``: its interval at
    ``confidence`` over every look (a bound is None when unbounded).
    ``rounds``: one dict per round (``order``, ``a_s``, ``b_s``,
    ``a_device_s``, ``b_device_s``, ``end_s``). ``state_before`` /
    ``state_after``: the device's state (``Session.state()``; None when the
    agent does not report it); ``throttled`` (None: nothing exposed to tell)
    and ``throttling`` (what was, or None).
    """

    def __init__(self, d: Dict[str, Any]) -> None:
        self.verdict: str = d["verdict"]
        self.ratio: Optional[float] = d["ratio"]
        self.ci: Tuple[Optional[float], Optional[float]] = (d["ci_low"], d["ci_high"])
        self.threshold: float = d["threshold"]
        self.confidence: float = d["confidence"]
        self.look_confidence: float = d["look_confidence"]
        self.looks: int = d["looks"]
        self.looks_planned: int = d["looks_planned"]
        self.time_base: str = d["time_base"]
        self.budget_exhausted: bool = d["budget_exhausted"]
        self.number: Tuple[int, int] = (d["number_a"], d["number_b"])
        self.rounds: List[Dict[str, Any]] = list(d["rounds"])
        self.seconds: float = d["seconds"]
        self.state_before: Optional[Dict[str, Any]] = d["state_before"]
        self.state_after: Optional[Dict[str, Any]] = d["state_after"]
        self.throttled: Optional[bool] = d["throttled"]
        self.throttling: Optional[str] = d["throttling"]

    def __repr__(self) -> str:
        lo, hi = self.ci
        f = lambda v: "-" if v is None else f"{v:.4f}"  # noqa: E731
        return (
            f"<CompareResult {self.verdict} ratio {f(self.ratio)} "
            f"{self.confidence:.0%} CI [{f(lo)}, {f(hi)}] rounds {len(self.rounds)}>"
        )
