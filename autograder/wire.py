"""The format results cross the grading sandbox's wall in: plain values and tensors, nothing else.

    blob = MAGIC, the header's length (8 bytes), a JSON header, the tensors' bytes

The header is one value: null, true, false, a number, a string, or an object of one key
{"L": [...]} a list, {"U": [...]} a tuple, {"D": [[key, value], ...]} a dict whose keys are
plain values or tuples of them, {"T": [dtype, shape, offset]} a tensor whose bytes start at
`offset`. There are no references between values, so what a blob decodes to is never larger
than the blob (no pickle, no shared subtrees to expand), and decoding takes time linear in its
size. `decode` is given the blob's whole size limit and refuses anything else with WireError.
"""
from __future__ import annotations

import json
import math
import struct

import torch

MAGIC = b"seqcourse-wire-1\n"
MAX_DEPTH = 64
DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128,
    torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool)}


SCALARS = frozenset({int, float, str, bool, type(None)})  # exactly these types: a subclass goes item by item


class WireError(ValueError):
    pass


def only_scalars(items):
    """Whether a list's or a tuple's items are all ints, floats, strs, bools or None: read without a Python call per
    item (notebook 09's calls pass lists of ids, tens of thousands of times)."""
    return set(map(type, items)) <= SCALARS


def encode(value, max_bytes=None):
    """The blob of `value` (None, bool, int, float, str, list, tuple, dict, torch.Tensor, nested)."""
    chunks, offset = [], [0]

    def node(x, depth):
        if depth > MAX_DEPTH:
            raise WireError(f"nested more than {MAX_DEPTH} deep")
        if x is None or isinstance(x, (bool, str)):
            return x
        if isinstance(x, (int, float)):
            return float(x) if isinstance(x, float) else int(x)
        if isinstance(x, torch.Tensor):
            return {"T": tensor(x)}
        if isinstance(x, (tuple, list)):  # a scalar of exactly its type is its own node
            items = list(x) if depth < MAX_DEPTH and only_scalars(x) else [node(v, depth + 1) for v in x]
            return {"U" if isinstance(x, tuple) else "L": items}
        if isinstance(x, dict):
            if not all(_hashable(k) for k in x):
                raise WireError("a dict key that is not a plain value")
            return {"D": [[node(k, depth + 1), node(v, depth + 1)] for k, v in x.items()]}
        raise WireError(f"a {type(x).__name__} is not a plain value")

    def tensor(t):
        if t.layout != torch.strided or str(t.dtype).removeprefix("torch.") not in DTYPES:
            raise WireError(f"a tensor of layout {t.layout} and dtype {t.dtype} cannot be sent")
        name = str(t.dtype).removeprefix("torch.")
        if t.device.type == "meta":  # no values, only its kind
            return [name, list(t.shape), -1]
        data = t.detach().cpu().contiguous().reshape(-1)
        raw = data.view(torch.uint8).numpy().tobytes() if data.numel() else b""
        chunks.append(raw)
        start, offset[0] = offset[0], offset[0] + len(raw)
        return [name, list(t.shape), start]

    header = json.dumps(node(value, 0), separators=(",", ":")).encode()
    blob = MAGIC + struct.pack("<Q", len(header)) + header + b"".join(chunks)
    if max_bytes is not None and len(blob) > max_bytes:
        raise WireError(f"{len(blob) / 2**20:.1f} MB, more than the {max_bytes / 2**20:.1f} MB allowed")
    return blob


def decode(blob, max_bytes):
    """The value a blob holds, or WireError: never larger than the blob, in time linear in its size."""
    if not isinstance(blob, (bytes, bytearray)):
        raise WireError("not bytes")
    if len(blob) > max_bytes:
        raise WireError(f"{len(blob) / 2**20:.1f} MB, more than the {max_bytes / 2**20:.1f} MB allowed")
    if not blob.startswith(MAGIC) or len(blob) < len(MAGIC) + 8:
        raise WireError("not a result of the course's checks")
    (n,) = struct.unpack_from("<Q", blob, len(MAGIC))
    start = len(MAGIC) + 8
    if n > len(blob) - start:
        raise WireError("truncated")
    try:
        tree = json.loads(bytes(blob[start:start + n]))
    except (ValueError, RecursionError) as e:
        raise WireError(f"its header is not JSON ({type(e).__name__})") from None
    data = memoryview(blob)[start + n:]
    return _value(tree, data, 0)


def _value(x, data, depth):
    if depth > MAX_DEPTH:
        raise WireError(f"nested more than {MAX_DEPTH} deep")
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    if not (isinstance(x, dict) and len(x) == 1):
        raise WireError("a value of no known kind")
    (kind, body), = x.items()
    if kind in ("L", "U", "D") and not isinstance(body, list):
        raise WireError(f"{kind}: not a list")
    if kind in ("L", "U"):  # JSON's scalars are their own values
        items = body if depth < MAX_DEPTH and only_scalars(body) else [_value(v, data, depth + 1) for v in body]
        return items if kind == "L" else tuple(items)
    if kind == "D":
        out = {}
        for pair in body:
            if not (isinstance(pair, list) and len(pair) == 2):
                raise WireError("D: not a list of pairs")
            key = _value(pair[0], data, depth + 1)
            if not _hashable(key):
                raise WireError("D: a key that is not a plain value")
            out[key] = _value(pair[1], data, depth + 1)
        return out
    if kind == "T":
        return _tensor(body, data)
    raise WireError(f"a value of unknown kind {kind!r}")


def _hashable(key, depth=0):
    """A dict key must be a plain value, or a tuple of them (as keys of pairs are)."""
    if key is None or isinstance(key, (bool, int, float, str)):
        return True
    return isinstance(key, tuple) and depth < MAX_DEPTH and all(_hashable(k, depth + 1) for k in key)


def _tensor(body, data):
    if not (isinstance(body, list) and len(body) == 3 and body[0] in DTYPES and isinstance(body[1], list)
            and isinstance(body[2], int) and not isinstance(body[2], bool)):
        raise WireError("T: not [dtype, shape, offset]")
    name, shape, offset = body
    if len(shape) > 16 or not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s <= 2**31 for s in shape):
        raise WireError("T: a shape of no more than 16 sizes of 0 to 2**31")
    dtype = DTYPES[name]
    numel = math.prod(shape)
    if offset == -1:  # a meta tensor has no values
        return torch.empty(shape, dtype=dtype, device="meta")
    nbytes = numel * torch.empty((), dtype=dtype).element_size()
    if offset < 0 or offset + nbytes > len(data):
        raise WireError("T: its bytes lie outside the blob")
    if numel == 0:
        return torch.empty(shape, dtype=dtype)
    raw = torch.frombuffer(bytearray(data[offset:offset + nbytes]), dtype=torch.uint8)
    return (raw != 0 if dtype == torch.bool else raw.view(dtype)).reshape(shape)
