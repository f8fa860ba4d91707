"""vmrpc_farm: a device farm of vmagents on Dask distributed (docs/farm.md).

    from vmrpc_farm import Farm, JobSpec, Where
    with Farm("127.0.0.1:8786") as farm:
        jobs = farm.dispatch(JobSpec("bench", "mlp.vmx", open("mlp.vmx", "rb").read()),
                             where=[Where.parse("vendor~=arm")], mode="all")

The command line is ``vmrpc-farm`` (vmrpc_farm.cli).
"""

from __future__ import annotations

from .farm import AgentView, Farm, Job
from .jobs import AgentDown, JobSpec
from .props import Where

__version__ = "0.1.0"

__all__ = ["Farm", "Job", "AgentView", "JobSpec", "AgentDown", "Where"]
