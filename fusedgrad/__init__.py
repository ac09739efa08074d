"""fusedgrad: backward kernels generated with Apache TVM from one definition per op."""
__version__ = "0.1.0"

from .api import layer_norm_backward, lstm_cell_backward  # noqa: E402
from .lstm import lstm_backward, lstm_forward  # noqa: E402

__all__ = ["__version__", "lstm_cell_backward", "layer_norm_backward", "lstm_forward", "lstm_backward"]
