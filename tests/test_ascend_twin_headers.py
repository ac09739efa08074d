"""The CPU twin's public headers (tests/ascend_twin) carry CANN's full value sets: aclDataType,
aclFormat, aclDeviceInfo, aclrtMemcpyKind, aclrtMemMallocPolicy, the ACL, runtime and GE error codes
and the aclnn status codes, each name with CANN's number and type, as CANN's headers give them
(hicann/runtime include/external/acl/acl_base_rt.h, acl_rt.h, error_codes/rt_error_codes.h,
error_codes/ge_error_codes.h; hicann/opbase include/nnopbase/opdev/op_errno.h).  A program that names
every one of them compiles against the twin, so a program written for CANN does too; one that leans on
what CANN's headers do not give (the runtime calls through aclnn's headers, a global ``OK`` of its own)
does not.  With FUSEDGRAD_OPS_NN set to a checkout of CANN's ops-nn, its calling examples of the four
operators build unchanged against the generated packages and the twin, run, and print the right numbers.
"""
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import build_cache

CXX = shutil.which("g++")
pytestmark = pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++) on this machine")
HERE = Path(__file__).parent
TWIN = HERE / "ascend_twin"
# CANN's include path: <CANN>/include and <CANN>/include/aclnn (where opdev/ is installed)
FLAGS = ["-std=c++17", "-Wall", "-Wextra", "-Werror", f"-I{TWIN}", f"-I{TWIN / 'aclnn'}"]

