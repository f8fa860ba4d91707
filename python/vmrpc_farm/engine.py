"""The engine under the farm: Dask distributed (docs/farm.md says why).

- The head is a Dask scheduler (:func:`run_head`).
- A farm node (:func:`run_node`) runs one Dask worker per agent, in one
  process: one thread and one unit of the resource ``vmrpc-agent``, so the
  scheduler hands an agent one job at a time (its lease) and keeps the rest
  waiting. The node publishes each agent's properties and state (up or
  down) in the scheduler's metadata under ``vmrpc-farm/agents/NAME``,
  watches the agent, and takes its worker out while the agent is down.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import signal
import socket
import sys
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

__all__ = [
    "RESOURCE",
    "META",
    "normalize_address",
    "is_loopback",
    "require_tls_beyond_loopback",
    "run_head",
    "run_node",
    "AgentConfig",
]

RESOURCE = "vmrpc-agent"
META = ["vmrpc-farm", "agents"]
DEFAULT_ADDRESS = "tcp://127.0.0.1:8786"

log = logging.getLogger("vmrpc_farm")


@dataclass(frozen=True)
class Tls:
    """Mutual TLS for every connection of the farm (head, nodes, clients):
    a PEM CA bundle, and this process's certificate and key, signed by it."""

    ca: str
    cert: str
    key: str


def make_security(tls: Optional[Tls]) -> Any:
    """The engine's security settings for tls (None: plain TCP)."""
    if tls is None:
        return None
    from distributed.security import Security

    return Security(  # type: ignore[no-untyped-call]
        require_encryption=True,
        tls_ca_file=tls.ca,
        tls_client_cert=tls.cert,
        tls_client_key=tls.key,
        tls_scheduler_cert=tls.cert,
        tls_scheduler_key=tls.key,
        tls_worker_cert=tls.cert,
        tls_worker_key=tls.key,
    )


_TLS_HOW = (
    "pass --tls-ca, --tls-cert and --tls-key (mutual TLS with the farm's CA: see "
    "docs/farm.md, *Setting up N hosts*)"
)


def is_loopback(host: str) -> bool:
    """True for an address only this machine reaches: 127.0.0.0/8, ::1,
    localhost. Wildcards (0.0.0.0, ::, empty) and other names are not."""
    h = host.strip("[]")
    if h.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def require_tls_beyond_loopback(host: str, port: int, tls: bool) -> None:
    """The head refuses to listen beyond loopback without TLS (ValueError;
    the CLI exits 2), as vmagent refuses without a token."""
    if not tls and not is_loopback(host):
        raise ValueError(
            f"refusing to listen on {host}:{port} without TLS: anyone who reaches it could "
            f"run code on the head and on every node (the engine runs what clients "
            f"submit); {_TLS_HOW}, or listen on 127.0.0.1"
        )


def normalize_address(address: str, tls: bool = False) -> str:
    """``HOST:PORT``, ``tcp://HOST:PORT`` or ``tls://HOST:PORT`` -> a Dask
    address (tls:// when tls is on, which it must be for a tls:// head)."""
    a = address.strip()
    if "://" not in a:
        a = ("tls://" if tls else "tcp://") + a
    if a.startswith("tcp://") and tls:
        raise ValueError(
            f"address {address!r}: with --tls-ca/--tls-cert/--tls-key the head's "
            "address is tls://HOST:PORT (or HOST:PORT)"
        )
    if a.startswith("tls://") and not tls:
        raise ValueError(
            f"address {address!r}: a tls:// head needs --tls-ca, --tls-cert and --tls-key"
        )
    scheme, _, rest = a.partition("://")
    host, sep, port = rest.rpartition(":")
    if scheme not in ("tcp", "tls") or not sep or not host or not port.isdigit():
        raise ValueError(
            f"address {address!r}: expected HOST:PORT, tcp://HOST:PORT or tls://HOST:PORT"
        )
    if not 0 <= int(port) <= 65535:
        raise ValueError(f"address {address!r}: port out of range")
    if scheme == "tcp" and not is_loopback(host):
        # A node's workers would listen there in the clear, and a client
        # loads what the head sends: beyond loopback only TLS.
        raise ValueError(
            f"refusing to use the head at {address} without TLS: beyond loopback the "
            f"farm takes only mutual TLS (anyone who reaches a connection of the engine "
            f"could run code on the head, the nodes and this host); {_TLS_HOW}, or use a "
            f"head on 127.0.0.1"
        )
    return a


