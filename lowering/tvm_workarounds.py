"""What cannot be done through TVM's API: TVM 0.27's (apache-tvm 0.27.0.post1) byte layouts, edited.

Everything else goes through TVM's objects (lowering/tvm_api.py).  Each piece here relies on a
format TVM does not promise; tests/test_tvm_workarounds.py builds the real thing with the installed
TVM and fails when it changes.

- The import blob ``export_library`` embeds (``ModulePackImportsToC``): a u64 length, then the
  import tree and every module as (kind, u64 size, payload); a CUDA module's payload is
  ``fmt, function map, data`` (its ``SaveToBytes``).  TVM has no API to replace a module's code
  by a binary compiled elsewhere: the CUDA packaging (lowering/cuda.py, lowering/exporters.py)
  swaps ("cuda", source) for ("fatbin", nvcc's fatbin) here, keeping the function map (launch
  parameters of every kernel) byte for byte.
- The C source that carries the blob: one ``const unsigned char __tvm_ffi__library_bin[N] = {...};``
  array of hex bytes, read and rewritten here.
"""
from __future__ import annotations

import re
import struct


def _u64(value: int) -> bytes:
    return struct.pack("<Q", value)


def _string(value: bytes) -> bytes:
    return _u64(len(value)) + value


def replace_device_code(blob: bytes, source: str, fatbin: bytes) -> bytes:
    """The import blob with the one CUDA module's ("cuda", source) replaced by ("fatbin", fatbin).

    ``blob`` is the byte array export_library embeds: a u64 length, then the
    import tree and every module as (kind, u64 size, payload).  The CUDA
    payload is (fmt, function map, data); checked field by field so a change
    of TVM's format fails here, at build time, not on the GPU.
    """
    (total,) = struct.unpack_from("<Q", blob, 0)
    if total != len(blob) - 8:
        raise ValueError(f"import blob: length field {total}, blob holds {len(blob) - 8} bytes")
    key = _string(b"cuda")
    src = source.encode()
    hits = [(at, p) for at, p in _cuda_records(blob) if p.startswith(key) and p.endswith(_string(src))]
    if len(hits) != 1:
        raise ValueError(f"import blob: expected one CUDA module holding the generated source, found {len(hits)}")
    size_at, payload = hits[0]
    fmap = payload[len(key): len(payload) - len(_string(src))]
    new_payload = _string(b"fatbin") + fmap + _string(fatbin)
    body = blob[8:size_at] + _u64(len(new_payload)) + new_payload + blob[size_at + 8 + len(payload):]
    return _u64(len(body)) + body


def _cuda_records(blob: bytes):
    """(offset of the size field, payload) of every well-formed record of kind "cuda" in an import blob."""
    key = _string(b"cuda")
    pos = blob.find(key)
    while pos >= 0:
        size_at = pos + len(key)
        if size_at + 8 <= len(blob):
            (size,) = struct.unpack_from("<Q", blob, size_at)
            payload = blob[size_at + 8: size_at + 8 + size]
            if len(payload) == size:
                yield size_at, payload
        pos = blob.find(key, pos + 1)


def device_payloads(blob: bytes) -> list[bytes]:
    """Payloads of every record of kind "cuda" in an import blob (fmt, function map, data)."""
    return [p for _, p in _cuda_records(blob) if p[:8] in (_u64(4), _u64(6))]


_C_ARRAY = re.compile(r"(const unsigned char __tvm_ffi__library_bin\[)(\d+)(\] = \{)(.*?)(\};)", re.S)


def _c_array(c_source: str):
    m = _C_ARRAY.search(c_source)
    if m is None:
        raise ValueError("packed-imports C source: __tvm_ffi__library_bin array not found")
    return m


def c_blob(c_source: str) -> bytes:
    m = _c_array(c_source)
    return bytes(int(v, 16) for v in m.group(4).replace("\n", "").split(",") if v.strip())


def with_c_blob(c_source: str, blob: bytes) -> str:
    m = _c_array(c_source)
    rows = ["  " + ",".join(f"0x{b:02x}" for b in blob[i:i + 20]) + "," for i in range(0, len(blob), 20)]
    array = m.group(1) + str(len(blob)) + m.group(3) + "\n" + "\n".join(rows) + "\n" + m.group(5)
    return c_source[: m.start()] + array + c_source[m.end():]