# the enums, every enumerator (hicann/runtime include/external/acl/acl_base_rt.h and acl_rt.h)
ENUMS = {
    "aclDataType": """ACL_DT_UNDEFINED ACL_FLOAT ACL_FLOAT16 ACL_INT8 ACL_INT32 ACL_UINT8 ACL_INT16 ACL_UINT16
        ACL_UINT32 ACL_INT64 ACL_UINT64 ACL_DOUBLE ACL_BOOL ACL_STRING ACL_COMPLEX64 ACL_COMPLEX128 ACL_BF16
        ACL_INT4 ACL_UINT1 ACL_COMPLEX32 ACL_HIFLOAT8 ACL_FLOAT8_E5M2 ACL_FLOAT8_E4M3FN ACL_FLOAT8_E8M0
        ACL_FLOAT6_E3M2 ACL_FLOAT6_E2M3 ACL_FLOAT4_E2M1 ACL_FLOAT4_E1M2""",
    "aclFormat": """ACL_FORMAT_UNDEFINED ACL_FORMAT_NCHW ACL_FORMAT_NHWC ACL_FORMAT_ND ACL_FORMAT_NC1HWC0
        ACL_FORMAT_FRACTAL_Z ACL_FORMAT_NC1HWC0_C04 ACL_FORMAT_HWCN ACL_FORMAT_NDHWC ACL_FORMAT_FRACTAL_NZ
        ACL_FORMAT_NCDHW ACL_FORMAT_NDC1HWC0 ACL_FRACTAL_Z_3D ACL_FORMAT_NC ACL_FORMAT_NCL
        ACL_FORMAT_FRACTAL_NZ_C0_16 ACL_FORMAT_FRACTAL_NZ_C0_32 ACL_FORMAT_FRACTAL_NZ_C0_2
        ACL_FORMAT_FRACTAL_NZ_C0_4 ACL_FORMAT_FRACTAL_NZ_C0_8""",
    "aclDeviceInfo": """ACL_DEVICE_INFO_UNDEFINED ACL_DEVICE_INFO_AI_CORE_NUM ACL_DEVICE_INFO_VECTOR_CORE_NUM
        ACL_DEVICE_INFO_L2_SIZE""",
    "aclrtMemcpyKind": """ACL_MEMCPY_HOST_TO_HOST ACL_MEMCPY_HOST_TO_DEVICE ACL_MEMCPY_DEVICE_TO_HOST
        ACL_MEMCPY_DEVICE_TO_DEVICE ACL_MEMCPY_DEFAULT ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE
        ACL_MEMCPY_INNER_DEVICE_TO_DEVICE ACL_MEMCPY_INTER_DEVICE_TO_DEVICE""",
    "aclrtMemMallocPolicy": """ACL_MEM_MALLOC_HUGE_FIRST ACL_MEM_MALLOC_HUGE_ONLY ACL_MEM_MALLOC_NORMAL_ONLY
        ACL_MEM_MALLOC_HUGE_FIRST_P2P ACL_MEM_MALLOC_HUGE_ONLY_P2P ACL_MEM_MALLOC_NORMAL_ONLY_P2P
        ACL_MEM_MALLOC_HUGE1G_ONLY ACL_MEM_MALLOC_HUGE1G_ONLY_P2P ACL_MEM_TYPE_LOW_BAND_WIDTH
        ACL_MEM_TYPE_HIGH_BAND_WIDTH ACL_MEM_ACCESS_USER_SPACE_READONLY""",
    "aclrtEventRecordedStatus": "ACL_EVENT_RECORDED_STATUS_NOT_READY ACL_EVENT_RECORDED_STATUS_COMPLETE",
}
# the codes, with the type CANN declares them with (a macro's is int)
CODES = {
    "int": """ACL_ERROR_INVALID_PARAM ACL_ERROR_UNINITIALIZE ACL_ERROR_REPEAT_INITIALIZE ACL_ERROR_INVALID_FILE
        ACL_ERROR_WRITE_FILE ACL_ERROR_INVALID_FILE_SIZE ACL_ERROR_PARSE_FILE ACL_ERROR_FILE_MISSING_ATTR
        ACL_ERROR_FILE_ATTR_INVALID ACL_ERROR_INVALID_DUMP_CONFIG ACL_ERROR_INVALID_PROFILING_CONFIG
        ACL_ERROR_INVALID_MODEL_ID ACL_ERROR_DESERIALIZE_MODEL ACL_ERROR_PARSE_MODEL ACL_ERROR_READ_MODEL_FAILURE
        ACL_ERROR_MODEL_SIZE_INVALID ACL_ERROR_MODEL_MISSING_ATTR ACL_ERROR_MODEL_INPUT_NOT_MATCH
        ACL_ERROR_MODEL_OUTPUT_NOT_MATCH ACL_ERROR_MODEL_NOT_DYNAMIC ACL_ERROR_OP_TYPE_NOT_MATCH
        ACL_ERROR_OP_INPUT_NOT_MATCH ACL_ERROR_OP_OUTPUT_NOT_MATCH ACL_ERROR_OP_ATTR_NOT_MATCH
        ACL_ERROR_OP_NOT_FOUND ACL_ERROR_OP_LOAD_FAILED ACL_ERROR_UNSUPPORTED_DATA_TYPE ACL_ERROR_FORMAT_NOT_MATCH
        ACL_ERROR_BIN_SELECTOR_NOT_REGISTERED ACL_ERROR_KERNEL_NOT_FOUND ACL_ERROR_BIN_SELECTOR_ALREADY_REGISTERED
        ACL_ERROR_KERNEL_ALREADY_REGISTERED ACL_ERROR_INVALID_QUEUE_ID ACL_ERROR_REPEAT_SUBSCRIBE
        ACL_ERROR_STREAM_NOT_SUBSCRIBE ACL_ERROR_THREAD_NOT_SUBSCRIBE ACL_ERROR_WAIT_CALLBACK_TIMEOUT
        ACL_ERROR_REPEAT_FINALIZE ACL_ERROR_NOT_STATIC_AIPP ACL_ERROR_COMPILING_STUB_MODE ACL_ERROR_GROUP_NOT_SET
        ACL_ERROR_GROUP_NOT_CREATE ACL_ERROR_PROF_ALREADY_RUN ACL_ERROR_PROF_NOT_RUN ACL_ERROR_DUMP_ALREADY_RUN
        ACL_ERROR_DUMP_NOT_RUN ACL_ERROR_PROF_REPEAT_SUBSCRIBE ACL_ERROR_PROF_API_CONFLICT
        ACL_ERROR_INVALID_MAX_OPQUEUE_NUM_CONFIG ACL_ERROR_INVALID_OPP_PATH ACL_ERROR_OP_UNSUPPORTED_DYNAMIC
        ACL_ERROR_RELATIVE_RESOURCE_NOT_CLEARED ACL_ERROR_UNSUPPORTED_JPEG ACL_ERROR_INVALID_BUNDLE_MODEL_ID
        ACL_ERROR_BAD_ALLOC ACL_ERROR_API_NOT_SUPPORT ACL_ERROR_INVALID_DEVICE ACL_ERROR_MEMORY_ADDRESS_UNALIGNED
        ACL_ERROR_RESOURCE_NOT_MATCH ACL_ERROR_INVALID_RESOURCE_HANDLE ACL_ERROR_FEATURE_UNSUPPORTED
        ACL_ERROR_PROF_MODULES_UNSUPPORTED ACL_ERROR_STORAGE_OVER_LIMIT ACL_ERROR_INTERNAL_ERROR ACL_ERROR_FAILURE
        ACL_ERROR_GE_FAILURE ACL_ERROR_RT_FAILURE ACL_ERROR_DRV_FAILURE ACL_ERROR_PROFILING_FAILURE""",
    "macro": """ACL_ERROR_RT_PARAM_INVALID ACL_ERROR_RT_INVALID_DEVICEID ACL_ERROR_RT_CONTEXT_NULL
        ACL_ERROR_RT_STREAM_CONTEXT ACL_ERROR_RT_MODEL_CONTEXT ACL_ERROR_RT_STREAM_MODEL
        ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID ACL_ERROR_RT_EVENT_TIMESTAMP_REVERSAL ACL_ERROR_RT_ADDR_UNALIGNED
        ACL_ERROR_RT_FILE_OPEN ACL_ERROR_RT_FILE_WRITE ACL_ERROR_RT_STREAM_SUBSCRIBE ACL_ERROR_RT_THREAD_SUBSCRIBE
        ACL_ERROR_RT_GROUP_NOT_SET ACL_ERROR_RT_GROUP_NOT_CREATE ACL_ERROR_RT_STREAM_NO_CB_REG
        ACL_ERROR_RT_INVALID_MEMORY_TYPE ACL_ERROR_RT_INVALID_HANDLE ACL_ERROR_RT_INVALID_MALLOC_TYPE
        ACL_ERROR_RT_WAIT_TIMEOUT ACL_ERROR_RT_TASK_TIMEOUT ACL_ERROR_RT_SYSPARAMOPT_NOT_SET
        ACL_ERROR_RT_DEVICE_TASK_ABORT ACL_ERROR_RT_STREAM_ABORT ACL_ERROR_RT_CAPTURE_DEPENDENCY
        ACL_ERROR_RT_STREAM_UNJOINED ACL_ERROR_RT_MODEL_CAPTURED ACL_ERROR_RT_STREAM_CAPTURED
        ACL_ERROR_RT_EVENT_CAPTURED ACL_ERROR_RT_STREAM_NOT_CAPTURED ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT
        ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT ACL_ERROR_STREAM_CAPTURE_CONFLICT ACL_ERROR_STREAM_TASK_GROUP_STATUS
        ACL_ERROR_STREAM_TASK_GROUP_INTR ACL_ERROR_RT_TASK_ABORT_STOP ACL_ERROR_RT_STREAM_CAPTURE_UNMATCHED
        ACL_ERROR_RT_MODEL_RUNNING ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD ACL_ERROR_RT_INSUFFICIENT_INPUT_ARRAY
        ACL_ERROR_RT_MODEL_UPDATE_FAILED ACL_ERROR_RT_CAPTURE_MODE_BLOCK_ASYNC ACL_ERROR_RT_SYMBOL_NOT_FOUND
        ACL_ERROR_RT_INVALID_SYMBOL ACL_ERROR_RT_INVALID_DEVICE_FUNCTION ACL_ERROR_RT_SUB_ACLGRAPH_IS_CAPTURING
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT ACL_ERROR_RT_MEMORY_ALLOCATION ACL_ERROR_RT_MEMORY_FREE
        ACL_ERROR_RT_AICORE_OVER_FLOW ACL_ERROR_RT_NO_DEVICE ACL_ERROR_RT_RESOURCE_ALLOC_FAIL
        ACL_ERROR_RT_NO_PERMISSION ACL_ERROR_RT_NO_EVENT_RESOURCE ACL_ERROR_RT_NO_STREAM_RESOURCE
        ACL_ERROR_RT_NO_NOTIFY_RESOURCE ACL_ERROR_RT_NO_MODEL_RESOURCE ACL_ERROR_RT_NO_CDQ_RESOURCE
        ACL_ERROR_RT_OVER_LIMIT ACL_ERROR_RT_QUEUE_EMPTY ACL_ERROR_RT_QUEUE_FULL ACL_ERROR_RT_REPEATED_INIT
        ACL_ERROR_RT_AIVEC_OVER_FLOW ACL_ERROR_RT_OVER_FLOW ACL_ERROR_RT_DEVICE_OOM
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT_UPDATE_OP ACL_ERROR_RT_TIMEOUT ACL_ERROR_RT_LINK_TYPE_NOT_SUPPORTED
        ACL_ERROR_RT_INTERNAL_ERROR ACL_ERROR_RT_TS_ERROR ACL_ERROR_RT_STREAM_TASK_FULL
        ACL_ERROR_RT_STREAM_TASK_EMPTY ACL_ERROR_RT_STREAM_NOT_COMPLETE ACL_ERROR_RT_END_OF_SEQUENCE
        ACL_ERROR_RT_EVENT_NOT_COMPLETE ACL_ERROR_RT_CONTEXT_RELEASE_ERROR ACL_ERROR_RT_SOC_VERSION
        ACL_ERROR_RT_TASK_TYPE_NOT_SUPPORT ACL_ERROR_RT_LOST_HEARTBEAT ACL_ERROR_RT_MODEL_EXECUTE
        ACL_ERROR_RT_REPORT_TIMEOUT ACL_ERROR_RT_SYS_DMA ACL_ERROR_RT_AICORE_TIMEOUT ACL_ERROR_RT_AICORE_EXCEPTION
        ACL_ERROR_RT_AICORE_TRAP_EXCEPTION ACL_ERROR_RT_AICPU_TIMEOUT ACL_ERROR_RT_AICPU_EXCEPTION
        ACL_ERROR_RT_AICPU_DATADUMP_RSP_ERR ACL_ERROR_RT_AICPU_MODEL_RSP_ERR ACL_ERROR_RT_PROFILING_ERROR
        ACL_ERROR_RT_IPC_ERROR ACL_ERROR_RT_MODEL_ABORT_NORMAL ACL_ERROR_RT_KERNEL_UNREGISTERING
        ACL_ERROR_RT_RINGBUFFER_NOT_INIT ACL_ERROR_RT_RINGBUFFER_NO_DATA ACL_ERROR_RT_KERNEL_LOOKUP
        ACL_ERROR_RT_KERNEL_DUPLICATE ACL_ERROR_RT_DEBUG_REGISTER_FAIL ACL_ERROR_RT_DEBUG_UNREGISTER_FAIL
        ACL_ERROR_RT_LABEL_CONTEXT ACL_ERROR_RT_PROGRAM_USE_OUT ACL_ERROR_RT_DEV_SETUP_ERROR
        ACL_ERROR_RT_VECTOR_CORE_TIMEOUT ACL_ERROR_RT_VECTOR_CORE_EXCEPTION ACL_ERROR_RT_VECTOR_CORE_TRAP_EXCEPTION
        ACL_ERROR_RT_CDQ_BATCH_ABNORMAL ACL_ERROR_RT_DIE_MODE_CHANGE_ERROR ACL_ERROR_RT_DIE_SET_ERROR
        ACL_ERROR_RT_INVALID_DIEID ACL_ERROR_RT_DIE_MODE_NOT_SET ACL_ERROR_RT_AICORE_TRAP_READ_OVERFLOW
        ACL_ERROR_RT_AICORE_TRAP_WRITE_OVERFLOW ACL_ERROR_RT_VECTOR_CORE_TRAP_READ_OVERFLOW
        ACL_ERROR_RT_VECTOR_CORE_TRAP_WRITE_OVERFLOW ACL_ERROR_RT_STREAM_SYNC_TIMEOUT
        ACL_ERROR_RT_EVENT_SYNC_TIMEOUT ACL_ERROR_RT_FFTS_PLUS_TIMEOUT ACL_ERROR_RT_FFTS_PLUS_EXCEPTION
        ACL_ERROR_RT_FFTS_PLUS_TRAP_EXCEPTION ACL_ERROR_RT_SEND_MSG ACL_ERROR_RT_COPY_DATA
        ACL_ERROR_RT_DEVICE_MEM_ERROR ACL_ERROR_RT_HBM_MULTI_BIT_ECC_ERROR ACL_ERROR_RT_SUSPECT_DEVICE_MEM_ERROR
        ACL_ERROR_RT_LINK_ERROR ACL_ERROR_RT_SUSPECT_REMOTE_ERROR ACL_ERROR_RT_DRV_INTERNAL_ERROR
        ACL_ERROR_RT_AICPU_INTERNAL_ERROR ACL_ERROR_RT_SOCKET_CLOSE ACL_ERROR_RT_AICPU_INFO_LOAD_RSP_ERR
        ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED ACL_ERROR_RT_COMM_OP_RETRY_FAIL ACL_ERROR_SNAPSHOT_LOCK_TIMEOUT
        ACL_ERROR_SNAPSHOT_LOCK_FAILED ACL_ERROR_SNAPSHOT_UNLOCK_FAILED ACL_ERROR_SNAPSHOT_BACKUP_FAILED
        ACL_ERROR_SNAPSHOT_RESTORE_FAILED ACL_ERROR_HOST_MEMORY_ALREADY_REGISTERED
        ACL_ERROR_HOST_MEMORY_NOT_REGISTERED ACL_ERROR_SNAPSHOT_CALLBACK_FAILED
        ACL_ERROR_SNAPSHOT_REGISTER_CALLBACK_FAILED ACL_ERROR_RT_L3_PORT_ERROR ACL_ERROR_RT_CCU_TIMEOUT
        ACL_ERROR_RT_CCU_EXCEPTION
        ACLNN_ERR_PARAM_NULLPTR ACLNN_ERR_PARAM_INVALID ACLNN_ERR_RUNTIME_ERROR ACLNN_ERR_INNER
        ACLNN_ERR_INNER_INFERSHAPE_ERROR ACLNN_ERR_INNER_TILING_ERROR ACLNN_ERR_INNER_FIND_KERNEL_ERROR
        ACLNN_ERR_INNER_CREATE_EXECUTOR ACLNN_ERR_INNER_NOT_TRANS_EXECUTOR ACLNN_ERR_INNER_NULLPTR
        ACLNN_ERR_INNER_WRONG_ATTR_INFO_SIZE ACLNN_ERR_INNER_KEY_CONFLICT ACLNN_ERR_INNER_INVALID_IMPL_MODE
        ACLNN_ERR_INNER_OPP_PATH_NOT_FOUND ACLNN_ERR_INNER_LOAD_JSON_FAILED ACLNN_ERR_INNER_JSON_VALUE_NOT_FOUND
        ACLNN_ERR_INNER_JSON_FORMAT_INVALID ACLNN_ERR_INNER_JSON_DTYPE_INVALID
        ACLNN_ERR_INNER_OPP_KERNEL_PKG_NOT_FOUND ACLNN_ERR_INNER_OP_FILE_INVALID
        ACLNN_ERR_INNER_ATTR_NUM_OUT_OF_BOUND ACLNN_ERR_INNER_ATTR_LEN_NOT_ENOUGH
        ACLNN_ERR_INNER_INPUT_NUM_IN_JSON_TOO_LARGE ACLNN_ERR_INNER_INPUT_JSON_IS_NULL
        ACLNN_ERR_INNER_STATIC_WORKSPACE_INVALID ACLNN_ERR_INNER_STATIC_BLOCK_DIM_INVALID""",
    "uint32_t": """ACL_ERROR_GE_PARAM_INVALID ACL_ERROR_GE_EXEC_NOT_INIT ACL_ERROR_GE_EXEC_MODEL_PATH_INVALID
        ACL_ERROR_GE_EXEC_MODEL_ID_INVALID ACL_ERROR_GE_EXEC_MODEL_DATA_SIZE_INVALID
        ACL_ERROR_GE_EXEC_MODEL_ADDR_INVALID ACL_ERROR_GE_EXEC_MODEL_QUEUE_ID_INVALID
        ACL_ERROR_GE_EXEC_LOAD_MODEL_REPEATED ACL_ERROR_GE_DYNAMIC_INPUT_ADDR_INVALID
        ACL_ERROR_GE_DYNAMIC_INPUT_LENGTH_INVALID ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID
        ACL_ERROR_GE_AIPP_BATCH_EMPTY ACL_ERROR_GE_AIPP_NOT_EXIST ACL_ERROR_GE_AIPP_MODE_INVALID
        ACL_ERROR_GE_OP_TASK_TYPE_INVALID ACL_ERROR_GE_OP_KERNEL_TYPE_INVALID ACL_ERROR_GE_PLGMGR_PATH_INVALID
        ACL_ERROR_GE_FORMAT_INVALID ACL_ERROR_GE_SHAPE_INVALID ACL_ERROR_GE_DATATYPE_INVALID
        ACL_ERROR_GE_MEMORY_ALLOCATION ACL_ERROR_GE_MEMORY_OPERATE_FAILED ACL_ERROR_GE_DEVICE_MEMORY_OPERATE_FAILED
        ACL_ERROR_GE_SUBHEALTHY ACL_ERROR_GE_USER_RAISE_EXCEPTION ACL_ERROR_GE_DATA_NOT_ALIGNED
        ACL_ERROR_GE_INTERNAL_ERROR ACL_ERROR_GE_LOAD_MODEL ACL_ERROR_GE_EXEC_LOAD_MODEL_PARTITION_FAILED
        ACL_ERROR_GE_EXEC_LOAD_WEIGHT_PARTITION_FAILED ACL_ERROR_GE_EXEC_LOAD_TASK_PARTITION_FAILED
        ACL_ERROR_GE_EXEC_LOAD_KERNEL_PARTITION_FAILED ACL_ERROR_GE_EXEC_RELEASE_MODEL_DATA
        ACL_ERROR_GE_COMMAND_HANDLE ACL_ERROR_GE_GET_TENSOR_INFO ACL_ERROR_GE_UNLOAD_MODEL
        ACL_ERROR_GE_MODEL_EXECUTE_TIMEOUT ACL_ERROR_GE_REDEPLOYING""",
}
# the names for success, and CANN's old spelling of ACLNN_ERR_INNER_KEY_CONFLICT, share a value
ALIASES = {"ACL_SUCCESS": 0, "ACL_ERROR_NONE": 0, "ACL_RT_SUCCESS": 0, "ACLNN_SUCCESS": 0,
           "ACLNN_ERR_INNER_KEY_CONFILICT": "ACLNN_ERR_INNER_KEY_CONFLICT"}