def route_host(address: str) -> str:
    """The local address this host reaches the head from: where its workers
    listen (the head and other workers connect to them), rather than on
    every interface. 127.0.0.1 for a head on loopback."""
    hostport = address.partition("://")[2]
    host, _, port = hostport.rpartition(":")
    host = host.strip("[]")
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, int(port)))  # UDP: no packet is sent
        return str(s.getsockname()[0])


def _quiet_engine() -> None:
    # Dask logs every worker that comes and goes at INFO; the farm says
    # what matters itself.
    for name in ("distributed", "tornado"):
        logging.getLogger(name).setLevel(logging.WARNING)


def engine_config() -> Dict[str, Any]:
    """Dask settings for every farm process: no spilling or memory pauses
    (jobs hold little), a job whose worker vanished is handed to another at
    most twice, and no dashboard."""
    return {
        "distributed.scheduler.allowed-failures": 2,
        "distributed.worker.memory.target": False,
        "distributed.worker.memory.spill": False,
        "distributed.worker.memory.pause": False,
        "distributed.worker.memory.terminate": False,
        "distributed.scheduler.work-stealing": True,
        "distributed.admin.tick.limit": "10s",
        # The HTTP endpoint beside the scheduler is plain HTTP, TLS or not:
        # health and metrics only, no pages listing workers and tasks.
        "distributed.scheduler.http.routes": [
            "distributed.http.health",
            "distributed.http.scheduler.prometheus",
        ],
    }


def _stop_on_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)


async def _head(host: str, port: int, lifetime: Optional[float], tls: Optional[Tls]) -> int:
    import dask
    from distributed import Scheduler

    _quiet_engine()
    # Dask always serves HTTP (health, metrics) beside the scheduler: on the
    # scheduler's own host and a free port, never on every interface.
    with dask.config.set(engine_config()):
        async with Scheduler(
            host=host,
            port=port,
            dashboard=False,
            protocol="tls" if tls else "tcp",
            security=make_security(tls),
            dashboard_address=f"{host}:0",
        ) as s:
            print(f"vmrpc-farm head listening on {s.address}", flush=True)
            stop = asyncio.Event()
            _stop_on_signals(stop)
            try:
                await asyncio.wait_for(stop.wait(), lifetime)
            except asyncio.TimeoutError:
                print(f"vmrpc-farm head: lifetime of {lifetime} s over, stopping", flush=True)
    return 0


def run_head(
    host: str, port: int, lifetime: Optional[float] = None, tls: Optional[Tls] = None
) -> int:
    require_tls_beyond_loopback(host, port, tls is not None)
    return asyncio.run(_head(host, port, lifetime, tls))


@dataclass
class AgentConfig:
    """An agent of the node: its address, its name in the farm, and where
    this process dials it (the keeper's socket when it has a token; see
    vmrpc_farm.keeper). Never the token."""

    url: str
    name: str
    dial: Optional[str] = None


