"""The DSP library's code size on a Cortex-M4F: .text of each op's file per chip, at -Os and -O2.

    python benchmarks/dsp_code_size.py [--generated generated/dsp] [--cc arm-none-eabi-gcc]

Each of generated/dsp/<chip>/<op>.c is compiled on its own as a freestanding object
(``-mcpu=cortex-m4 -mthumb -mfpu=fpv4-sp-d16 -mfloat-abi=hard -mfp16-format=ieee -ffunction-sections``)
and ``arm-none-eabi-size`` gives its .text; a chip with float16 has both dtypes' entry points in a
file.  Prints a markdown table (bytes and KiB) and the compiler's version line; docs/dsp-code-size.md
keeps the table.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("lstm.c", "lstmgrad.c", "lstmcellgrad.c", "layernormgrad.c")
FLAGS = ["-std=c99", "-ffreestanding", "-mcpu=cortex-m4", "-mthumb", "-mfpu=fpv4-sp-d16", "-mfloat-abi=hard",
         "-mfp16-format=ieee", "-ffunction-sections", "-c"]
LEVELS = ("-Os", "-O2")


def text_bytes(cc: str, size: str, source: Path, level: str, out: Path) -> int:
    """.text of ``source`` compiled alone at ``level``."""
    subprocess.run([cc, *FLAGS, level, f"-I{source.parent}", "-o", str(out), str(source)], check=True)
    lines = subprocess.run([size, "-A", str(out)], check=True, capture_output=True, text=True).stdout.splitlines()
    return sum(int(line.split()[1]) for line in lines if line.startswith(".text"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--generated", type=Path, default=ROOT / "generated" / "dsp")
    ap.add_argument("--cc", default="arm-none-eabi-gcc")
    ap.add_argument("--size", default="arm-none-eabi-size")
    args = ap.parse_args(argv)
    version = subprocess.run([args.cc, "--version"], check=True, capture_output=True, text=True).stdout.splitlines()[0]
    print(f"{version}; {' '.join(FLAGS)}\n")
    print("| chip | file | " + " | ".join(f".text {lv}" for lv in LEVELS) + " |")
    print("|---|---|" + "---:|" * len(LEVELS))
    with tempfile.TemporaryDirectory() as tmp:
        for chip in sorted(p.name for p in args.generated.iterdir() if p.is_dir()):
            for name in SOURCES:
                sizes = [text_bytes(args.cc, args.size, args.generated / chip / name, lv, Path(tmp) / "out.o")
                         for lv in LEVELS]
                print(f"| {chip} | {name} | " + " | ".join(f"{b} ({b / 1024:.1f} KiB)" for b in sizes) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
