"""The ``fusedgrad`` command's entry point: it runs fusedgrad.cli, and says so on stderr when
loading TVM and the kernel modules takes more than NOTICE_S seconds (about 20 s on a cold start)."""
from __future__ import annotations

import sys
import threading

NOTICE_S = 2.0


def main(argv=None) -> int:
    notice = threading.Timer(NOTICE_S, lambda: print("fusedgrad: loading TVM and the kernel definitions "
                                                     "(about 20 s on a cold start) ...", file=sys.stderr, flush=True))
    notice.daemon = True
    notice.start()
    try:
        from . import cli
    finally:
        notice.cancel()
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main())
