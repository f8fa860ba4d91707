"""Fixtures of the farm tests: one head for the run, the example MLP, and
per test a node serving fresh agents under a tag of its own (test=NAME), so
each test selects only its agents with --where."""

from __future__ import annotations

import pathlib
import time
from typing import Callable, Iterator, List

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

    def __init__(self, workdir: pathlib.Path, head: Head, name: str, n: int) -> None:
        self.name = name
        self.where = [Where.parse(f"test={name}")]
        self.agents: List[Agent] = []
        self.node = None
        try:
            for i in range(n):
                self.agents.append(Agent(workdir / f"cache-{name}-{i}"))
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

    def make(n: int) -> Cluster:
        c = Cluster(workdir, head, f"{request.node.name}-{len(made)}", n)
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop()


def overlaps(intervals: List[tuple]) -> List[tuple]:
    """Pairs of (start, end) intervals, sorted by start, that overlap."""
    s = sorted(intervals)
    return [(a, b) for a, b in zip(s, s[1:]) if b[0] < a[1]]