class _AgentKeeper:
    """Keeps one agent's worker in the engine while the agent answers."""

    def __init__(
        self,
        client: Any,
        address: str,
        cfg: AgentConfig,
        tags: Dict[str, str],
        interval: float,
        tls: Optional[Tls],
    ) -> None:
        from . import jobs

        self.client = client
        self.address = address
        self.cfg = cfg
        self.tags = tags
        self.interval = interval
        self.worker: Any = None
        self.slot = jobs.AgentSlot(cfg.name, cfg.url, cfg.dial, {})
        self.state = "starting"
        self.error = ""
        self.listen_host = route_host(address)
        self.tls = tls

    async def _publish(self, state: str, error: str = "") -> None:
        self.state, self.error = state, error
        entry = {
            "state": state,
            "since": time.time(),
            "props": self.slot.props,
            "worker": self.worker.address if self.worker is not None else None,
            "error": error,
        }
        await self.client.set_metadata(META + [self.cfg.name], entry)

    def _probe(self) -> Any:
        from vmrpc.errors import VMError

        try:
            with self.slot.connect(connect_timeout=3, timeout=5) as s:
                return dict(s.info)
        except VMError as e:
            return str(e)

    async def _up(self, info: Dict[str, Any]) -> None:
        from distributed import Worker

        from . import jobs
        from .props import agent_properties

        # info["url"] is where this process dialled (maybe the keeper's socket).
        info = dict(info, url=self.cfg.url)
        self.slot = jobs.AgentSlot(
            self.cfg.name,
            self.cfg.url,
            self.cfg.dial,
            agent_properties(self.cfg.name, socket.gethostname(), info, self.tags),
        )
        jobs.register_slot(self.slot)
        self.worker = await Worker(
            self.address,
            name=self.cfg.name,
            nthreads=1,
            resources={RESOURCE: 1},
            memory_limit=0,
            dashboard=False,
            host=self.listen_host,
            protocol="tls" if self.tls else "tcp",
            security=make_security(self.tls),
            dashboard_address=f"{self.listen_host}:0",
            death_timeout=60,
        )
        await self._publish("up")
        print(
            f"vmrpc-farm serve: agent {self.cfg.name} up ({self.cfg.url}) as {self.worker.address}",
            flush=True,
        )

    async def _down(self, why: str) -> None:
        w, self.worker = self.worker, None
        if w is not None:
            try:
                await asyncio.wait_for(w.close(timeout=5, executor_wait=False), 15)
            except Exception as e:  # the worker is gone either way
                log.debug("closing worker: %s", e)
        await self._publish("down", why)
        print(f"vmrpc-farm serve: agent {self.cfg.name} down: {why}", flush=True)

    async def keep(self) -> None:
        loop = asyncio.get_running_loop()
        last_error = None
        while True:
            if self.worker is not None and self.slot.down.is_set():
                await self._down(self.slot.down_reason)
            got = await loop.run_in_executor(None, self._probe)
            if isinstance(got, dict):
                if self.worker is None:
                    await self._up(got)
            elif self.worker is not None:
                await self._down(got)
            elif got != last_error and self.state != "down":
                await self._publish("down", got)
                print(f"vmrpc-farm serve: agent {self.cfg.name} not answering: {got}", flush=True)
            last_error = got if not isinstance(got, dict) else None
            await self._check_engine()
            # Wake early when a job saw the agent die.
            for _ in range(max(1, int(self.interval / 0.1))):
                if self.worker is not None and self.slot.down.is_set():
                    break
                await asyncio.sleep(0.1)

    async def _check_engine(self) -> None:
        """After the head restarted, or the engine closed the worker: a new
        worker, and the agent published again (the new head knows nothing)."""
        from distributed.core import Status

        if self.worker is not None and self.worker.status != Status.running:
            log.debug("worker of %s is %s: replacing it", self.cfg.name, self.worker.status)
            w, self.worker = self.worker, None
            try:
                await asyncio.wait_for(w.close(timeout=5, executor_wait=False), 15)
            except Exception as e:  # it is closed or closing already
                log.debug("closing worker: %s", e)
            return  # the next round starts a new one if the agent answers
        if self.state == "starting":
            return
        try:
            entry = await asyncio.wait_for(
                self.client.get_metadata(META + [self.cfg.name], default=None), 5
            )
        except Exception as e:  # the head is away: the node's main loop times out on it
            log.debug("reading metadata: %s", e)
            return
        mine = self.worker.address if self.worker is not None else None
        if (
            not isinstance(entry, dict)
            or entry.get("worker") != mine
            or (entry.get("state") != self.state)
        ):
            await self._publish(self.state, self.error)
            print(
                f"vmrpc-farm serve: agent {self.cfg.name} published again ({self.state})",
                flush=True,
            )

    async def close(self) -> None:
        if self.worker is not None:
            w, self.worker = self.worker, None
            await w.close(timeout=5, executor_wait=False)
        try:
            await self.client.set_metadata(
                META + [self.cfg.name],
                {
                    "state": "gone",
                    "since": time.time(),
                    "props": self.slot.props,
                    "worker": None,
                    "error": "its node stopped",
                },
            )
        except Exception as e:  # the head may be gone already
            log.debug("publishing gone: %s", e)


