"""What a farm node says about each agent, and how ``--where`` selects agents.

An agent's properties are a flat dict built from what the agent told at
connect time (``vmrpc.Session.info``) plus the node's tags: plain values
(``agent``, ``version``, ``memory``, ...) and lists, one entry per device
(``device``, ``vendor``, ``device_name``, ``platform``). A ``--where``
condition on a list holds when it holds for any entry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Sequence, Tuple, Union

__all__ = ["agent_properties", "parse_tag", "Where", "parse_size"]

Value = Union[str, int, List[str]]

# Keys the node computes; tags may not reuse them (a tag vendor=ARM on an
# AMD board would make --where lie).
RESERVED = (
    "name",
    "agent",
    "host",
    "version",
    "protocol",
    "devices",
    "device",
    "vendor",
    "device_name",
    "platform",
    "driver",
    "memory",
    "compute_units",
    "fp16",
    "device_timer",
)

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")


def parse_tag(text: str) -> Tuple[str, str]:
    """``KEY=VALUE`` -> (KEY, VALUE); ValueError saying what is wrong."""
    key, sep, value = text.partition("=")
    if not sep or not _KEY.match(key):
        raise ValueError(
            f"tag {text!r}: expected KEY=VALUE with KEY of letters, digits, '_', '.', '-'"
        )
    if key in RESERVED:
        raise ValueError(f"tag {text!r}: {key!r} is a property the node fills from the agent")
    if len(value) > 256 or any(ord(c) < 32 for c in value):
        raise ValueError(f"tag {text!r}: the value must be printable and at most 256 characters")
    return key, value


def agent_properties(
    name: str, host: str, info: Mapping[str, Any], tags: Mapping[str, str]
) -> Dict[str, Value]:
    """The properties advertised for one agent (see the module's doc)."""
    devs: Sequence[Mapping[str, Any]] = info.get("devices") or []
    opencl = [d for d in devs if str(d.get("selector", "")).startswith("opencl")]
    proto = info.get("protocol") or (0, 0)
    props: Dict[str, Value] = {
        "name": name,
        "agent": str(info.get("url", "")),
        "host": host,
        "version": str(info.get("agent_version", "")),
        "protocol": f"{proto[0]}.{proto[1]}",
        "devices": len(devs),
        "device": [str(d.get("selector", "")) for d in devs],
        "vendor": [str(d.get("vendor", "")) for d in opencl],
        "device_name": [str(d.get("name", "")) for d in opencl],
        "platform": [str(d.get("platform", "")) for d in opencl],
        "driver": [str(d.get("driver_version", "")) for d in opencl],
        "memory": max([int(d.get("global_mem_bytes", 0)) for d in opencl] or [0]),
        "compute_units": max([int(d.get("compute_units", 0)) for d in opencl] or [0]),
        "fp16": "yes" if any(d.get("supports_fp16") for d in opencl) else "no",
        "device_timer": "yes" if any(d.get("has_device_timer") for d in opencl) else "no",
    }
    for k, v in tags.items():
        props[k] = v
    return props


_SIZE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([KMGT]?)(i?B)?$", re.IGNORECASE)


def parse_size(text: str) -> float:
    """``4G``, ``512M``, ``1.5GiB``, ``100`` -> a number (K = 1024)."""
    m = _SIZE.match(text.strip())
    if not m:
        raise ValueError(f"{text!r} is not a number (suffixes K, M, G, T allowed)")
    scale = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[m.group(2).upper()]
    return float(m.group(1)) * scale


_OPS = ("!=", "~=", ">=", "<=", "=")


@dataclass(frozen=True)
class Where:
    """One condition: ``KEY=VALUE`` (equal, ignoring case), ``KEY!=VALUE``,
    ``KEY~=TEXT`` (contains, ignoring case), ``KEY>=N`` / ``KEY<=N``
    (numbers, with K/M/G/T suffixes). A key the agent lacks never matches
    (``!=`` included)."""

    key: str
    op: str
    value: str

    @staticmethod
    def parse(text: str) -> "Where":
        for op in _OPS:
            key, sep, value = text.partition(op)
            if sep and key and "=" not in key and "<" not in key and ">" not in key:
                key = key.strip()
                if not _KEY.match(key):
                    break
                if op in (">=", "<="):
                    parse_size(value)  # raises with a message
                return Where(key, op, value.strip())
        raise ValueError(
            f"--where {text!r}: expected KEY=VALUE, KEY!=VALUE, KEY~=TEXT, KEY>=N or KEY<=N"
        )

    def _one(self, have: Union[str, int]) -> bool:
        if self.op in (">=", "<="):
            try:
                n = float(have) if isinstance(have, int) else parse_size(have)
            except ValueError:
                return False
            want = parse_size(self.value)
            return n >= want if self.op == ">=" else n <= want
        h, w = str(have).casefold(), self.value.casefold()
        if self.op == "~=":
            return w in h
        return h == w

    def matches(self, props: Mapping[str, Value]) -> bool:
        if self.key not in props:
            return False
        have = props[self.key]
        values = have if isinstance(have, list) else [have]
        if self.op == "!=":
            return not any(Where(self.key, "=", self.value)._one(v) for v in values)
        return any(self._one(v) for v in values)

    def __str__(self) -> str:
        return f"{self.key}{self.op}{self.value}"


def matches_all(conds: Sequence[Where], props: Mapping[str, Value]) -> bool:
    return all(c.matches(props) for c in conds)
