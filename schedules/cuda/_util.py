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

