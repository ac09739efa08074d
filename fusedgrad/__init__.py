"""fusedgrad: backward kernels generated with Apache TVM from one definition per op.

The API's functions are imported on first use (PEP 562): ``import fusedgrad`` alone does not
load TVM, which takes about 20 s on a cold start, so the command line can say so first.
"""
from .version import __version__

__all__ = ["__version__", "lstm_cell_backward", "layer_norm_backward", "lstm_forward", "lstm_backward"]
_MODULE = {"lstm_cell_backward": "api", "layer_norm_backward": "api", "lstm_forward": "lstm", "lstm_backward": "lstm"}


def __getattr__(name: str):
    """The API's functions, and the submodules (``fusedgrad.api``, ``fusedgrad.runtime``...), on first use."""
    from importlib import import_module

    if name in _MODULE:
        value = getattr(import_module(f".{_MODULE[name]}", __name__), name)
    else:
        try:
            value = import_module(f".{name}", __name__)
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise  # the submodule exists; something it imports does not
            raise AttributeError(f"module 'fusedgrad' has no attribute {name!r}") from None
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_MODULE))
