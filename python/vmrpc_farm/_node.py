"""The engine process of ``vmrpc-farm serve`` (started by vmrpc_farm.keeper
with a JSON description of the node as its one argument; no token)."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys

from . import engine


def main(argv: list) -> int:
    conf = json.loads(argv[1])
    # Stop with the keeper: the agents' sockets go with it.
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != conf["parent"]:
        print("vmrpc-farm serve: the node's keeper is gone; stopping", file=sys.stderr)
        return 3
    agents = [engine.AgentConfig(a["url"], a["name"], a["dial"]) for a in conf["agents"]]
    tls = engine.Tls(*conf["tls"]) if conf["tls"] else None
    return engine.run_node(
        conf["address"],
        agents,
        dict(conf["tags"]),
        conf["interval"],
        conf["head_timeout"],
        conf["lifetime"],
        tls,
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv))
