"""Helpers shared by the CUDA rules.

A CUDA rule run with a CPU target (the host emulation the tests use: CI has
no GPU) leaves its loops serial instead of binding them to threads, so the
same loop nest, regions and summation order run on the CPU.
"""
from .. import tir_api


def on_gpu(target) -> bool:
    return target.kind.name == "cuda"


def bind(sch, loop, thread: str, target) -> None:
    if on_gpu(target):
        sch.bind(loop, thread)


def cuda_attr(target, name: str) -> int:
    """A CUDA target attribute: ``target``'s on the GPU, the CUDA target's in host emulation (or for
    None), so the emulated loop nests make the GPU's choices."""
    if target is not None and on_gpu(target):
        return int(target.attrs[name])
    from ...targets import get

    return int(get("cuda").tvm_target()[name])


def warp_size(target) -> int:
    return cuda_attr(target, "thread_warp_size")


def vector_bytes(target) -> int:
    """The widest global-memory access one thread makes in one instruction on the CUDA target: 16
    bytes (PTX ``ld.global.v4.b32`` / ``st.global.v4.b32``, LDG.128).  Newer PTX has 32-byte
    ``.v8.b32`` global accesses on sm_100, but TVM's CUDA code generator has no vector type that
    wide, so 16 on every architecture it builds for (the host emulation makes the GPU's choice)."""
    return 16


def vector_lanes(target, bits: int) -> int:
    """Elements of ``bits`` bits in one widest access (4 float32, 8 float16 or bfloat16)."""
    return vector_bytes(target) * 8 // bits


COMPUTE_BITS = 32  # the float32 the elementwise kernels compute in, whatever they load and store


def compute_lanes(target) -> int:
    """Lanes of a vectorised elementwise kernel: as many float32 values as one widest access holds
    (4), so a thread's float32 arithmetic is one CUDA vector type; 16-bit data then moves 8 bytes at
    a time.  (Eight float32 lanes would let float16 move 16 bytes, but TVM's CUDA code generator
    prints an 8-lane float32 constant as ``make_ulonglong4`` with eight arguments, which nvcc
    rejects.)"""
    return vector_lanes(target, COMPUTE_BITS)


def vector_conditions(func, lanes: int, dims, buffers=None) -> dict:
    """What a schedule whose threads each access ``lanes`` consecutive elements of ``buffers`` (None:
    every buffer of ``func``) with one instruction needs of a call (``tir_api.choose``'s conditions):
    the dimensions ``dims`` and those buffers' variable strides multiples of the lanes, and those
    buffers aligned to ``lanes`` of their elements, so each access starts on a multiple of its size."""
    layouts = tir_api.buffer_layouts(func)
    layouts = {k: v for k, v in layouts.items() if buffers is None or k in buffers}
    strides = {s: lanes for _, names in layouts.values() for s in names}
    return {"multiple_of": {**{d: lanes for d in dims}, **strides},
            "aligned": {name: lanes * bits // 8 for name, (bits, _) in layouts.items()}}
