"""Writes the seed corpus of FuzzReadHeader (models/safetensors_fuzz_test.go).

Valid seeds (ok-*) are written by the reference implementation (the safetensors
package), so the Go reader is checked against what the real writer produces; invalid
seeds (bad-<what>-*) are hand-made, one defect each. TestFuzzSeeds asserts that every
ok-* seed parses and every bad-* seed fails with the sentinel its name gives.

Run: .venv/bin/python models/testdata/make_fuzz_seeds.py
"""

import json
import os
import struct

import numpy as np
from safetensors.numpy import save

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz-seeds")


def put(name, data):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)


def raw(header, data=b"", length=None):
    """A file from a header object (or raw header bytes) and a data section."""
    h = header if isinstance(header, bytes) else json.dumps(header).encode()
    n = len(h) if length is None else length
    return struct.pack("<Q", n) + h + data


def main():
    os.makedirs(HERE, exist_ok=True)
    for f in os.listdir(HERE):
        os.remove(os.path.join(HERE, f))
    # Valid, from the reference writer.
    put("ok-empty.safetensors", save({}))
    put("ok-meta.safetensors", save({}, metadata={"format": "pt", "source": "x<&>y"}))
    put("ok-f32.safetensors", save({"w": np.arange(6, dtype=np.float32).reshape(2, 3)}))
    put(
        "ok-mixed.safetensors",
        save(
            {
                "a.weight": np.ones((3, 2), dtype=np.float16),
                "b.bias": np.zeros((5,), dtype=np.int64),
                "c": np.array(7, dtype=np.int32),
                "d": np.zeros((0, 4), dtype=np.float32),
                "e": np.array([True, False]),
            },
            metadata={"format": "pt"},
        ),
    )
    # Valid, hand-made: dtypes numpy lacks, unsorted entries, unknown field, whitespace.
    put(
        "ok-f8-bf16.safetensors",
        raw(
            {
                "z": {"dtype": "BF16", "shape": [2], "data_offsets": [2, 6]},
                "y": {"dtype": "F8_E4M3", "shape": [2], "data_offsets": [0, 2]},
                "x": {"dtype": "F8_E5M2", "shape": [1, 1], "data_offsets": [6, 7], "extra": [1, {"a": 2}]},
            },
            b"\x00" * 7,
        ),
    )
    put("ok-spaces.safetensors", raw(b'  {"t": {"dtype":"U8","shape":[3],"data_offsets":[0,3]}}    ', b"abc"))

    t = {"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}
    put("bad-truncated-short.safetensors", b"\x10\x00\x00")
    put("bad-truncated-header.safetensors", raw(t, b"\x00" * 8, length=4096))
    put("bad-truncated-data.safetensors", raw(t, b"\x00" * 5))
    put("bad-toolarge.safetensors", struct.pack("<Q", 100_000_001) + b"{}")
    put("bad-toolarge-huge.safetensors", b"\xff" * 8 + b"{}")
    put("bad-invalid-json.safetensors", raw(b'{"t": {"dtype": "F32",', b""))
    put("bad-invalid-array.safetensors", raw(b"[1, 2]"))
    put("bad-invalid-utf8.safetensors", raw(b'{"\xff": {}}'))
    put("bad-invalid-dupkey.safetensors", raw(b'{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                                                 b'"t":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', b"ab"))
    put("bad-invalid-dupfield.safetensors", raw(b'{"t":{"dtype":"U8","dtype":"I8","shape":[1],"data_offsets":[0,1]}}', b"a"))
    put("bad-invalid-meta.safetensors", raw({"__metadata__": {"n": 1}}))
    put("bad-invalid-negdim.safetensors", raw({"t": {"dtype": "U8", "shape": [-1, -2], "data_offsets": [0, 2]}}, b"ab"))
    put("bad-invalid-trailing.safetensors", raw(b'{} x'))
    put("bad-dtype.safetensors", raw({"t": {"dtype": "F7", "shape": [1], "data_offsets": [0, 1]}}, b"a"))
    put("bad-size-mismatch.safetensors", raw({"t": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\x00" * 8))
    put("bad-size-overflow.safetensors",
        raw({"t": {"dtype": "F64", "shape": [2**32, 2**32], "data_offsets": [0, 8]}}, b"\x00" * 8))
    put("bad-offsets-overlap.safetensors",
        raw({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
             "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}}, b"\x00" * 6))
    put("bad-offsets-gap.safetensors",
        raw({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
             "b": {"dtype": "U8", "shape": [2], "data_offsets": [4, 6]}}, b"\x00" * 6))
    put("bad-offsets-reversed.safetensors", raw({"a": {"dtype": "U8", "shape": [0], "data_offsets": [3, 1]}}, b"abc"))
    put("bad-offsets-trailing.safetensors", raw({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}}, b"abcd"))
    put("bad-truncated-range.safetensors",
        raw({"a": {"dtype": "U8", "shape": [1000000], "data_offsets": [0, 1000000]}}, b"abcd"))


if __name__ == "__main__":
    main()
