"""Fixtures of the farm tests: one head for the run, the example MLP, and
per test a node serving fresh agents under a tag of its own (test=NAME), so
each test selects only its agents with --where."""

from __future__ import annotations

import glob
import os
import pathlib
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from typing import Callable, Iterator, List, Optional, Sequence

import pytest

from farm_proc import Agent, Head, Mlp, Node, gen_mlp
from vmrpc_farm import Farm, Where


@pytest.fixture(scope="session")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return tmp_path_factory.mktemp("farm")


@pytest.fixture(scope="session")
def head(workdir: pathlib.Path) -> Iterator[Head]:
    h = Head(workdir)
    yield h
    assert h.stop() == 0, "the head did not exit cleanly on SIGTERM"


@pytest.fixture(scope="session")
def mlp(workdir: pathlib.Path) -> Mlp:
    return gen_mlp(workdir)


class Cluster:
    """A node with n agents of its own, tagged test=NAME."""

    def __init__(
        self, workdir: pathlib.Path, head: Head, name: str, n: int, wrap: Sequence[str] = ()
    ) -> None:
        self.name = name
        self.where = [Where.parse(f"test={name}")]
        self.agents: List[Agent] = []
        self.node = None
        try:
            for i in range(n):
                self.agents.append(Agent(workdir / f"cache-{name}-{i}", wrap=wrap))
            self.node = Node(
                workdir, head.address, self.agents, [f"test={name}"], name=f"node-{name}"
            )
            self.farm = Farm(head.address)
            self.wait_up(n)
        except BaseException:
            self.stop()
            raise

    def wait_up(self, n: int) -> None:
        for _ in range(600):
            if len(self.farm.select(self.where)) == n:
                return
            time.sleep(0.1)
        raise AssertionError(f"{n} agents never came up:\n{self.node.log.read_text()}")

    def name_of(self, agent: Agent) -> str:
        return next(a.name for a in self.farm.select(self.where) if a.props["agent"] == agent.url)

    def stop(self) -> None:
        if getattr(self, "farm", None) is not None:
            self.farm.close()
        if self.node is not None:
            assert self.node.stop() == 0, self.node.log.read_text()
        for a in self.agents:
            a.stop()


@pytest.fixture
def cluster(
    workdir: pathlib.Path, head: Head, request: pytest.FixtureRequest
) -> Iterator[Callable[[int], Cluster]]:
    made: List[Cluster] = []

    def make(n: int, wrap: Sequence[str] = ()) -> Cluster:
        c = Cluster(workdir, head, f"{request.node.name}-{len(made)}", n, wrap)
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop()


def overlaps(intervals: List[tuple]) -> List[tuple]:
    """Pairs of (start, end) intervals, sorted by start, that overlap."""
    s = sorted(intervals)
    return [(a, b) for a, b in zip(s, s[1:]) if b[0] < a[1]]


def _pg_bin(name: str) -> Optional[str]:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found[-1] if found else shutil.which(name)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A real PostgreSQL server of its own on a free loopback port, in a
    temporary folder, run as 'nobody' when the tests run as root (postgres
    refuses root); stopped and removed afterwards."""
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if initdb is None or pg_ctl is None:
        pytest.skip("no PostgreSQL server binaries (Debian package postgresql; scripts/install-deps.sh)")
    d = pathlib.Path(tempfile.mkdtemp(prefix="vmrpc-pg-"))
    as_user: List[str] = []
    if os.geteuid() == 0:
        os.chown(d, pwd.getpwnam("nobody").pw_uid, -1)
        as_user = ["runuser", "-u", "nobody", "--"]
    port = _free_port()
    data = d / "data"
    try:
        subprocess.run(
            as_user + [initdb, "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            timeout=120,
        )
        opts = f"-p {port} -k {d} -c listen_addresses=127.0.0.1 -c fsync=off"
        subprocess.run(
            as_user + [pg_ctl, "-D", str(data), "-o", opts, "-l", str(d / "log"), "-w", "start"],
            check=True,
            stdout=subprocess.DEVNULL,
            timeout=120,
        )
    except (subprocess.SubprocessError, OSError):
        shutil.rmtree(d, ignore_errors=True)
        raise
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            as_user + [pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop"],
            stdout=subprocess.DEVNULL,
            timeout=120,
        )
        shutil.rmtree(d, ignore_errors=True)


def chromium() -> Optional[str]:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def new_pg_database(url: str, name: str) -> str:
    """A fresh database on the server of postgres_url; its URL."""
    import sqlalchemy as sa

    eng = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1),
                           isolation_level="AUTOCOMMIT")
    try:
        with eng.connect() as c:
            c.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}"')
            c.exec_driver_sql(f'CREATE DATABASE "{name}"')
    finally:
        eng.dispose()
    return url.rsplit("/", 1)[0] + "/" + name