# a few of CANN's numbers, one or more from each list
VALUES = {"ACL_FORMAT_NCL": 47, "ACL_FRACTAL_Z_3D": 33, "ACL_FORMAT_FRACTAL_NZ_C0_8": 54, "ACL_FORMAT_ND": 2,
          "ACL_BF16": 27, "ACL_FLOAT4_E1M2": 41, "ACL_DT_UNDEFINED": -1, "ACL_DEVICE_INFO_VECTOR_CORE_NUM": 1,
          "ACL_MEMCPY_INTER_DEVICE_TO_DEVICE": 7, "ACL_MEM_ACCESS_USER_SPACE_READONLY": 0x100000,
          "ACL_ERROR_INVALID_PARAM": 100000, "ACL_ERROR_PROF_REPEAT_SUBSCRIBE": 148046,
          "ACL_ERROR_PROFILING_FAILURE": 500005, "ACL_ERROR_RT_FEATURE_NOT_SUPPORT": 207000,
          "ACL_ERROR_RT_CAPTURE_MODE_BLOCK_ASYNC": 107041, "ACL_ERROR_RT_CCU_EXCEPTION": 507916,
          "ACL_ERROR_GE_REDEPLOYING": 545602, "ACLNN_ERR_PARAM_NULLPTR": 161001,
          "ACLNN_ERR_INNER_STATIC_BLOCK_DIM_INVALID": 561119}


