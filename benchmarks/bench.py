"""Run the fusedgrad benchmarks (same as `fusedgrad bench`):

    python benchmarks/bench.py [--op OP] [--dtype DT] [--rounds N] [--plot FILE.png]
"""
import sys

from fusedgrad.bench import main

if __name__ == "__main__":
    sys.exit(main())
