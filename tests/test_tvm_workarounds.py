"""lowering/tvm_workarounds.py against the installed TVM: each test builds the format a workaround
edits with TVM itself, so a TVM that changes it fails here rather than on a GPU."""
import struct

import pytest
import tvm

from fusedgrad import targets
from fusedgrad.lowering import tvm_api, tvm_workarounds

_KERNEL = """
@T.prim_func
def scale(a: T.handle, b: T.handle):
    T.func_attr({"global_symbol": "scale", "tirx.noalias": True})
    A = T.match_buffer(a, (256,), "float32")
    B = T.match_buffer(b, (256,), "float32")
    for bx in T.thread_binding(2, thread="blockIdx.x"):
        for tx in T.thread_binding(128, thread="threadIdx.x"):
            B[bx * 128 + tx] = A[bx * 128 + tx] * T.float32(2.0)
"""


@pytest.fixture(scope="module")
def packed():
    """(the CUDA source, the C source TVM packs a compiled CUDA module's imports into)."""
    tgt = tvm_api.target(targets.get("cuda").tvm_target())
    exe = tvm_api.compile_module({"scale": tvm.script.from_source(_KERNEL)}, tgt)
    return tvm_api.device_source(exe, "cuda"), tvm_api.pack_imports_c(exe.mod)


def test_the_packed_c_source_holds_the_blob_as_one_byte_array(packed):
    source, c_source = packed
    blob = tvm_workarounds.c_blob(c_source)
    (total,) = struct.unpack_from("<Q", blob)
    assert total == len(blob) - 8
    assert tvm_workarounds.c_blob(tvm_workarounds.with_c_blob(c_source, blob)) == blob


def test_the_blob_holds_the_cuda_module_as_fmt_function_map_source(packed):
    source, c_source = packed
    blob = tvm_workarounds.c_blob(c_source)
    (payload,) = tvm_workarounds.device_payloads(blob)
    key, data = struct.pack("<Q", 4) + b"cuda", source.encode()
    assert payload.startswith(key) and payload.endswith(struct.pack("<Q", len(data)) + data)
    function_map = payload[len(key): len(payload) - 8 - len(data)]
    assert b"scale_kernel" in function_map  # the launch parameters, by kernel name

    new = tvm_workarounds.replace_device_code(blob, source, b"FATBIN")
    (replaced,) = tvm_workarounds.device_payloads(new)
    assert replaced == struct.pack("<Q", 6) + b"fatbin" + function_map + struct.pack("<Q", 6) + b"FATBIN"
    rewritten = tvm_workarounds.with_c_blob(c_source, new)
    assert tvm_workarounds.c_blob(rewritten) == new
    assert rewritten.replace(rewritten[rewritten.index("{"):rewritten.index("};")], "") == \
        c_source.replace(c_source[c_source.index("{"):c_source.index("};")], "").replace(
            f"[{len(blob)}]", f"[{len(new)}]")