def _names(text: str) -> list:
    return text.split()


def _program() -> str:
    """Every enumerator in a switch with no default (-Wswitch: the twin's enum has no other; a value
    twice does not compile), every code a case of one switch (distinct across the lists) with its
    type, the aliases and the few numbers as static_asserts."""
    lines = ["#include <type_traits>", '#include "acl/acl.h"', '#include "aclnn/aclnn_base.h"',
             '#include "opdev/op_errno.h"', ""]
    for enum, names in ENUMS.items():
        cases = " ".join(f"case {n}: return {i};" for i, n in enumerate(_names(names)))
        lines.append(f"int which_{enum}({enum} v) {{ switch (v) {{ {cases} }} return -1; }}")
    cases = " ".join(f"case {n}:" for kind in CODES for n in _names(CODES[kind]))
    lines.append(f"bool known_code(long long v) {{ switch (v) {{ {cases} return true; default: return false; }} }}")
    for kind, names in CODES.items():
        for n in _names(names):
            want = "int" if kind == "macro" else f"const {kind}"
            lines.append(f"static_assert(std::is_same<decltype({n}), {want}>::value, \"{n}: {want}\");")
    for n, v in {**ALIASES, **VALUES}.items():
        lines.append(f"static_assert({n} == {v}, \"{n} == {v}\");")
    lines.append("static_assert(OK == ACLNN_SUCCESS, \"acl_meta.h's OK\");")
    lines.append("int main() { return which_aclFormat(ACL_FORMAT_NCL) == 14 && known_code(ACL_ERROR_GE_REDEPLOYING) && "
                 "!known_code(1) ? 0 : 1; }")
    return "\n".join(lines) + "\n"


