"""The aclrtlaunch_<kernel> functions CANN's AscendC build generates for a package's kernels, stood in
for by ones that queue the kernel on the twin's stream (it runs on the AscendC twin, tests/ascend_twin,
when the stream is synchronised): read from the package's generated launch header, so every kernel
the host code can launch has one.  With FG_TWIN_LAUNCH_LOG set, each launch prints "launch <kernel>
<blockDim>" to stderr as the stream runs it."""
import re
from pathlib import Path

LAUNCH = re.compile(r"uint32_t aclrtlaunch_(\w+)\(uint32_t blockDim, aclrtStream stream, ([^)]*)\);")


def launch_shim(op_kernel: Path, op_host: Path, op: str) -> str:
    """C++ defining each aclrtlaunch_ function declared in op_host/fg_<op>_launch.h over the kernels
    in op_kernel/fg_<op>_*.cpp."""
    header = (op_host / f"fg_{op}_launch.h").read_text()
    launches = LAUNCH.findall(header)
    declared = [line for line in header.splitlines()
                if "aclrtlaunch_" in line and not line.lstrip().startswith(("//", "#"))]
    assert launches and len(launches) == len(declared), f"launch declarations the shim cannot read: {declared}"
    kernels = sorted(p.name for p in op_kernel.glob(f"fg_{op}_*.cpp"))
    assert kernels, f"no kernels in {op_kernel}"
    lines = ['#include "kernel_operator.h"', *(f'#include "{k}"' for k in kernels), f'#include "fg_{op}_launch.h"', ""]
    for name, params in launches:
        args = [re.search(r"(\w+)\s*$", a.strip()).group(1) for a in params.split(",")]
        cast = ", ".join(f"(uint8_t *){a}" for a in args)
        lines += [f"uint32_t aclrtlaunch_{name}(uint32_t blockDim, aclrtStream stream, {params}) {{",
                  "    fg_twin_acl::enqueue(stream, [=] {",
                  f'        if (std::getenv("FG_TWIN_LAUNCH_LOG")) fprintf(stderr, "launch {name} %u\\n", blockDim);',
                  f"        fg_twin::launch(blockDim, [&] {{ {name}({cast}); }});",
                  "    });",
                  "    return 0;",
                  "}"]
    return "\n".join(lines) + "\n"
