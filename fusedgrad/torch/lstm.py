"""``LSTM``: a drop-in ``torch.nn.LSTM`` whose forward and backward run fusedgrad's kernels.

Same constructor, parameter names, shapes and initialisation as ``torch.nn.LSTM``
(``load_state_dict`` works both ways), same inputs and outputs: ``forward(input,
hx=None) -> (output, (h_n, c_n))`` with ``batch_first``, unbatched 2-D input and
``PackedSequence`` input (``enforce_sorted`` True or False).

The recurrence is the custom op ``torch.ops.fusedgrad.lstm_forward`` (``train=True``,
saving the activations) whose registered autograd formula is
``torch.ops.fusedgrad.lstm_backward``; it gives gradients for the input, h0, c0 and
every parameter, and ``torch.compile`` sees one opaque op each way.  Without grad (``torch.no_grad()`` or nothing requiring grad) the forward
runs with ``train=False`` and saves nothing.

``PackedSequence`` input is turned into fusedgrad's padded time-major layout
([T·B, I] plus ``batch_sizes``) and the output back into a ``PackedSequence`` with
differentiable torch indexing outside the op, so autograd carries the gradient
through the conversion.

Devices: CPU or CUDA, the module's parameters, the input and hx all on one (a
CUDA call keeps every buffer on the device and launches the cuda target's
kernels on torch's current stream).

Limits: ``dropout`` and ``proj_size`` must be 0 (ValueError otherwise);
float32, float16 and bfloat16 (float16 / bfloat16 computed in float32, as
:func:`fusedgrad.lstm_forward` does).
"""
from __future__ import annotations

import math
import numbers

import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence

from fusedgrad.lstm import lstm_forward
from fusedgrad.tensors import TORCH_DEVICES

from ._ops import lstm_forward_op  # torch.ops.fusedgrad.lstm_forward, with its autograd formula

__all__ = ["LSTM"]

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _packed_index(batch_sizes: torch.Tensor, B: int, device) -> torch.Tensor:
    """Row of each packed element in the padded time-major [T·B] layout: t·B + b (on ``device``)."""
    bs = batch_sizes.tolist()
    return torch.cat([torch.arange(t * B, t * B + n) for t, n in enumerate(bs)]).to(device)