def _compile(tmp_path: Path, text: str, exe: Path = None) -> subprocess.CompletedProcess:
    """Compiles text with the twin's headers (into exe, or only checked when exe is None)."""
    src = tmp_path / "unit.cpp"
    src.write_text(text)
    out = ["-o", str(exe)] if exe else ["-fsyntax-only"]
    return build_cache.run([CXX, *FLAGS, *out, str(src)], outputs=[exe] if exe else [])


def test_the_twin_names_every_value_of_canns_enums_and_codes(tmp_path):
    exe = tmp_path / "names"
    proc = _compile(tmp_path, _program(), exe)
    assert proc.returncode == 0, proc.stderr[-4000:]
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


MEMCPY = r'''#include <cstdio>
#include <cstdlib>
#include "acl/acl.h"
// memcpy INDEX: both copies of 256 bytes device -> pinned host with kinds[INDEX]; prints their
// returns, or the twin's verdict
int main(int argc, char **argv) {
    const aclrtMemcpyKind kinds[] = {ACL_MEMCPY_DEVICE_TO_HOST, ACL_MEMCPY_DEFAULT, ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE,
                                     ACL_MEMCPY_INNER_DEVICE_TO_DEVICE, ACL_MEMCPY_INTER_DEVICE_TO_DEVICE,
                                     (aclrtMemcpyKind)8};
    if (argc != 2) return 2;
    aclInit(nullptr);
    aclrtSetDevice(0);
    aclrtStream s;
    aclrtCreateStream(&s);
    void *dev = nullptr, *pinned = nullptr;
    if (aclrtMalloc(&dev, 256, ACL_MEM_MALLOC_HUGE1G_ONLY_P2P) != ACL_SUCCESS || aclrtMallocHost(&pinned, 256) != 0)
        return 3;
    try {
        const aclrtMemcpyKind kind = kinds[std::atoi(argv[1])];
        int sync = aclrtMemcpy(pinned, 256, dev, 256, kind), async = aclrtMemcpyAsync(pinned, 256, dev, 256, kind, s);
        aclrtSynchronizeStream(s);
        std::printf("%d %d\n", sync, async);
    } catch (const fg_twin_acl::Violation &e) {
        std::printf("%s\n", e.what());
    }
    return 0;
}
'''


