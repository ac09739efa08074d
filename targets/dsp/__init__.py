"""Embedded DSPs: a standalone C99 library per chip with the vendor entry points
(``fp_/hp_layernormgrad_s/_p``, ``fp_/hp_lstmcellgrad_s/_p``), printed from the
DSP schedules' loop nests (schedules/dsp) by lowering.c_emitter and packaged by lowering.dsp.

This folder also holds the library's fixed C sources (the porting interface and
its host implementation, the half type, the kernels' and entry points' helpers,
the status codes), copied into every chip's folder.
"""
from __future__ import annotations

from ..registry import TargetInfo, register

# chip -> what the library ships for it, and the machine facts the DSP schedules size their blocks by.
# No public datasheet of either part was found (searched the vendor docs and the MT-3000 paper,
# CCF THPC 2022, doi:10.1007/s42514-022-00095-y, whose design the porting layer follows: AM/SM
# scratch per core, GSM shared by a cluster, DMA between them); every number below is assumed:
#   local_bytes   a core's local memory (AM) that one kernel may stage into by DMA: assumed
#                 768 KiB, the MT-3000 accelerator core's AM as the host port's DMA tests model it
#                 (-DFG_DSP_HOST_LOCAL_BYTES=786432)
#   cores         cores one core_mask may name: assumed 8 (the host port's FG_DSP_HOST_CORES)
#   vector_bytes  one vector register: assumed 128 bytes, 16 lanes of 64 bits (the paper: 1536
#                 accelerator lanes under 96 control cores, MAC units of up to double precision)
CHIPS = {
    "ft78ne": {"dtypes": ("float32",), "local_bytes": 786432, "cores": 8, "vector_bytes": 128},
    "mt7004": {"dtypes": ("float32", "float16"), "local_bytes": 786432, "cores": 8, "vector_bytes": 128},
}

# the vendor's name of each op the library ships: its entry points (fp_lstmcellgrad_s) and files
# (lstmcellgrad.h); the symbols inside the library take the op's short name (te_defs OpDef.short)
VENDOR_NAMES = {"layer_norm_backward": "layernormgrad", "lstm_cell_backward": "lstmcellgrad",
                "lstm_layer_forward": "lstm", "lstm_layer_backward": "lstmgrad"}
# the vendor's prefix of an entry point per dtype (fp_lstmcellgrad_s, hp_lstmcellgrad_s)
DTYPE_PREFIXES = {"float32": "fp", "float16": "hp"}

INFO = register(
    TargetInfo(
        name="dsp",
        tvm_target=lambda: {"kind": "c"},
        schedules="fusedgrad.schedules.dsp",
        artifact="dsp_c",
        dtypes=("float32", "float16"),
        ops=tuple(VENDOR_NAMES),
        runnable_here=False,
        facts={"chips": CHIPS},
        runtime_sources="dsp",
        description="embedded DSPs (FT78NE, MT7004): standalone C99 library with the vendor entry points",
    )
)