class LSTM(nn.Module):
    """``torch.nn.LSTM`` on fusedgrad's kernels (CPU or CUDA; dropout and proj_size must be 0).

    Parameters are named and shaped as in ``torch.nn.LSTM``
    (``weight_ih_l{k}[_reverse]`` [4H, in], ``weight_hh_l{k}[_reverse]`` [4H, H],
    ``bias_ih_l{k}[_reverse]``, ``bias_hh_l{k}[_reverse]`` [4H], gate order i, f, g, o)
    and initialised the same way (uniform(-1/sqrt(H), 1/sqrt(H)) in registration
    order), so the same seed gives the same weights as ``torch.nn.LSTM``.
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 proj_size: int = 0, device=None, dtype=None) -> None:
        super().__init__()
        for name, v, low in (("input_size", input_size, 0), ("hidden_size", hidden_size, 1),
                             ("num_layers", num_layers, 1)):
            if not isinstance(v, numbers.Integral) or isinstance(v, bool) or v < low:
                raise ValueError(f"{name}: expected an integer >= {low}, got {v!r}")
        if not isinstance(dropout, numbers.Real) or isinstance(dropout, bool) or not 0 <= dropout <= 1:
            raise ValueError(f"dropout: expected a number in [0, 1], got {dropout!r}")
        if dropout != 0:
            raise ValueError(f"dropout: fusedgrad's LSTM does not support dropout between layers; "
                             f"expected 0.0, got {dropout!r} (use torch.nn.LSTM)")
        if not isinstance(proj_size, numbers.Integral) or isinstance(proj_size, bool) or proj_size < 0:
            raise ValueError(f"proj_size: expected an integer >= 0, got {proj_size!r}")
        if proj_size != 0:
            raise ValueError(f"proj_size: fusedgrad's LSTM does not support projections; "
                             f"expected 0, got {proj_size!r} (use torch.nn.LSTM)")
        if device is not None and torch.device(device).type not in TORCH_DEVICES:
            raise ValueError(f"device: expected a CPU or CUDA device, got {device!r}")
        if dtype is not None and dtype not in _DTYPES:
            raise ValueError(f"dtype: expected torch.float32, torch.float16 or torch.bfloat16, got {dtype}")
        self.input_size, self.hidden_size = int(input_size), int(hidden_size)
        self.num_layers, self.bias, self.batch_first = int(num_layers), bool(bias), bool(batch_first)
        self.dropout, self.bidirectional, self.proj_size = float(dropout), bool(bidirectional), 0
        self.mode = "LSTM"
        D, H = 2 if self.bidirectional else 1, self.hidden_size
        factory = {"device": device, "dtype": dtype}
        self._flat_weights_names: list[str] = []
        for layer in range(self.num_layers):
            in_size = self.input_size if layer == 0 else H * D
            for direction in range(D):
                suffix = "_reverse" if direction == 1 else ""
                shapes = [("weight_ih", (4 * H, in_size)), ("weight_hh", (4 * H, H))]
                if self.bias:
                    shapes += [("bias_ih", (4 * H,)), ("bias_hh", (4 * H,))]
                for base, shape in shapes:
                    name = f"{base}_l{layer}{suffix}"
                    setattr(self, name, nn.Parameter(torch.empty(shape, **factory)))
                    self._flat_weights_names.append(name)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """As ``torch.nn.LSTM``: every parameter uniform(-1/sqrt(H), 1/sqrt(H)), in registration order."""
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            nn.init.uniform_(weight, -stdv, stdv)

    @property
    def _flat_weights(self) -> list[torch.Tensor]:
        return [getattr(self, n) for n in self._flat_weights_names]

    @property
    def all_weights(self) -> list[list[nn.Parameter]]:
        per = 4 if self.bias else 2
        w = self._flat_weights
        return [w[k:k + per] for k in range(0, len(w), per)]

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s

    # ------------------------------------------------------------------ forward

    def _run(self, x, h0, c0, batch_first: bool, batch_sizes):
        params = self._flat_weights
        tensors = [x] + ([] if h0 is None else [h0, c0]) + params
        if x.device.type not in TORCH_DEVICES:
            raise RuntimeError(f"input: expected a CPU or CUDA tensor, got a tensor on {x.device}")
        for name, t in zip(["hx"] * (len(tensors) - len(params) - 1) + self._flat_weights_names, tensors[1:]):
            if t.device != x.device:
                raise RuntimeError(f"{name}: expected a tensor on {x.device} (the input's device), got {t.device}")
        if x.dtype not in _DTYPES:
            raise TypeError(f"input: expected dtype float32, float16 or bfloat16, got {x.dtype}")
        for t in tensors[1:]:
            if t.dtype != x.dtype:
                raise TypeError(f"input and parameters / hx must have the same dtype: input is {x.dtype}, "
                                f"got {t.dtype} (nn.LSTM requires this too)")
        if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
            # the custom op (differentiable through fusedgrad::lstm_backward): opaque to torch.compile
            out = lstm_forward_op(x, [] if h0 is None else [h0, c0], list(params), self.bias,
                                  self.num_layers, self.bidirectional, batch_first,
                                  None if batch_sizes is None else torch.tensor(batch_sizes))
            return out[0], out[1], out[2]
        hx = [] if h0 is None else [h0, c0]
        out = lstm_forward(x, hx, params, self.bias, self.num_layers, 0.0, False, self.bidirectional,
                           batch_first=batch_first, batch_sizes=batch_sizes)
        return out[0], out[1], out[2]

    def _check_hx(self, hx, B: int, batched: bool):
        if hx is None:
            return None, None
        if not isinstance(hx, (tuple, list)) or len(hx) != 2:
            raise TypeError(f"hx: expected a tuple (h_0, c_0), got {type(hx).__name__}")
        h0, c0 = hx
        D = 2 if self.bidirectional else 1
        want = (D * self.num_layers, B, self.hidden_size) if batched else (D * self.num_layers, self.hidden_size)
        for name, t in (("h_0", h0), ("c_0", c0)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name}: expected a tensor, got {type(t).__name__}")
            if tuple(t.shape) != want:
                raise RuntimeError(f"{name}: expected shape {list(want)}, got {list(t.shape)}"
                                   + ("" if batched else " (unbatched input takes 2-D hx)"))
        return h0, c0

    def forward(self, input, hx=None):
        """``(output, (h_n, c_n))`` exactly as ``torch.nn.LSTM.forward``."""
        if isinstance(input, PackedSequence):
            return self._forward_packed(input, hx)
        if not isinstance(input, torch.Tensor):
            raise TypeError(f"input: expected a tensor or PackedSequence, got {type(input).__name__}")
        if input.dim() not in (2, 3):
            raise ValueError(f"LSTM: expected input to be 2D or 3D, got {input.dim()}D instead")
        if input.shape[-1] != self.input_size:
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected {self.input_size}, "
                               f"got {input.shape[-1]}")
        batched = input.dim() == 3
        if not batched:  # [T, I]: a batch of one, as nn.LSTM does it
            x = input.unsqueeze(1)
            h0, c0 = self._check_hx(hx, 1, batched=False)
            if h0 is not None:
                h0, c0 = h0.unsqueeze(1), c0.unsqueeze(1)
            output, hy, cy = self._run(x, h0, c0, False, None)
            return output.squeeze(1), (hy.squeeze(1), cy.squeeze(1))
        B = input.shape[0] if self.batch_first else input.shape[1]
        h0, c0 = self._check_hx(hx, B, batched=True)
        output, hy, cy = self._run(input, h0, c0, self.batch_first, None)
        return output, (hy, cy)

    def _forward_packed(self, packed: PackedSequence, hx):
        data, batch_sizes = packed.data, packed.batch_sizes
        sorted_idx, unsorted_idx = packed.sorted_indices, packed.unsorted_indices
        if data.dim() != 2 or data.shape[-1] != self.input_size:
            raise RuntimeError(f"PackedSequence data: expected shape [N, {self.input_size}], got {list(data.shape)}")
        T, B = len(batch_sizes), int(batch_sizes[0])
        h0, c0 = self._check_hx(hx, B, batched=True)
        if h0 is not None and sorted_idx is not None:  # hx is in the caller's order; the packed batch is sorted
            h0, c0 = h0.index_select(1, sorted_idx), c0.index_select(1, sorted_idx)
        idx = _packed_index(batch_sizes, B, data.device)
        x = data.new_zeros((T * B, data.shape[1])).index_copy(0, idx, data)  # differentiable w.r.t. data
        output, hy, cy = self._run(x, h0, c0, False, tuple(batch_sizes.tolist()))
        out = PackedSequence(output.index_select(0, idx), batch_sizes, sorted_idx, unsorted_idx)
        if unsorted_idx is not None:
            hy, cy = hy.index_select(1, unsorted_idx), cy.index_select(1, unsorted_idx)
        return out, (hy, cy)
