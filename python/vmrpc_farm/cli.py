"""vmrpc-farm: a device farm of vmagents under Dask distributed (docs/farm.md).

    vmrpc-farm head [--listen 127.0.0.1:8786]                  # once
    vmrpc-farm serve --address HEAD --agent URL --tag k=v      # on each host with devices
    vmrpc-farm bench MODEL.vmx --address HEAD --input x=x.npy --where vendor=ARM --all \\
                     --json results.json --junit results.xml   # from CI
    vmrpc-farm status --address HEAD                           # agents, leases, queue
    vmrpc-farm bench ... --label SHA --store results.db        # keep the raw repeats
    vmrpc-farm history --store results.db                      # per series: label, median, CI
    vmrpc-farm check --store results.db --label SHA --baseline main --junit check.xml
    vmrpc-farm report --store results.db -o report.html        # one self-contained page

Exit status: 0 every job ok; 1 a job failed, differed (check) or was lost,
or (check --store) a regression; 2 usage error, unreadable input or store;
3 the head cannot be reached or no agent matches.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import socket
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import engine
from .props import RESERVED, Where, parse_tag

EXIT_OK, EXIT_JOBS, EXIT_USAGE, EXIT_FARM = 0, 1, 2, 3


class UsageError(Exception):
    pass


def _err(msg: str) -> None:
    print(f"vmrpc-farm: {msg}", file=sys.stderr, flush=True)


def _positive(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not v > 0 or v != v or v == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a number > 0")
    return v


def _count(lo: int, hi: int) -> Any:
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{text!r} must be in {lo}..{hi}")
        return v

    return parse


def _fraction(text: str) -> float:
    v = _positive(text)
    if not v < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be in (0, 1)")
    return v


def _add_store(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--store",
        required=True,
        metavar="DB",
        help="the results store: a SQLite file, or postgresql://USER@HOST:PORT/DB",
    )


def _where(text: str) -> Where:
    try:
        return Where.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _tag(text: str) -> Tuple[str, str]:
    try:
        return parse_tag(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _load_npy(path: str) -> np.ndarray:
    try:
        a = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except (ValueError, OSError, EOFError) as e:
        raise UsageError(f"{path}: not a readable .npy array ({e})") from None
    if not isinstance(a, np.ndarray):
        raise UsageError(f"{path}: holds several arrays (.npz); give one .npy per input")
    return a


def _inputs(
    positional: Sequence[str], named: Sequence[str], opt: str = "--input"
) -> Tuple[Tuple[Any, ...], Dict[str, Any]]:
    by_index: Dict[int, Any] = {i: _load_npy(p) for i, p in enumerate(positional)}
    kwargs: Dict[str, Any] = {}
    for item in named:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise UsageError(
                f"{opt} {item!r}: expected NAME=FILE.npy (NAME: a parameter "
                "name or its index from 0)"
            )
        if name.isdigit():
            i = int(name)
            if i in by_index:
                raise UsageError(f"{opt} {item!r}: parameter {i} is given twice")
            by_index[i] = _load_npy(path)
        else:
            if name in kwargs:
                raise UsageError(f"{opt} {item!r}: parameter {name!r} is given twice")
            kwargs[name] = _load_npy(path)
    if by_index and sorted(by_index) != list(range(len(by_index))):
        raise UsageError(f"inputs by index must be 0, 1, ... without gaps; got {sorted(by_index)}")
    return tuple(by_index[i] for i in range(len(by_index))), kwargs


def _control(a: argparse.Namespace, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
    from .jobs import Control

    try:
        model = pathlib.Path(a.control).read_bytes()
    except OSError as e:
        raise UsageError(f"--control {a.control}: {e.strerror}") from None
    if a.control_input:
        args, kwargs = _inputs((), a.control_input, "--control-input")
    return Control(os.path.basename(a.control), model, a.control_func, args, kwargs)


def _add_tls(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tls-ca",
        metavar="PEM",
        help="CA bundle: every farm connection is mutual "
        "TLS, and only certificates it signed are let in (needs --tls-cert, --tls-key)",
    )
    p.add_argument("--tls-cert", metavar="PEM", help="this process's certificate")
    p.add_argument("--tls-key", metavar="PEM", help="its private key")


def _add_address(p: argparse.ArgumentParser) -> None:
    from .farm import default_address

    p.add_argument(
        "--address",
        default=default_address(),
        help="the head, HOST:PORT (default $VMRPC_FARM_ADDRESS or 127.0.0.1:8786)",
    )
    _add_tls(p)


def _tls(a: argparse.Namespace) -> Optional[engine.Tls]:
    given = [a.tls_ca, a.tls_cert, a.tls_key]
    if not any(given):
        return None
    if not all(given):
        raise UsageError("--tls-ca, --tls-cert and --tls-key go together")
    for opt, path in zip(("--tls-ca", "--tls-cert", "--tls-key"), given):
        try:
            with open(path, "rb") as f:
                if b"-----BEGIN " not in f.read(1 << 20):
                    raise UsageError(f"{opt} {path}: not a PEM file")
        except OSError as e:
            raise UsageError(f"{opt} {path}: {e.strerror}") from None
    return engine.Tls(a.tls_ca, a.tls_cert, a.tls_key)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="vmrpc-farm", description="A device farm of vmagents.")
    sub = ap.add_subparsers(dest="cmd", required=True)

    h = sub.add_parser("head", help="run the farm's head (the engine's scheduler)")
    h.add_argument(
        "--listen",
        default="127.0.0.1:8786",
        help="HOST:PORT to listen on (default 127.0.0.1:8786; port 0: any free)",
    )
    h.add_argument("--lifetime", type=_positive, help="stop after this many seconds")
    _add_tls(h)

    s = sub.add_parser("serve", help="advertise this host's agents to the head")
    _add_address(s)
    s.add_argument(
        "--agent",
        action="append",
        required=True,
        metavar="URL",
        help="an agent of this host (tcp://..., tls+tcp://..., ipc://...); repeatable",
    )
    s.add_argument(
        "--tag",
        action="append",
        type=_tag,
        default=[],
        metavar="KEY=VALUE",
        help="a property added to every agent of this node; repeatable",
    )
    s.add_argument(
        "--token-file",
        metavar="FILE",
        help="the agents' token (first line; '-': standard input); it stays in this "
        "process, never in the engine's",
    )
    s.add_argument(
        "--name-prefix",
        default=socket.gethostname(),
        help="agents are named PREFIX/HOST:PORT (default: this host's name)",
    )
    s.add_argument(
        "--interval",
        type=_positive,
        default=2.0,
        help="seconds between health checks of each agent (default 2)",
    )
    s.add_argument(
        "--head-timeout",
        type=_positive,
        default=30.0,
        help="stop when the head is unreachable this long (default 30 s)",
    )
    s.add_argument("--lifetime", type=_positive, help="stop after this many seconds")

    for kind, what in (
        ("bench", "time a function on the agents (time_evaluator)"),
        ("run", "run a function once on the agents"),
        ("check", "run, then compare the outputs with expected .npy files"),
    ):
        m = sub.add_parser(kind, help=what)
        _add_address(m)
        m.add_argument("model", metavar="MODEL.vmx", nargs="?" if kind == "check" else None)
        m.add_argument(
            "inputs",
            nargs="*",
            metavar="INPUT.npy",
            help="inputs for parameters 0, 1, ... in order",
        )
        m.add_argument(
            "-i",
            "--input",
            action="append",
            default=[],
            metavar="P=FILE.npy",
            help="parameter P (name or index from 0); repeatable",
        )
        m.add_argument("-f", "--func", default="main")
        m.add_argument("-d", "--device", help="device selector(s) of each agent (default: first)")
        m.add_argument("--exec-mode", choices=("bytecode", "compiled"))
        m.add_argument(
            "--where",
            action="append",
            type=_where,
            default=[],
            metavar="COND",
            help="KEY=VALUE, KEY!=VALUE, KEY~=TEXT, KEY>=N, KEY<=N; repeatable (all must hold)",
        )
        g = m.add_mutually_exclusive_group()
        g.add_argument(
            "--all",
            dest="mode",
            action="store_const",
            const="all",
            help="run on every matching agent (default)",
        )
        g.add_argument(
            "--any",
            dest="mode",
            action="store_const",
            const="any",
            help="run on any one matching agent",
        )
        m.add_argument(
            "--count",
            type=_count(1, 10000),
            default=1,
            help="jobs per agent (--all) or in all (--any) (default 1)",
        )
        m.add_argument(
            "--retries",
            type=_count(0, 100),
            default=2,
            help="times a job whose agent died goes to another match (default 2)",
        )
        m.add_argument(
            "--deadline",
            type=_positive,
            default=3600.0,
            help="seconds for all jobs (default 3600); jobs not done are lost",
        )
        m.add_argument(
            "--timeout",
            type=_positive,
            help="seconds one run may take on an agent (default: no limit)",
        )
        m.add_argument("--json", metavar="FILE", help="write the results as JSON ('-': stdout)")
        m.add_argument("--junit", metavar="FILE", help="write the results as JUnit XML")
        m.add_argument("-q", "--quiet", action="store_true", help="no table, no progress")
        if kind == "bench":
            m.add_argument(
                "--store",
                metavar="DB",
                help="also keep every job's raw repeats in this results store (a SQLite "
                "file, or postgresql://...); needs --label",
            )
            m.add_argument("--label", help="what was benchmarked, e.g. the commit (with --store)")
            m.add_argument(
                "--tag",
                action="append",
                type=_tag,
                default=[],
                metavar="KEY=VALUE",
                help="a property of this run kept in the store; repeatable",
            )
            m.add_argument("-n", "--number", type=_count(1, 1 << 30), default=10)
            m.add_argument("-r", "--repeat", type=_count(1, 1 << 20), default=1)
            m.add_argument("--min-repeat-ms", type=_count(0, 1 << 30), default=0)
            m.add_argument(
                "--best-of",
                type=_count(1, 1000),
                metavar="K",
                help="each repeat is the fastest of K batches (default 3 with --control, "
                "else 1)",
            )
            m.add_argument(
                "--control",
                metavar="REF.vmx",
                help="a reference executable that stays the same across labels, timed "
                "interleaved with the model (one repeat each, A B B A) on the same device "
                "in each job; `check` then judges model time / paired reference time",
            )
            m.add_argument(
                "--control-input",
                action="append",
                default=[],
                metavar="P=FILE.npy",
                help="the control's parameter P (name or index from 0); repeatable "
                "(default: the model's inputs)",
            )
            m.add_argument("--control-func", default="main", help="the control's function")
        if kind == "check":
            m.add_argument(
                "-e",
                "--expected",
                action="append",
                metavar="FILE.npy",
                help="expected value of the next output in order; repeatable",
            )
            m.add_argument("--rtol", type=float, default=1e-5)
            m.add_argument("--atol", type=float, default=1e-8)
            r = m.add_argument_group(
                "regression check (with --store: no model, no agents; a label "
                "against a baseline per (model, device) from the store)"
            )
            r.add_argument("--store", metavar="DB", help="the results store (see bench --store)")
            r.add_argument("--label", help="the label under test")
            r.add_argument("--baseline", help="the label to compare against")
            r.add_argument("--model", dest="only_model", help="only this model (its file name)")
            r.add_argument(
                "--threshold",
                type=_positive,
                default=0.05,
                help="relative change that counts (default 0.05: 5 %%)",
            )
            r.add_argument(
                "--level", type=_fraction, default=0.95, help="confidence level (default 0.95)"
            )
            r.add_argument(
                "--raw",
                action="store_true",
                help="judge raw times even where the runs carry a control (bench --control)",
            )
        if kind == "run":
            m.add_argument(
                "-o", "--output-dir", help="write each agent's outputs to DIR/AGENT/OUT.npy"
            )

    hi = sub.add_parser("history", help="per (model, device) and label: median and its CI")
    _add_store(hi)
    hi.add_argument("--model", help="only this model (its file name)")
    hi.add_argument("--json", metavar="FILE", help="also write JSON ('-': stdout, no table)")

    rp = sub.add_parser("report", help="one self-contained HTML page of the store")
    _add_store(rp)
    rp.add_argument("-o", "--output", required=True, metavar="FILE.html")
    rp.add_argument("--label", help="the latest label (default: the last one stored)")
    rp.add_argument(
        "--baseline", help="the label to compare against (default: the one before --label)"
    )
    rp.add_argument("--threshold", type=_positive, default=0.05)

    st = sub.add_parser("status", help="agents, their leases, and the queue")
    _add_address(st)
    st.add_argument("--json", action="store_true", help="print JSON")
    return ap


def _cmd_head(a: argparse.Namespace) -> int:
    host, sep, port = a.listen.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise UsageError(f"--listen {a.listen!r}: expected HOST:PORT")
    return engine.run_head(host or "127.0.0.1", int(port), a.lifetime, _tls(a))


def _read_token(path: str) -> str:
    """The first line of path ('-': standard input)."""
    name = "standard input" if path == "-" else path
    try:
        if path == "-":
            token = sys.stdin.readline().rstrip("\r\n")
        else:
            with open(path, encoding="utf-8") as f:
                token = f.readline().rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"--token-file {path}: {e}") from None
    if not token:
        raise UsageError(f"{name}: the first line (the token) is empty")
    return token


def _cmd_serve(a: argparse.Namespace) -> int:
    from . import keeper

    agents = []
    for url in a.agent:
        if not url.startswith(("tcp://", "tls+tcp://", "ipc://")):
            raise UsageError(
                f"--agent {url!r}: expected tcp://HOST:PORT, tls+tcp://HOST:PORT or ipc:///PATH"
            )
        agents.append((url, f"{a.name_prefix}/{url.split('://', 1)[1]}"))
    if len({name for _, name in agents}) != len(agents):
        raise UsageError("an agent is given twice")
    tls = _tls(a)
    address = engine.normalize_address(a.address, tls is not None)
    token = _read_token(a.token_file) if a.token_file else None
    return keeper.serve(
        address, agents, token, dict(a.tag), a.interval, a.head_timeout, a.lifetime, tls
    )


def _open_farm(a: argparse.Namespace) -> Any:
    from .farm import Farm

    address = a.address
    tls = _tls(a)
    try:
        return Farm(address, tls=tls)
    except (OSError, TimeoutError) as e:
        hint = (
            " and is --tls-cert signed by the CA the head trusts?"
            if tls
            else " (a head started with --tls-* takes only TLS clients)"
        )
        raise FarmError(
            f"cannot reach the head at {address}: {e}; is `vmrpc-farm head` running there{hint}"
        ) from None


class FarmError(Exception):
    pass


def _write(path: str, text: str) -> None:
    if path == "-":
        sys.stdout.write(text)
        return
    p = pathlib.Path(path)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, p)


def _cmd_job(a: argparse.Namespace) -> int:
    from . import report
    from .jobs import JobSpec

    if a.cmd == "check" and (a.model is None or not a.expected):
        raise UsageError(
            "check needs MODEL.vmx and --expected (or --store, --label and --baseline "
            "for a regression check of stored results)"
        )

    if a.cmd == "bench" and bool(a.store) != bool(a.label):
        raise UsageError("--store and --label go together")
    try:
        model = pathlib.Path(a.model).read_bytes()
    except OSError as e:
        raise UsageError(f"{a.model}: {e.strerror}") from None
    args, kwargs = _inputs(a.inputs, a.input)
    # Opened before the jobs: a store that cannot be written fails fast.
    store = _open_store(a.store) if a.cmd == "bench" and a.store else None
    spec = JobSpec(
        a.cmd,
        os.path.basename(a.model),
        model,
        a.func,
        args,
        kwargs,
        a.device,
        a.exec_mode,
        timeout=a.timeout,
    )
    if a.cmd == "bench":
        spec.number, spec.repeat, spec.min_repeat_ms = a.number, a.repeat, a.min_repeat_ms
        spec.best_of = a.best_of or (3 if a.control else 1)
        if spec.repeat * spec.best_of > 1 << 20:
            raise UsageError(f"--repeat {a.repeat} x --best-of {spec.best_of}: at most "
                             f"{1 << 20} batches in all")
        if a.control:
            spec.control = _control(a, args, kwargs)
        elif a.control_input:
            raise UsageError("--control-input goes with --control")
    if a.cmd == "check":
        spec.expected = [_load_npy(p) for p in a.expected]
        spec.rtol, spec.atol = a.rtol, a.atol
    mode = a.mode or "all"

    def log(msg: str) -> None:
        if not a.quiet:
            print(f"vmrpc-farm: {msg}", file=sys.stderr, flush=True)

    with _open_farm(a) as farm:
        matches = farm.select(a.where)
        if not matches:
            cond = " and ".join(str(w) for w in a.where) or "(none)"
            known = farm.agents()
            raise FarmError(
                f"no agent that is up matches {cond}; {len(known)} known "
                f"({sum(k.state == 'up' for k in known)} up): see `vmrpc-farm status`"
            )
        log(f"{len(matches)} matching agent(s): {', '.join(m.name for m in matches)}")
        started = time.time()
        jobs = farm.dispatch(spec, a.where, mode, a.retries, a.deadline, log, a.count)
    meta = {
        "address": farm.address,
        "command": a.cmd,
        "model": spec.model_name,
        "func": spec.func,
        "where": [str(w) for w in a.where],
        "mode": mode,
        "retries": a.retries,
        "started": started,
        "seconds": time.time() - started,
    }
    if store is not None:
        with store:
            run_id = store.add_run(
                a.label,
                spec.model_name,
                spec.func,
                hashlib.sha256(model).hexdigest(),
                [j.to_dict() for j in jobs],
                dict(a.tag),
                {k: meta[k] for k in ("address", "where", "mode")}
                | {"number": a.number, "repeat": a.repeat, "min_repeat_ms": a.min_repeat_ms,
                   "best_of": spec.best_of}
                | ({"control": spec.control.name} if spec.control else {}),
                started,
            )
        log(f"stored as run {run_id} under label {a.label!r} in {a.store}")
    if a.json:
        _write(a.json, report.to_json(jobs, meta))
    if a.junit:
        _write(a.junit, report.to_junit(jobs, f"vmrpc-farm.{a.cmd}", meta))
    if a.cmd == "run" and a.output_dir:
        for j in jobs:
            if j.outputs is None or j.result is None:
                continue
            d = pathlib.Path(a.output_dir) / j.result["agent"].replace("/", "_").replace(":", "_")
            d.mkdir(parents=True, exist_ok=True)
            for o, v in zip(j.result["outputs"], j.outputs):
                if isinstance(v, np.ndarray):
                    np.save(d / f"{o['name']}.npy", v)
    if not a.quiet and a.json != "-":
        sys.stdout.write(report.to_table(jobs))
    return EXIT_OK if all(j.state == "ok" for j in jobs) else EXIT_JOBS


def _size(n: Any) -> str:
    try:
        v = float(n)
    except (TypeError, ValueError):
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if v < 1024 or unit == "TiB":
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1024
    return "-"


def _cmd_status(a: argparse.Namespace) -> int:
    with _open_farm(a) as farm:
        agents = farm.agents(with_leases=True)
        queue = farm.queue()
    if a.json:
        print(
            json.dumps(
                {
                    "address": farm.address,
                    "agents": [vars(x) for x in agents],
                    "queue": queue,
                },
                indent=2,
                default=str,
            )
        )
        return EXIT_OK
    rows = [
        ["agent", "state", "version", "devices", "vendor", "memory", "tags", "lease", "waiting"]
    ]
    for x in agents:
        p = x.props
        tags = ",".join(f"{k}={v}" for k, v in p.items() if k not in RESERVED)
        rows.append(
            [
                x.name,
                x.state + (f" ({x.error[:40]})" if x.error and x.state != "up" else ""),
                str(p.get("version", "-")),
                ",".join(p.get("device") or []) or "-",
                ",".join(p.get("vendor") or []) or "-",
                _size(p.get("memory")),
                tags or "-",
                x.lease or "-",
                str(len(x.waiting)),
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    up = sum(x.state == "up" for x in agents)
    busy = sum(1 for x in agents if x.lease)
    waiting = sum(len(x.waiting) for x in agents) + len(queue)
    print(f"{len(agents)} agents ({up} up, {busy} leased); {waiting} jobs waiting")
    return EXIT_OK


def _open_store(where: str) -> Any:
    from .store import Store, StoreError

    try:
        return Store(where)
    except StoreError as e:
        raise UsageError(str(e)) from None


def _series(a: argparse.Namespace) -> Tuple[List[str], List[Any]]:
    with _open_store(a.store) as store:
        return store.labels(), store.series(getattr(a, "model", None))


def _cmd_history(a: argparse.Namespace) -> int:
    from . import history

    _, series = _series(a)
    doc = [
        {"model": s.model, "agent": s.agent, "device": s.device, "labels": history.history_rows(s)}
        for s in series
    ]
    if a.json:
        _write(a.json, json.dumps(doc, indent=2, default=str) + "\n")
        if a.json == "-":
            return EXIT_OK
    rows = [["model", "agent", "device", "label", "repeats", "median ms", "95% CI ms", "state"]]
    for s in doc:
        for r in s["labels"]:
            ci = (
                "-"
                if r["ci_lo_s"] is None
                else f"{r['ci_lo_s'] * 1e3:.4f}..{r['ci_hi_s'] * 1e3:.4f}"
            )
            rows.append(
                [
                    s["model"],
                    s["agent"],
                    s["device"],
                    r["label"],
                    str(r["repeats"]),
                    f"{r['median_s'] * 1e3:.4f}",
                    ci,
                    json.dumps(r["device_states"][-1]) if r["device_states"] else "-",
                ]
            )
    sys.stdout.write(history.to_table(rows))
    return EXIT_OK


def _cmd_check(a: argparse.Namespace) -> int:
    from . import history

    if a.model is not None or a.expected:
        raise UsageError("check --store compares stored labels: give no MODEL.vmx or --expected")
    if not a.label or not a.baseline:
        raise UsageError("check --store needs --label and --baseline")
    with _open_store(a.store) as store:
        labels, series = store.labels(), store.series(a.only_model)
    for opt, label in (("--label", a.label), ("--baseline", a.baseline)):
        if label not in labels:
            raise UsageError(
                f"{opt} {label!r}: no such label in {a.store} (it has: "
                f"{', '.join(labels[-10:]) or 'none'}); see `vmrpc-farm history`"
            )
    verdicts = history.check(series, a.label, a.baseline, a.threshold, a.level, a.raw)
    meta = {
        "store": a.store,
        "label": a.label,
        "baseline": a.baseline,
        "threshold": a.threshold,
        "level": a.level,
        "raw": a.raw,
    }
    if a.json:
        _write(a.json, history.to_json(verdicts, meta))
    if a.junit:
        _write(a.junit, history.to_junit(verdicts, meta))
    if a.json != "-":
        rows = [["model", "agent", "device", "verdict", "ratio", "CI", "measure", "change points"]]
        for v in verdicts:
            ci = "-" if v.get("ci_lo") is None else f"{v['ci_lo']:.4f}..{v['ci_hi']:.4f}"
            ratio = f"{v['ratio']:.4f}" if "ratio" in v else "-"
            cps = ",".join(c["label"] for c in v["change_points"]) or "-"
            rows.append([v["model"], v["agent"], v["device"], v["verdict"], ratio, ci,
                         v["measure"], cps])
        sys.stdout.write(history.to_table(rows))
    bad = [v for v in verdicts if v["regression"]]
    if bad:
        _err(f"{len(bad)} regression(s) of {a.label} against {a.baseline}")
        return EXIT_JOBS
    return EXIT_OK


def _cmd_report(a: argparse.Namespace) -> int:
    from . import htmlreport

    with _open_store(a.store) as store:
        labels = store.labels()
        series = store.series()
    if not labels:
        raise UsageError(f"{a.store}: the store holds no runs yet")
    for opt, label in (("--label", a.label), ("--baseline", a.baseline)):
        if label is not None and label not in labels:
            raise UsageError(f"{opt} {label!r}: no such label in {a.store}")
    label = a.label or labels[-1]
    baseline = a.baseline
    if baseline is None:
        i = labels.index(label)
        baseline = labels[i - 1] if i > 0 else label
    _write(a.output, htmlreport.render(series, labels, label, baseline, a.threshold, a.store))
    return EXIT_OK


def main(argv: Optional[List[str]] = None) -> int:
    a = _parser().parse_args(argv)
    try:
        if a.cmd == "head":
            return _cmd_head(a)
        if a.cmd == "serve":
            return _cmd_serve(a)
        if a.cmd == "status":
            return _cmd_status(a)
        if a.cmd == "history":
            return _cmd_history(a)
        if a.cmd == "check" and getattr(a, "store", None):
            return _cmd_check(a)
        if a.cmd == "report":
            return _cmd_report(a)
        return _cmd_job(a)
    except UsageError as e:
        _err(str(e))
        return EXIT_USAGE
    except ValueError as e:  # bad --address
        _err(str(e))
        return EXIT_USAGE
    except FarmError as e:
        _err(str(e))
        return EXIT_FARM
    except KeyboardInterrupt:
        _err("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
