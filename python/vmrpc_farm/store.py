"""The farm's results store (docs/farm.md): every bench job's raw repeats
with what it ran on, under a label (a commit), for ``history``, ``check``
and ``report``.

One database layer, SQLAlchemy Core: SQLite by default (a file path, or
``sqlite:///PATH``), PostgreSQL by URL (``postgresql://...``, driven by
psycopg). The schema carries its version in the table ``vmrpc_schema``;
:data:`MIGRATIONS` is an ordered list of steps, each run with the version
bump in one transaction (DDL is transactional in both databases), and a
store written by a newer vmrpc-farm is refused rather than misread.

Concurrent writers: every write is one transaction. SQLite runs in WAL
mode with a busy timeout and transactions that take the write lock when
they begin (BEGIN IMMEDIATE), so a writer waits for another instead of
failing in the middle; a writer still told "database is locked" retries
the whole transaction a bounded number of times. PostgreSQL serialises
the schema step with a transaction-level advisory lock.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import OperationalError

__all__ = ["Store", "StoreError", "Series", "open_store", "SCHEMA_VERSION", "store_url"]

T = TypeVar("T")


class StoreError(Exception):
    """A store that cannot be opened, read or written (the message says why
    and what to do)."""


meta = sa.MetaData()

schema = sa.Table("vmrpc_schema", meta, sa.Column("version", sa.Integer, nullable=False))

runs = sa.Table(
    "runs",
    meta,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("label", sa.String(200), nullable=False, index=True),
    sa.Column("model", sa.String(400), nullable=False),
    sa.Column("func", sa.String(200), nullable=False),
    sa.Column("exe_sha256", sa.String(64), nullable=False),
    sa.Column("created", sa.Float, nullable=False),
    sa.Column("tags", sa.Text, nullable=False),  # JSON object
    sa.Column("meta", sa.Text, nullable=False),  # JSON object: the bench's parameters
)

results = sa.Table(
    "results",
    meta,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), nullable=False, index=True),
    sa.Column("job", sa.String(200), nullable=False),
    sa.Column("state", sa.String(20), nullable=False),
    sa.Column("agent", sa.String(400), nullable=False),
    sa.Column("device", sa.String(200), nullable=False),
    sa.Column("version", sa.String(100), nullable=True),
    sa.Column("agent_props", sa.Text, nullable=False),  # JSON
    sa.Column("device_info", sa.Text, nullable=True),  # JSON
    sa.Column("device_state", sa.Text, nullable=True),  # JSON, where the job carries one
    sa.Column("profile", sa.Text, nullable=True),  # JSON: per-operator profile, where taken
    sa.Column("number", sa.Integer, nullable=True),
    sa.Column("started", sa.Float, nullable=True),
    sa.Column("ended", sa.Float, nullable=True),
    sa.Column("error", sa.Text, nullable=False),
)



def _samples_table(name: str) -> sa.Table:
    """One row per repeat of a result: wall seconds per call, and the
    device timer's where the device has one."""
    return sa.Table(
        name,
        meta,
        sa.Column("result_id", sa.Integer, sa.ForeignKey("results.id"), nullable=False, index=True),
        sa.Column("idx", sa.Integer, nullable=False),
        sa.Column("wall_s", sa.Float, nullable=False),
        sa.Column("device_s", sa.Float, nullable=True),
    )


samples = _samples_table("samples")


# Version 2: the control of a control-normalized bench (`bench --control`):
# which reference ran beside a result, and its repeats, paired by idx with
# the result's own samples (timed interleaved, A B B A, in the same job).
controls = sa.Table(
    "controls",
    meta,
    sa.Column("result_id", sa.Integer, sa.ForeignKey("results.id"), primary_key=True),
    sa.Column("model", sa.String(400), nullable=False),
    sa.Column("func", sa.String(200), nullable=False),
    sa.Column("exe_sha256", sa.String(64), nullable=False),
)

control_samples = _samples_table("control_samples")


def _v1(c: Connection) -> None:
    for t in (runs, results, samples):
        t.create(c, checkfirst=False)


def _v2(c: Connection) -> None:
    for t in (controls, control_samples):
        t.create(c, checkfirst=False)


