"""Agent properties and --where conditions."""

from __future__ import annotations

import pytest

from vmrpc_farm.props import Where, agent_properties, parse_size, parse_tag

INFO = {
    "url": "tcp://10.0.0.7:9090",
    "agent_version": "0.1.0",
    "protocol": (1, 0),
    "devices": [
        {
            "selector": "opencl:0",
            "name": "Mali-G610",
            "vendor": "ARM",
            "platform": "ARM Platform",
            "driver_version": "r41",
            "compute_units": 4,
            "global_mem_bytes": 8 << 30,
            "supports_fp16": True,
            "has_device_timer": True,
        },
        {
            "selector": "cpu",
            "name": "host cpu",
            "vendor": "",
            "platform": "",
            "driver_version": "",
            "compute_units": 8,
            "global_mem_bytes": 0,
            "supports_fp16": False,
            "has_device_timer": False,
        },
    ],
}


def test_properties_from_info_and_tags() -> None:
    p = agent_properties("b1/10.0.0.7:9090", "b1", INFO, {"board": "rk3588"})
    assert p["vendor"] == ["ARM"] and p["device"] == ["opencl:0", "cpu"]
    assert p["memory"] == 8 << 30 and p["compute_units"] == 4 and p["fp16"] == "yes"
    assert p["version"] == "0.1.0" and p["protocol"] == "1.0" and p["board"] == "rk3588"


@pytest.mark.parametrize(
    "cond,want",
    [
        ("vendor=ARM", True),
        ("vendor=arm", True),
        ("vendor=AMD", False),
        ("vendor!=AMD", True),
        ("vendor!=ARM", False),
        ("device_name~=mali", True),
        ("memory>=4G", True),
        ("memory>=16GiB", False),
        ("memory<=8G", True),
        ("board=rk3588", True),
        ("nosuch=x", False),
        ("nosuch!=x", False),
        ("device=cpu", True),
        ("compute_units>=5", False),
    ],
)
def test_where(cond: str, want: bool) -> None:
    p = agent_properties("b1", "b1", INFO, {"board": "rk3588"})
    assert Where.parse(cond).matches(p) is want


@pytest.mark.parametrize("text", ["", "=x", "vendor", "a b=c", "memory>=lots"])
def test_where_errors(text: str) -> None:
    with pytest.raises(ValueError):
        Where.parse(text)


def test_where_error_message() -> None:
    with pytest.raises(ValueError) as e:
        Where.parse("vendor")
    assert str(e.value) == (
        "--where 'vendor': expected KEY=VALUE, KEY!=VALUE, KEY~=TEXT, KEY>=N or KEY<=N"
    )


def test_tags() -> None:
    assert parse_tag("board=rk3588") == ("board", "rk3588")
    with pytest.raises(ValueError) as e:
        parse_tag("vendor=ARM")
    assert str(e.value) == "tag 'vendor=ARM': 'vendor' is a property the node fills from the agent"
    with pytest.raises(ValueError):
        parse_tag("no-equals")
    with pytest.raises(ValueError):
        parse_tag("k=\x01")


def test_sizes() -> None:
    assert parse_size("1K") == 1024 and parse_size("1.5GiB") == 1.5 * (1 << 30)
    assert parse_size("100") == 100
