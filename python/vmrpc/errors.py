"""Exceptions: one class per status code of the agent and the library.

Every failure reported by libvmclient or the agent raises a :class:`VMError`
subclass named after its gRPC-style code (``NotFound``, ``InvalidArgument``,
...), carrying the code and the message, which says what to do next.
"""

from __future__ import annotations

from typing import Dict, Type

__all__ = [
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
    "error_class",
]


class VMError(Exception):
    """A failed call: ``code`` (int), ``code_name`` ("NOT_FOUND") and ``message``."""

    code: int = 2
    code_name: str = "UNKNOWN"

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None and code != type(self).code:
            self.code = code
            self.code_name = _NAMES.get(code, "UNKNOWN_CODE")

    def __str__(self) -> str:
        return f"{self.code_name}: {self.message}"


class Cancelled(VMError):
    code, code_name = 1, "CANCELLED"


class Unknown(VMError):
    code, code_name = 2, "UNKNOWN"


class InvalidArgument(VMError, ValueError):
    code, code_name = 3, "INVALID_ARGUMENT"


class DeadlineExceeded(VMError, TimeoutError):
    code, code_name = 4, "DEADLINE_EXCEEDED"


class NotFound(VMError, LookupError):
    code, code_name = 5, "NOT_FOUND"


class AlreadyExists(VMError):
    code, code_name = 6, "ALREADY_EXISTS"


class PermissionDenied(VMError):
    code, code_name = 7, "PERMISSION_DENIED"


class ResourceExhausted(VMError):
    code, code_name = 8, "RESOURCE_EXHAUSTED"


class FailedPrecondition(VMError):
    code, code_name = 9, "FAILED_PRECONDITION"


class Aborted(VMError):
    code, code_name = 10, "ABORTED"


class OutOfRange(VMError):
    code, code_name = 11, "OUT_OF_RANGE"


class Unimplemented(VMError):
    code, code_name = 12, "UNIMPLEMENTED"


class Internal(VMError):
    code, code_name = 13, "INTERNAL"


class Unavailable(VMError):
    code, code_name = 14, "UNAVAILABLE"


class DataLoss(VMError):
    code, code_name = 15, "DATA_LOSS"


class Unauthenticated(VMError):
    code, code_name = 16, "UNAUTHENTICATED"


_CLASSES: Dict[int, Type[VMError]] = {
    c.code: c
    for c in (
        Cancelled,
        Unknown,
        InvalidArgument,
        DeadlineExceeded,
        NotFound,
        AlreadyExists,
        PermissionDenied,
        ResourceExhausted,
        FailedPrecondition,
        Aborted,
        OutOfRange,
        Unimplemented,
        Internal,
        Unavailable,
        DataLoss,
        Unauthenticated,
    )
}
_NAMES: Dict[int, str] = {c.code: c.code_name for c in _CLASSES.values()}


def error_class(code: int) -> Type[VMError]:
    """The exception class of a status code (VMError for unknown codes)."""
    return _CLASSES.get(code, VMError)
