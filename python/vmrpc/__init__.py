"""vmrpc: drive models on remote vmagent devices from NumPy.

    import numpy as np, vmrpc
    exe = vmrpc.compile("model.onnx", input_shapes={"x": (1, 3, 224, 224)})
    sess = vmrpc.connect("tcp://board:9090", token_file="token")
    ex = sess.upload(exe)            # or a .vmx path or bytes
    vm = sess.create_vm(ex, device="opencl:0")
    y = vm["main"](x)

See docs/python.md.
"""

from __future__ import annotations

from . import _core, errors
from .compiler import Compiled as Compiled
from .compiler import compile as compile
from .errors import _CLASSES
from .errors import Aborted as Aborted
from .errors import AlreadyExists as AlreadyExists
from .errors import Cancelled as Cancelled
from .errors import DataLoss as DataLoss
from .errors import DeadlineExceeded as DeadlineExceeded
from .errors import FailedPrecondition as FailedPrecondition
from .errors import Internal as Internal
from .errors import InvalidArgument as InvalidArgument
from .errors import NotFound as NotFound
from .errors import OutOfRange as OutOfRange
from .errors import PermissionDenied as PermissionDenied
from .errors import ResourceExhausted as ResourceExhausted
from .errors import Unauthenticated as Unauthenticated
from .errors import Unavailable as Unavailable
from .errors import Unimplemented as Unimplemented
from .errors import Unknown as Unknown
from .errors import VMError as VMError
from .results import CompareResult as CompareResult
from .results import ProfileReport as ProfileReport
from .results import ProfileRow as ProfileRow
from .results import TimeResult as TimeResult
from .session import Executable as Executable
from .session import Function as Function
from .session import Session as Session
from .session import Shape as Shape
from .session import VirtualMachine as VirtualMachine
from .session import connect as connect

__version__ = "0.1.0"

_core._setup(dict(_CLASSES), VMError, Shape)

# Literal, so that type checkers (mypy --strict) see every name.
__all__ = [
    "connect",
    "compile",
    "Compiled",
    "Session",
    "Executable",
    "VirtualMachine",
    "Function",
    "Shape",
    "TimeResult",
    "CompareResult",
    "ProfileReport",
    "ProfileRow",
    "VMError",
    "Cancelled",
    "Unknown",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "Aborted",
    "OutOfRange",
    "Unimplemented",
    "Internal",
    "Unavailable",
    "DataLoss",
    "Unauthenticated",
]
