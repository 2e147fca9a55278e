"""Kernarg decoding by name from KERNEL_SYMBOL layouts: the driver's form and the code-object
form, typed and untyped values, hidden args, and layouts that do not fit."""

from __future__ import annotations

import struct

import pytest

from amdgpu.errors import AmdgpuError
from tools.packet_trace.model import decode_kernargs, parse_layout, parse_time

pytestmark = pytest.mark.generic


def test_code_object_form_with_types_and_hidden_args():
    layout = [
        {"name": "out", "offset": 0, "size": 8, "value_kind": "global_buffer"},
        {"name": "scale", "offset": 8, "size": 8, "value_kind": "by_value",
         "type_name": "double"},
        {"name": "count", "offset": 16, "size": 4, "value_kind": "by_value", "type_name": "int"},
        {"offset": 24, "size": 4, "value_kind": "hidden_block_count_x"},
        {"offset": 32, "size": 8, "value_kind": "hidden_queue_ptr"},
    ]
    data = struct.pack("<QdiiIIQ", 0xABCD0000, 0.25, -3, 0, 7, 0, 0x7F0012345678)
    values = {v.spec.name: v for v in decode_kernargs(parse_layout(layout), data)}
    assert values["out"].text == "0xabcd0000" and values["out"].spec.kind == "buffer"
    assert values["scale"].value == 0.25 and values["count"].value == -3
    assert values["hidden_block_count_x"].hidden and values["hidden_block_count_x"].value == 7
    assert values["hidden_queue_ptr"].text == "0x7f0012345678"


def test_driver_form_untyped_float_gets_a_hint_and_short_data_is_cut():
    layout = {"args": [{"name": "a", "kind": "value", "offset": 0, "size": 4},
                       {"name": "n", "kind": "value", "offset": 4, "size": 4},
                       {"name": "blob", "kind": "bytes", "offset": 8, "size": 3},
                       {"name": "past_end", "kind": "value", "offset": 64, "size": 4}]}
    data = struct.pack("<fI", 2.0, 1024) + b"\x01\x02\x03"
    values = decode_kernargs(parse_layout(layout), data)
    assert [v.spec.name for v in values] == ["a", "n", "blob"]
    assert values[0].text == "1073741824 (f32 2)" and values[1].text == "1024"
    assert values[2].text == "010203"


def test_layouts_that_do_not_fit_are_skipped_not_fatal():
    assert parse_layout(None) == [] and parse_layout("nonsense") == []
    specs = parse_layout([{"name": "x"}, 3, {"name": "y", "offset": 0, "size": 8,
                                              "kind": "strange"}])
    assert [(s.name, s.kind) for s in specs] == [("y", "bytes")]


def test_time_bounds():
    assert parse_time("123456789").relative is False
    assert parse_time("25us").resolve(1000) == 26000
    assert parse_time("+1.5ms").ns == 1_500_000
    with pytest.raises(AmdgpuError, match="cannot read the time"):
        parse_time("soon")
