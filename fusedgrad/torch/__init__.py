"""PyTorch integration: fusedgrad's kernels as torch custom ops, autograd modules and functions.

Imported only on request (``import fusedgrad.torch``); needs torch.

- ``LSTM``: drop-in ``torch.nn.LSTM`` (same constructor, parameters, inputs
  and outputs, PackedSequence included) whose forward and backward run
  fusedgrad's full-LSTM kernels.
- ``layer_norm(x, normalized_shape, weight, bias, eps)``: ``F.layer_norm``
  whose backward is fusedgrad's LayerNorm backward.
- ``thnn_fused_lstm_cell_backward(grad_hy, grad_cy, cx, cy, workspace,
  has_bias)``: ``torch._thnn_fused_lstm_cell_backward_impl`` on the CPU.
- The custom ops ``torch.ops.fusedgrad.{lstm_cell_backward,
  layer_norm_backward, lstm_forward, lstm_backward}`` with fake (meta)
  implementations, for ``torch.compile`` and ``torch.export``.

CPU and CUDA tensors (CUDA runs the cuda target's kernels on torch's current
stream; the LSTM keeps all its buffers on the device).
"""
from ._ops import layer_norm, thnn_fused_lstm_cell_backward
from .lstm import LSTM

__all__ = ["LSTM", "layer_norm", "thnn_fused_lstm_cell_backward"]