@pytest.fixture(scope="module")
def memcpy(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("memcpy")
    proc = _compile(tmp, MEMCPY, tmp / "memcpy")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp / "memcpy"


@pytest.mark.parametrize("index, verdict", [
    (0, "0 0"),  # a kind with a stated direction runs as before
    (1, "does not model ACL_MEMCPY_DEFAULT"), (2, "does not model"),  # CANN's, not the twin's
    (3, "100000 100000"), (4, "100000 100000"), (5, "100000 100000"),  # CANN refuses them: invalid param
])
def test_every_memcpy_kind_is_run_refused_or_said_not_modelled(memcpy, index, verdict):
    proc = subprocess.run([str(memcpy), str(index)], capture_output=True, text=True, timeout=60)
    out = proc.stdout.strip()
    assert proc.returncode == 0 and (out == verdict if verdict[0].isdigit() else verdict in out), (
        proc.returncode, proc.stdout, proc.stderr)


@pytest.mark.parametrize("unit, error", [
    # CANN's aclnn/acl_meta.h includes acl/acl_base.h (types, codes), not the runtime calls
    ('#include "aclnn/aclnn_base.h"\nint f(void **p) { return aclrtMalloc(p, 64, ACL_MEM_MALLOC_HUGE_FIRST); }\n',
     "aclrtMalloc"),
    # and declares aclnnStatus OK at global scope: a program's own OK clashes with it
    ('#include "aclnn/aclnn_base.h"\nstatic const int OK = 1;\n', "OK"),
])
def test_the_twin_gives_only_what_canns_headers_give(tmp_path, unit, error):
    proc = _compile(tmp_path, unit)
    assert proc.returncode != 0 and error in proc.stderr, proc.stderr[-2000:]


def test_acl_base_alone_gives_the_types_and_codes(tmp_path):
    unit = ('#include "acl/acl_base.h"\nint f(aclFormat g, aclDataType t) {\n'
            '    return g == ACL_FORMAT_NCL && t == ACL_BF16 ? ACL_ERROR_RT_FEATURE_NOT_SUPPORT : ACL_SUCCESS;\n}\n')
    proc = _compile(tmp_path, unit)
    assert proc.returncode == 0, proc.stderr[-2000:]


# CANN's ops-nn calling examples of the generated operators: (package, path in an ops-nn checkout)
OPS_NN = os.environ.get("FUSEDGRAD_OPS_NN")
EXAMPLES = {
    "aclnnThnnFusedLstmCellBackward": ("lstm_cell_backward",
                                       "rnn/thnn_fused_lstm_cell_grad/examples/test_aclnn_thnn_fused_lstm_cell_grad.cpp"),
    "aclnnLayerNormBackward": ("layer_norm_backward", "norm/layer_norm_grad_v3/examples/test_aclnn_layer_norm_grad_v3.cpp"),
    "aclnnLSTM": ("lstm", "rnn/dynamic_rnn/examples/test_aclnn_dynamic_rnn.cpp"),
    "aclnnLstmBackward": ("lstm", "rnn/single_layer_lstm_grad/examples/test_aclnn_single_layer_lstm_grad.cpp"),
}
needs_ops_nn = pytest.mark.skipif(not OPS_NN or shutil.which("cmake") is None,
                                  reason="set FUSEDGRAD_OPS_NN to a checkout of CANN's ops-nn (and install cmake)")


@pytest.fixture(scope="module")
def built(ascend_tree, tmp_path_factory):
    """The three generated packages built with their CMakeLists.txt against the twin (as in
    test_ascend_package_build): {package: (op_host dir, build dir)}."""
    from test_ascend_package_build import _cann_root

    tmp = tmp_path_factory.mktemp("ops_nn")
    cann = _cann_root(tmp)
    out = {}
    for op in sorted({op for op, _ in EXAMPLES.values()}):
        src, build = ascend_tree / op, tmp / f"build_{op}"
        for cmd in (["cmake", "-S", str(src), "-B", str(build), f"-DASCEND_CANN_PACKAGE_PATH={cann}"],
                    ["cmake", "--build", str(build), "-j", "2"]):
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
        out[op] = (src / "op_host", build)
    return out


def _lstm_backward_reference() -> dict:
    """The ops-nn aclnnLstmBackward example's results from its inputs: T = N = 1, I = H = 8, every input
    1 (the saved gates i, j, f, o as activated values, in that order) and tanhc = tanh(c); one LSTM
    step back through W_ih [4H, I] and W_hh [4H, H]."""
    h = i_size = 8
    one = np.ones(h)
    i = j = f = o = c = c0 = dy = dh = dc = one
    x, h0, w_ih, w_hh = np.ones(i_size), one, np.ones((4 * h, i_size)), np.ones((4 * h, h))
    tanhc = np.tanh(c)
    dh_t = dy + dh
    dc_t = dc + dh_t * o * (1 - tanhc ** 2)
    dgates = np.concatenate([dc_t * j * i * (1 - i), dc_t * i * (1 - j ** 2), dc_t * c0 * f * (1 - f),
                             dh_t * tanhc * o * (1 - o)])
    return {"result dwi": np.outer(dgates, x).ravel(), "result dwh": np.outer(dgates, h0).ravel(),
            "result dbi": dgates, "result dbh": dgates, "result dx": w_ih.T @ dgates,
            "result dh_prev": w_hh.T @ dgates, "result dc_prev": dc_t * f}


@needs_ops_nn
@pytest.mark.parametrize("api", sorted(EXAMPLES))
def test_canns_calling_examples_build_unchanged_and_run(built, tmp_path, api):
    op, rel = EXAMPLES[api]
    src = Path(OPS_NN) / rel
    assert src.is_file(), f"FUSEDGRAD_OPS_NN={OPS_NN}: no {rel}"
    op_host, build = built[op]
    exe = tmp_path / "example"
    proc = subprocess.run([CXX, "-std=c++17", "-O1", f"-I{TWIN}", f"-I{op_host}", "-o", str(exe), str(src),
                           f"-L{build}", f"-lfg_{op}", f"-Wl,-rpath,{build}"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    printed = {}
    for name, k, v in re.findall(r"^(.+)\[(\d+)\] is: (\S+)$", proc.stdout, re.M):  # "result dx[3] is: 0.5"
        printed.setdefault(name, {})[int(k)] = float(v)
    assert printed and all(math.isfinite(v) for vs in printed.values() for v in vs.values()), proc.stdout[-2000:]
    if api == "aclnnLstmBackward":
        for name, want in _lstm_backward_reference().items():
            got = np.array([printed[name][k] for k in range(len(want))])
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)
