"""fusedgrad: backward kernels generated with Apache TVM from one definition per op.

The API's functions are imported on first use (PEP 562): ``import fusedgrad`` alone does not
load TVM, which takes about 20 s on a cold start, so the command line can say so first.
"""
from .version import __version__

__all__ = ["__version__", "lstm_cell_backward", "layer_norm_backward", "lstm_forward", "lstm_backward"]
_MODULE = {"lstm_cell_backward": "api", "layer_norm_backward": "api", "lstm_forward": "lstm", "lstm_backward": "lstm"}


def __getattr__(name: str):
    if name in _MODULE:
        from importlib import import_module

        value = getattr(import_module(f".{_MODULE[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'fusedgrad' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_MODULE))
