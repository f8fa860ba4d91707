"""The farm seen from a client (CI): which agents there are, and dispatching
a job to all or any of those that match, with bounded retries.

Every job ends in exactly one of these states, never silently dropped:

- ``ok``: ran and (check) matched;
- ``mismatch``: check ran and the outputs differ;
- ``error``: ran and failed (the model, its inputs: retrying would not help);
- ``lost``: its agent died and no other matching agent could take it within
  the retries, or the deadline passed first.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Set

from . import engine
from .jobs import AgentDown, JobSpec, execute
from .props import Where, matches_all

__all__ = ["AgentView", "Job", "Farm"]


@dataclass
class AgentView:
    name: str
    state: str  # up | down | gone (its node stopped) | lost (its worker vanished)
    props: Dict[str, Any]
    worker: Optional[str]
    since: float
    error: str = ""
    lease: Optional[str] = None  # the job key holding it
    waiting: List[str] = field(default_factory=list)


@dataclass
class Job:
    id: str
    target: Optional[str]  # the agent it was meant for (--all), None for --any
    attempts: List[Dict[str, Any]] = field(default_factory=list)
    state: str = "pending"  # pending | ok | mismatch | error | lost
    result: Optional[Dict[str, Any]] = None
    outputs: Optional[List[Any]] = None
    error: str = ""

    def to_dict(self) -> Dict[str, Any]:
        return {
            "id": self.id,
            "target": self.target,
            "state": self.state,
            "error": self.error,
            "attempts": self.attempts,
            "result": self.result,
        }


Log = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


class Farm:
    """A client of the farm's head."""

    def __init__(
        self, address: str, timeout: float = 10.0, tls: Optional[engine.Tls] = None
    ) -> None:
        self.address = engine.normalize_address(address, tls is not None)
        self.client = engine.connect(self.address, timeout, tls)

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> "Farm":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- agents --------------------------------------------------------------
    def agents(self, with_leases: bool = False) -> List[AgentView]:
        meta = self.client.get_metadata(engine.META, default={}) or {}
        # Asked of the scheduler here: Client.scheduler_info() returns a cache
        # that the client's periodic refresh replaces with one listing no
        # workers, which made every agent look lost to a racing call.
        ident = self.client.sync(self.client.scheduler.identity, n_workers=-1)
        alive = ident["workers"]
        out = []
        for name, e in sorted(meta.items()):
            if not isinstance(e, dict):
                continue
            state = str(e.get("state", "down"))
            worker = e.get("worker")
            if state == "up" and worker not in alive:
                state = "lost"  # the node died without saying so
            out.append(
                AgentView(
                    name,
                    state,
                    dict(e.get("props") or {}),
                    worker,
                    float(e.get("since") or 0),
                    str(e.get("error") or ""),
                )
            )
        if with_leases:
            held = self.client.run_on_scheduler(engine.scheduler_view)["held"]
            up = [a.worker for a in out if a.state == "up" and a.worker]
            per_worker: Dict[str, Any] = {}
            if up:
                try:
                    per_worker = self.client.run(engine.worker_view, workers=up, on_error="return")
                except Exception:  # a worker leaving meanwhile: the scheduler's view is enough
                    per_worker = {}
            for a in out:
                if a.worker is None:
                    continue
                w = per_worker.get(a.worker)
                if isinstance(w, dict):
                    a.lease = (w["executing"] or [None])[0]
                    a.waiting = list(w["waiting"])
                else:
                    keys = held.get(a.worker, [])
                    a.lease = keys[0] if keys else None
                    a.waiting = keys[1:]
        return out

    def queue(self) -> List[Dict[str, Any]]:
        """Jobs the head holds with no agent yet."""
        return list(self.client.run_on_scheduler(engine.scheduler_view)["waiting"])

    def select(self, where: Sequence[Where]) -> List[AgentView]:
        return [a for a in self.agents() if a.state == "up" and matches_all(where, a.props)]

    # -- dispatch ------------------------------------------------------------
    def dispatch(
        self,
        spec: JobSpec,
        where: Sequence[Where] = (),
        mode: str = "all",
        retries: int = 2,
        deadline: Optional[float] = None,
        log: Log = _quiet,
        count: int = 1,
    ) -> List[Job]:
        """Runs spec on every matching agent (mode "all") or on any one
        (mode "any"), ``count`` times each; returns the jobs once every one
        has ended. An agent that dies takes no more jobs of this dispatch;
        its job goes to another match, at most ``retries`` times. deadline:
        seconds for the whole dispatch (jobs not done by then are lost)."""
        if mode not in ("all", "any"):
            raise ValueError(f"mode must be 'all' or 'any', got {mode!r}")
        matches = self.select(where)
        tag = uuid.uuid4().hex[:8]
        if mode == "all":
            targets: List[Optional[str]] = [a.name for a in matches]
        else:
            targets = [None] if matches else []
        jobs = [
            Job(f"{spec.kind}-{tag}-{n}", t)
            for n, t in enumerate(t for t in targets for _ in range(count))
        ]
        by_name = {a.name: a for a in matches}
        down: Set[str] = set()
        pending: Dict[Any, Job] = {}
        attempt_no = itertools.count()
        woken = threading.Event()
        end_by = None if deadline is None else time.monotonic() + deadline

        def candidates(job: Job) -> List[str]:
            if job.target is not None and job.target not in down:
                return [job.target]
            return [n for n in by_name if n not in down]

        def submit(job: Job) -> None:
            names = candidates(job)
            tries = len(job.attempts)
            if not names or tries > retries:
                job.state = "lost"
                tried = ", ".join(a["agent"] or "?" for a in job.attempts) or "none"
                job.error = (
                    f"no matching agent left to run it (tried: {tried})"
                    if not names
                    else f"gave up after {tries} attempts (tried: {tried}; raise --retries)"
                )
                log(f"job {job.id}: lost: {job.error}")
                return
            workers = [by_name[n].worker for n in names]
            fut = self.client.submit(
                execute,
                spec,
                key=f"vmrpc-{job.id}-{next(attempt_no)}",
                workers=workers,
                allow_other_workers=False,
                resources={engine.RESOURCE: 1},
                pure=False,
                retries=0,
            )
            fut.vmrpc_names = names
            fut.vmrpc_workers = workers
            pending[fut] = job
            fut.add_done_callback(lambda _: woken.set())

        def failed_attempt(job: Job, agent: Optional[str], why: str) -> None:
            job.attempts.append({"agent": agent, "error": why, "at": time.time()})
            if agent is not None and agent not in down:
                down.add(agent)
                log(f"agent {agent} down: {why}")
            log(f"job {job.id}: retrying ({len(job.attempts)} failed)")
            submit(job)

        for job in jobs:
            submit(job)

        last_check = 0.0
        while pending:
            # Woken by a job ending (the callbacks below), or every 0.5 s
            # for the watchdog and the deadline.
            woken.wait(0.5)
            woken.clear()
            for fut in [f for f in pending if f.done()]:
                job = pending.pop(fut)
                names = fut.vmrpc_names
                if fut.status == "finished":
                    res, outputs = fut.result()
                    job.result, job.outputs = res, outputs
                    job.state = res.get("status", "error")
                    job.error = res.get("error", "")
                    job.attempts.append(
                        {"agent": res["agent"], "error": job.error, "at": res.get("end")}
                    )
                    log(f"job {job.id}: {job.state} on {res['agent']}")
                    continue
                if fut.status != "error":  # cancelled or lost: the head restarted
                    failed_attempt(job, None, f"the engine dropped the job ({fut.status})")
                    continue
                exc = fut.exception()
                if isinstance(exc, AgentDown):
                    failed_attempt(job, exc.agent, exc.message)
                elif type(exc).__name__ == "KilledWorker":
                    failed_attempt(
                        job, names[0] if len(names) == 1 else None, f"its worker died: {exc}"
                    )
                else:
                    job.state = "error"
                    job.error = f"{type(exc).__name__}: {exc}"
                    job.attempts.append(
                        {
                            "agent": names[0] if len(names) == 1 else None,
                            "error": job.error,
                            "at": time.time(),
                        }
                    )
                    log(f"job {job.id}: error: {job.error}")
            now = time.monotonic()
            if pending and now - last_check > 1.0:
                # A job whose every allowed agent went away would wait in
                # the head for ever: take it back and send it elsewhere.
                last_check = now
                alive = {a.name: a for a in self.agents()}
                for n, a in alive.items():
                    if n in by_name and a.state == "up":
                        by_name[n] = a  # maybe a new worker: the agent or the head came back
                for fut, job in list(pending.items()):
                    names = fut.vmrpc_names
                    up = [n for n in names if n in alive and alive[n].state == "up"]
                    if not up:
                        del pending[fut]
                        fut.cancel()
                        for n in names:
                            if n not in down:
                                down.add(n)
                                seen = alive.get(n)
                                why = (seen.error if seen else "") or "its worker left the engine"
                                log(f"agent {n} {seen.state if seen else 'gone'}: {why}")
                        failed_attempt(
                            job,
                            names[0] if len(names) == 1 else None,
                            "its agent went down before the job ended",
                        )
                    elif not any(alive[n].worker in fut.vmrpc_workers for n in up):
                        # Its agents are up under new workers (the head
                        # restarted): send it to them; not a failure.
                        del pending[fut]
                        fut.cancel()
                        log(f"job {job.id}: its agents have new workers; sending it again")
                        submit(job)
            if end_by is not None and now > end_by and pending:
                for fut, job in pending.items():
                    fut.cancel()
                    job.state = "lost"
                    job.error = f"not done within the deadline of {deadline} s"
                    log(f"job {job.id}: lost: {job.error}")
                pending.clear()
        return jobs


def default_address() -> str:
    return os.environ.get("VMRPC_FARM_ADDRESS", engine.DEFAULT_ADDRESS)
