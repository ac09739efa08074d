"""fusedgrad: backward kernels generated with Apache TVM from one definition per op."""
from .version import __version__
from .api import layer_norm_backward, lstm_cell_backward
from .lstm import lstm_backward, lstm_forward

__all__ = ["__version__", "lstm_cell_backward", "layer_norm_backward", "lstm_forward", "lstm_backward"]
