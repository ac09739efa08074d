"""Helpers shared by the CUDA rules.

A CUDA rule run with a CPU target (the host emulation the tests use: CI has
no GPU) leaves its loops serial instead of binding them to threads, so the
same loop nest, regions and summation order run on the CPU.
"""


def on_gpu(target) -> bool:
    return target.kind.name == "cuda"


def bind(sch, loop, thread: str, target) -> None:
    if on_gpu(target):
        sch.bind(loop, thread)


def shared_memory_bytes(target) -> int:
    """A block's static shared memory on the CUDA target (its ``max_shared_memory_per_block``),
    also in host emulation, so the emulated loop nests make the GPU's choices."""
    if on_gpu(target):
        return int(target.attrs["max_shared_memory_per_block"])
    from ...targets import get

    return int(get("cuda").tvm_target()["max_shared_memory_per_block"])
