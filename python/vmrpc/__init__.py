"""vmrpc: drive models on remote vmagent devices from NumPy.

    import numpy as np, vmrpc
    sess = vmrpc.connect("tcp://board:9090", token_file="token")
    ex = sess.upload("model.vmx")
    vm = sess.create_vm(ex, device="opencl:0")
    y = vm["main"](x)

See docs/python.md. Producing ``.vmx`` files from ONNX models (a future
``vmrpc.compile``) belongs to the importer, which is not part of this
package yet: use the project's command-line tools for now.
"""

from __future__ import annotations

from . import _core, errors
from .errors import (
    Aborted,
    AlreadyExists,
    Cancelled,
    DataLoss,
    DeadlineExceeded,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NotFound,
    OutOfRange,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
    Unimplemented,
    Unknown,
    VMError,
    _CLASSES,
)
from .results import ProfileReport, ProfileRow, TimeResult
from .session import Executable, Function, Session, Shape, VirtualMachine, connect

__version__ = "0.1.0"

_core._setup(dict(_CLASSES), VMError, Shape)

__all__ = [
    "connect",
    "Session",
    "Executable",
    "VirtualMachine",
    "Function",
    "Shape",
    "TimeResult",
    "ProfileReport",
    "ProfileRow",
    *[name for name in errors.__all__ if name != "error_class"],
]