# (version reached, step), run in order from the store's version on. Append
# only: a released step never changes; a later one alters tables with its
# own statements (ALTER TABLE ...) and updates the Table objects above.
MIGRATIONS: List[Tuple[int, Callable[[Connection], None]]] = [(1, _v1), (2, _v2)]
SCHEMA_VERSION = MIGRATIONS[-1][0]


def store_url(where: str) -> str:
    """A --store argument as a SQLAlchemy URL: a path is a SQLite file;
    postgresql:// (or postgres://) is driven by psycopg."""
    if "://" not in where:
        return "sqlite:///" + os.path.abspath(where)
    scheme, rest = where.split("://", 1)
    if scheme in ("postgresql", "postgres"):
        return "postgresql+psycopg://" + rest
    if scheme in ("sqlite", "postgresql+psycopg"):
        return where
    raise StoreError(
        f"--store {where!r}: expected a file path (SQLite), sqlite:///PATH or postgresql://..."
    )


def _sqlite_setup(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _connect(dbapi: Any, _: Any) -> None:
        dbapi.isolation_level = None  # transactions begun below, not by the driver
        cur = dbapi.cursor()
        cur.execute("PRAGMA busy_timeout = 30000")
        cur.execute("PRAGMA journal_mode = WAL")
        cur.execute("PRAGMA foreign_keys = ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def _sample_rows(rid: int, t: Dict[str, Any]) -> List[Dict[str, Any]]:
    """A timing dict's repeats as sample rows (idx: the repeat's index)."""
    wall = list(t.get("results") or [])
    dev = list(t.get("device_results") or [None] * len(wall))
    return [
        {"result_id": rid, "idx": i, "wall_s": float(w), "device_s": d}
        for i, (w, d) in enumerate(zip(wall, dev))
        if isinstance(w, (int, float)) and math.isfinite(w)
    ]


def _loads(text: Optional[str]) -> Any:
    return None if text is None else json.loads(text)


@dataclass
class Series:
    """The samples of one (model, agent, device) over labels, in label order."""

    model: str
    agent: str
    device: str
    labels: List[str] = field(default_factory=list)
    wall: Dict[str, List[float]] = field(default_factory=dict)  # label -> per-call seconds
    device_s: Dict[str, List[float]] = field(default_factory=dict)
    states: Dict[str, List[Any]] = field(default_factory=dict)  # label -> device states of its runs
    profiles: Dict[str, List[Any]] = field(default_factory=dict)
    sha: Dict[str, List[str]] = field(default_factory=dict)
    # label -> the paired control repeat of each wall repeat (None: none
    # was taken) and the control executables' SHA-256 under the label
    control: Dict[str, List[Optional[float]]] = field(default_factory=dict)
    control_sha: Dict[str, List[str]] = field(default_factory=dict)
    # label -> the device timer's reading of each wall repeat and of its
    # paired control repeat (None: none)
    device_at: Dict[str, List[Optional[float]]] = field(default_factory=dict)
    control_device: Dict[str, List[Optional[float]]] = field(default_factory=dict)
    # label -> the result (job) each wall repeat belongs to
    result_at: Dict[str, List[int]] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.model} @ {self.agent} {self.device}"

    def time_base(self, label: str) -> str:
        """"device" where every repeat of the label, and every paired
        control repeat, has a device timer reading; else "wall"."""
        d, c = self.device_at.get(label) or [], self.control_device.get(label) or []
        ok = d and all(x is not None and x > 0 for x in d) and (
            not any(self.control.get(label) or []) or (
                len(c) == len(d) and all(x is not None and x > 0 for x in c)))
        return "device" if ok else "wall"

    def normalized(self, label: str, base: str = "wall") -> Optional[List[float]]:
        """The label's model time over its paired control time, repeat by
        repeat, on the wall clock or the device timer (base); None unless
        every repeat of the label has its control (and, for "device", a
        device reading on both sides)."""
        if base == "device":
            if self.time_base(label) != "device":
                return None
            w, c = self.device_at.get(label) or [], self.control_device.get(label) or []
        else:
            w, c = self.wall.get(label) or [], self.control.get(label) or []
        if not w or len(c) != len(w) or any(x is None or x <= 0 for x in c):
            return None
        return [a / b for a, b in zip(w, c)]  # type: ignore[operator]


class Store:
    RETRIES = 20

    def __init__(self, where: str) -> None:
        self.url = store_url(where)
        self.dialect = self.url.split(":", 1)[0].split("+", 1)[0]
        try:
            self.engine = sa.create_engine(self.url, future=True, pool_pre_ping=True)
        except (ImportError, sa.exc.ArgumentError) as e:
            raise StoreError(f"store {where!r}: {e}") from None
        if self.dialect == "sqlite":
            _sqlite_setup(self.engine)
        self.where = where
        self._migrate()

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transactions ----------------------------------------------------------
    def _tx(self, fn: Callable[[Connection], T]) -> T:
        """fn in one transaction; retried whole when the database is busy."""
        for attempt in range(self.RETRIES):
            try:
                with self.engine.begin() as c:
                    return fn(c)
            except OperationalError as e:
                text = str(e.orig) if e.orig is not None else str(e)
                busy = "locked" in text or "busy" in text or "deadlock" in text
                if not busy or attempt == self.RETRIES - 1:
                    raise StoreError(f"store {self.where}: {text.strip()}") from None
                time.sleep(min(2.0, 0.05 * 2**attempt) * random.uniform(0.5, 1.0))
        raise AssertionError("unreachable")

    def _migrate(self) -> None:
        def step(c: Connection) -> None:
            if self.dialect == "postgresql":
                c.execute(sa.text("SELECT pg_advisory_xact_lock(7236218)"))
            schema.create(c, checkfirst=True)
            rows = c.execute(sa.select(schema.c.version)).scalars().all()
            if len(rows) > 1:
                raise StoreError(f"store {self.where}: vmrpc_schema holds {len(rows)} rows, not one")
            have = rows[0] if rows else 0
            if have > SCHEMA_VERSION:
                raise StoreError(
                    f"store {self.where} has schema version {have}; this vmrpc-farm knows "
                    f"up to {SCHEMA_VERSION}: upgrade vmrpc-farm"
                )
            if not rows:
                c.execute(schema.insert().values(version=0))
            for version, fn in MIGRATIONS:
                if version > have:
                    fn(c)
                    c.execute(schema.update().values(version=version))

        try:
            self._tx(step)
        except sa.exc.SQLAlchemyError as e:
            raise StoreError(f"store {self.where}: cannot open: {e}") from None

    def version(self) -> int:
        return int(self._tx(lambda c: c.execute(sa.select(schema.c.version)).scalar_one()))

    # -- writing ----------------------------------------------------------------
    def add_run(
        self,
        label: str,
        model: str,
        func: str,
        exe_sha256: str,
        jobs: Sequence[Dict[str, Any]],
        tags: Optional[Dict[str, str]] = None,
        meta_: Optional[Dict[str, Any]] = None,
        created: Optional[float] = None,
    ) -> int:
        """One bench dispatch: jobs are Job.to_dict() of it. Returns the run's id."""
        if not label or len(label) > 200:
            raise StoreError(f"label {label!r}: give 1 to 200 characters")
        when = time.time() if created is None else created

        def write(c: Connection) -> int:
            run_id = c.execute(
                runs.insert().values(
                    label=label,
                    model=model,
                    func=func,
                    exe_sha256=exe_sha256,
                    created=when,
                    tags=json.dumps(tags or {}, sort_keys=True),
                    meta=json.dumps(meta_ or {}, sort_keys=True, default=str),
                )
            ).inserted_primary_key[0]
            for j in jobs:
                r = j.get("result") or {}
                t = r.get("timing") or {}
                rid = c.execute(
                    results.insert().values(
                        run_id=run_id,
                        job=str(j.get("id")),
                        state=str(j.get("state")),
                        agent=str(r.get("agent") or j.get("target") or "?"),
                        device=str(r.get("device") or "?"),
                        version=r.get("version"),
                        agent_props=json.dumps(r.get("properties") or {}, default=str),
                        device_info=json.dumps(r.get("device_info"), default=str),
                        device_state=(
                            None
                            if r.get("device_state") is None
                            else json.dumps(r["device_state"], default=str)
                        ),
                        profile=(
                            None if r.get("profile") is None else json.dumps(r["profile"])
                        ),
                        number=t.get("number"),
                        started=r.get("start"),
                        ended=r.get("end"),
                        error=str(j.get("error") or ""),
                    )
                ).inserted_primary_key[0]
                rows = _sample_rows(rid, t)
                if rows:
                    c.execute(samples.insert(), rows)
                ctl = r.get("control")
                if isinstance(ctl, dict) and rows:
                    c.execute(
                        controls.insert().values(
                            result_id=rid,
                            model=str(ctl.get("model") or "?"),
                            func=str(ctl.get("func") or "main"),
                            exe_sha256=str(ctl.get("exe_sha256") or ""),
                        )
                    )
                    crows = _sample_rows(rid, ctl)
                    if crows:
                        c.execute(control_samples.insert(), crows)
            return int(run_id)

        return self._tx(write)

    # -- reading ----------------------------------------------------------------
    def labels(self) -> List[str]:
        """Labels in the order they were first stored."""
        q = (
            sa.select(runs.c.label, sa.func.min(runs.c.created).label("first"))
            .group_by(runs.c.label)
            .order_by("first", runs.c.label)
        )
        return [r.label for r in self._tx(lambda c: c.execute(q).all())]

    def counts(self) -> Dict[str, int]:
        def count(c: Connection) -> Dict[str, int]:
            return {
                t.name: int(c.execute(sa.select(sa.func.count()).select_from(t)).scalar_one())
                for t in (runs, results, samples, controls, control_samples)
            }

        return self._tx(count)

    def series(self, model: Optional[str] = None) -> List[Series]:
        """Every (model, agent, device) with its ok results, labels in order."""
        order = {label: i for i, label in enumerate(self.labels())}
        q = (
            sa.select(
                runs.c.label,
                runs.c.model,
                runs.c.exe_sha256,
                results.c.id,
                results.c.agent,
                results.c.device,
                results.c.device_state,
                results.c.profile,
                samples.c.wall_s,
                samples.c.device_s,
                controls.c.exe_sha256.label("control_sha"),
                control_samples.c.wall_s.label("control_s"),
                control_samples.c.device_s.label("control_device_s"),
            )
            .select_from(
                runs.join(results)
                .outerjoin(samples)
                .outerjoin(controls, controls.c.result_id == results.c.id)
                .outerjoin(
                    control_samples,
                    sa.and_(
                        control_samples.c.result_id == samples.c.result_id,
                        control_samples.c.idx == samples.c.idx,
                    ),
                )
            )
            .where(results.c.state == "ok")
            .order_by(runs.c.created, results.c.id, samples.c.idx)
        )
        if model is not None:
            q = q.where(runs.c.model == model)
        rows = self._tx(lambda c: c.execute(q).all())
        out: Dict[Tuple[str, str, str], Series] = {}
        seen = set()
        for r in rows:
            s = out.setdefault((r.model, r.agent, r.device), Series(r.model, r.agent, r.device))
            if r.label not in s.wall:
                for d in (s.wall, s.device_s, s.states, s.profiles, s.sha, s.control,
                          s.control_sha, s.device_at, s.control_device, s.result_at):
                    d[r.label] = []  # type: ignore[index]
            if r.id not in seen:
                seen.add(r.id)
                s.states[r.label].append(_loads(r.device_state))
                s.profiles[r.label].append(_loads(r.profile))
                if r.exe_sha256 not in s.sha[r.label]:
                    s.sha[r.label].append(r.exe_sha256)
                if r.control_sha is not None and r.control_sha not in s.control_sha[r.label]:
                    s.control_sha[r.label].append(r.control_sha)
            if r.wall_s is not None:
                s.wall[r.label].append(float(r.wall_s))
                s.control[r.label].append(None if r.control_s is None else float(r.control_s))
                s.device_at[r.label].append(None if r.device_s is None else float(r.device_s))
                s.result_at[r.label].append(int(r.id))
                s.control_device[r.label].append(
                    None if r.control_device_s is None else float(r.control_device_s))
                if r.device_s is not None:
                    s.device_s[r.label].append(float(r.device_s))
        for s in out.values():
            s.labels = sorted(s.wall, key=lambda label: order.get(label, len(order)))
        return [out[k] for k in sorted(out)]


def open_store(where: str) -> Store:
    return Store(where)


def iter_jobs(jobs: Iterable[Any]) -> List[Dict[str, Any]]:
    return [j.to_dict() if hasattr(j, "to_dict") else dict(j) for j in jobs]