async def _node(
    address: str,
    agents: Sequence[AgentConfig],
    tags: Dict[str, str],
    interval: float,
    head_timeout: float,
    lifetime: Optional[float],
    tls: Optional[Tls],
) -> int:
    import dask
    from distributed import Client

    _quiet_engine()
    with dask.config.set(engine_config()):
        try:
            client = await Client(  # type: ignore[no-untyped-call]
                address,
                asynchronous=True,
                timeout=head_timeout,
                name="vmrpc-farm-node",
                security=make_security(tls),
            )
        except (OSError, asyncio.TimeoutError) as e:
            print(
                f"vmrpc-farm serve: cannot reach the head at {address}: {e}; start it with "
                "`vmrpc-farm head` and check --address",
                file=sys.stderr,
                flush=True,
            )
            return 3
        keepers = [_AgentKeeper(client, address, a, tags, interval, tls) for a in agents]
        tasks = [asyncio.create_task(k.keep()) for k in keepers]
        stop = asyncio.Event()
        _stop_on_signals(stop)
        rc = 0
        started = time.monotonic()
        lost_since: Optional[float] = None
        try:
            while not stop.is_set():
                for t in tasks:
                    if t.done() and t.exception() is not None:
                        raise t.exception()  # type: ignore[misc]
                if lifetime is not None and time.monotonic() - started > lifetime:
                    print(f"vmrpc-farm serve: lifetime of {lifetime} s over, stopping", flush=True)
                    break
                if client.status != "running":
                    lost_since = lost_since or time.monotonic()
                    if time.monotonic() - lost_since > head_timeout:
                        print(
                            f"vmrpc-farm serve: lost the head at {address} for {head_timeout} s, "
                            "stopping",
                            file=sys.stderr,
                            flush=True,
                        )
                        rc = 3
                        break
                else:
                    lost_since = None
                try:
                    await asyncio.wait_for(stop.wait(), 0.5)
                except asyncio.TimeoutError:
                    pass
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await asyncio.gather(*(k.close() for k in keepers), return_exceptions=True)
            await client.close()
        return rc


def run_node(
    address: str,
    agents: Sequence[AgentConfig],
    tags: Dict[str, str],
    interval: float = 2.0,
    head_timeout: float = 30.0,
    lifetime: Optional[float] = None,
    tls: Optional[Tls] = None,
) -> int:
    return asyncio.run(_node(address, agents, tags, interval, head_timeout, lifetime, tls))


def connect(address: str, timeout: float = 10.0, tls: Optional[Tls] = None) -> Any:
    """A synchronous Dask client of the head at address."""
    import dask
    from distributed import Client

    _quiet_engine()
    dask.config.set(engine_config())
    return Client(  # type: ignore[no-untyped-call]
        address, timeout=timeout, name="vmrpc-farm", security=make_security(tls)
    )


def scheduler_view(dask_scheduler: Any) -> Dict[str, Any]:
    """Runs on the scheduler (``Client.run_on_scheduler``): which job each
    worker holds and which wait, by worker address."""
    held: Dict[str, List[str]] = {}
    waiting: List[Dict[str, Any]] = []
    for ts in dask_scheduler.tasks.values():
        key = str(ts.key)
        if not key.startswith("vmrpc-"):
            continue
        if ts.state == "processing" and ts.processing_on is not None:
            held.setdefault(ts.processing_on.address, []).append(key)
        elif ts.state in ("no-worker", "queued", "waiting", "released"):
            waiting.append({"key": key, "state": ts.state})
    return {"held": held, "waiting": waiting}


def worker_view(dask_worker: Any) -> Dict[str, Any]:
    """Runs on each worker (``Client.run``): the job running and those
    waiting for the agent's lease there."""
    st = dask_worker.state
    return {
        "executing": sorted(str(t.key) for t in st.executing),
        "waiting": sorted(str(t.key) for t in st.constrained)
        + sorted(str(t.key) for t in st.ready),
    }
