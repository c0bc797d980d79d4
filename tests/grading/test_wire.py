"""The format results cross the sandbox's wall in (autograder.wire): plain values and tensors,
bounded, and never more than the blob they come from."""
import json
import math
import struct

import pytest
import torch

from autograder.checks import comparing, travel
from autograder.checks.cases import Outcome
from autograder import wire

MB = 2**20


def blob_of(tree, data=b""):
    header = json.dumps(tree).encode()
    return wire.MAGIC + struct.pack("<Q", len(header)) + header + data


VALUES = [
    None, True, 0, -7, 2**70, 1.5, float("inf"), "text", "", [], (), {},
    [1, (2, "3"), {"a": None}], {(1, 2): 3, "k": [4.0]}, {None: 1, 2.5: 2, False: 3},
    torch.randn(3, 4), torch.randn(2, dtype=torch.float64), torch.randn(5).to(torch.bfloat16), torch.zeros(0, 3),
    torch.tensor([True, False]), torch.arange(6, dtype=torch.int64).reshape(2, 3), torch.randn(2, 2, dtype=torch.complex64),
    torch.randn(4, 4)[:, 1],  # not contiguous
    {"outcomes": [travel.outcome_to_plain(Outcome(outputs=(torch.ones(2),), grads={"input 0": torch.ones(2)}))], "used": [], "replayed": None},
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_plain_values_come_back_as_they_were_sent(value):
    back = wire.decode(wire.encode(value), MB)
    assert type(back) is type(value) and comparing.same_value(back, value)


def test_nan_and_meta_tensors_come_back():
    assert math.isnan(wire.decode(wire.encode(float("nan")), MB))
    back = wire.decode(wire.encode(torch.empty(3, 2, device="meta")), MB)
    assert back.device.type == "meta" and back.shape == (3, 2)


@pytest.mark.parametrize("value", [object(), {1, 2}, b"bytes", torch.randn(2).to_sparse(), {torch.zeros(1): 1}],
                         ids=["object", "set", "bytes", "sparse", "tensor key"])
def test_only_plain_values_are_sent(value):
    with pytest.raises(wire.WireError):
        wire.encode(value)


def test_a_result_over_the_limit_is_not_sent():
    with pytest.raises(wire.WireError, match="more than"):
        wire.encode(torch.zeros(MB), max_bytes=MB)


BAD = {
    "not bytes": "a string",
    "no magic": b"\x80\x02)q\x00.",
    "a pickle memo bomb": b"\x80\x02)q\x00" + b"".join(b"h" + bytes([i]) * 2 + b"\x86q" + bytes([i + 1]) for i in range(100)) + b".",
    "a header longer than the blob": wire.MAGIC + struct.pack("<Q", 2**60) + b"{}",
    "a header that is no JSON": blob_of(None)[:-4] + b"{{{{",
    "nested beyond the limit": wire.MAGIC + struct.pack("<Q", 1_000_000) + b'{"L":[' * 100_000 + b"]}" * 100_000,
    "a value of no kind": blob_of({"X": 1}),
    "two keys": blob_of({"L": [], "U": []}),
    "a dict of no pairs": blob_of({"D": [[1, 2, 3]]}),
    "a list key": blob_of({"D": [[{"L": []}, 1]]}),
    "a tensor key": blob_of({"D": [[{"T": ["float32", [1], 0]}, 1]]}, bytes(4)),
    "an unknown dtype": blob_of({"T": ["object", [1], 0]}, bytes(8)),
    "a shape that lies": blob_of({"T": ["float32", [2**20, 2**20], 0]}, bytes(64)),
    "a negative size": blob_of({"T": ["float32", [-1], 0]}),
    "bytes outside the blob": blob_of({"T": ["float64", [4], 16]}, bytes(32)),
    "a negative offset": blob_of({"T": ["float32", [1], -5]}, bytes(8)),
    "a boolean for a size": blob_of({"T": ["float32", [True], 0]}, bytes(4)),
}


@pytest.mark.parametrize("blob", list(BAD.values()), ids=list(BAD))
def test_anything_else_is_refused(blob):
    with pytest.raises(wire.WireError):
        wire.decode(blob, 8 * MB)


def test_a_blob_over_the_limit_is_refused_unread():
    with pytest.raises(wire.WireError, match="more than"):
        wire.decode(bytes(2 * MB), MB)


def test_what_comes_back_is_no_larger_than_the_blob():
    # a list of the same tensor 1000 times is sent 1000 times: no value is shared, so none is multiplied
    t = torch.randn(100)
    blob = wire.encode([t] * 1000)
    assert len(blob) > 1000 * t.numel() * 4
    back = wire.decode(blob, 8 * MB)
    assert len({id(x) for x in back}) == 1000


def test_a_bool_tensor_holds_bools_only():
    back = wire.decode(blob_of({"T": ["bool", [3], 0]}, bytes([0, 2, 255])), MB)
    assert back.tolist() == [False, True, True]
