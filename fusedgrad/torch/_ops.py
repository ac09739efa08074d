"""fusedgrad's kernels as ``torch.library`` custom ops, and the public functions built on them.

Custom ops (namespace ``fusedgrad``), each with a fake (meta) implementation so
that ``torch.compile(fullgraph=True)`` and ``torch.export`` trace them without
graph breaks::

    fusedgrad::lstm_cell_backward(Tensor? grad_hy, Tensor? grad_cy, Tensor cx, Tensor cy, Tensor workspace,
                                  bool has_bias) -> (Tensor grad_gates, Tensor grad_cx, Tensor grad_bias)
    fusedgrad::layer_norm_backward(Tensor x, Tensor dy, Tensor mean, Tensor var, Tensor gamma, float eps)
                                  -> (Tensor dx, Tensor dgamma, Tensor dbeta)
    fusedgrad::lstm_forward(Tensor input, Tensor[] hx, Tensor[] params, bool has_biases, int num_layers,
                            bool bidirectional, bool batch_first, Tensor? batch_sizes)
                            -> (Tensor output, Tensor hy, Tensor cy, Tensor i, Tensor j, Tensor f, Tensor o,
                                Tensor h, Tensor c, Tensor tanhc)
    fusedgrad::lstm_backward(Tensor grad_y, Tensor? grad_hy, Tensor? grad_cy, Tensor input, Tensor[] hx,
                             Tensor[] params, Tensor i, Tensor j, Tensor f, Tensor o, Tensor h, Tensor c,
                             Tensor tanhc, bool has_biases, int num_layers, bool bidirectional,
                             bool batch_first, Tensor? batch_sizes)
                             -> (Tensor dx, Tensor dh0, Tensor dc0, Tensor[] dparams)

Conventions:

- ``fusedgrad::lstm_cell_backward`` returns ``grad_bias`` as an empty tensor of
  shape [0] (dtype of ``cx``) when ``has_bias`` is False: an op's output count
  is fixed by its schema.  :func:`thnn_fused_lstm_cell_backward` turns it into
  None, as ``torch._thnn_fused_lstm_cell_backward_impl`` does (its CUDA and CPU
  kernels return an undefined tensor).  With both gradients None torch returns
  (None, None, None) without computing anything; the public function does the
  same, while the op itself computes the exact zeros the kernel defines.
- The LSTM ops are ``fusedgrad.lstm_forward`` / ``lstm_backward`` with dropout
  0 and train True (the backward consumes the saved activations).  ``hx`` is
  ``[h0, c0]`` or ``[]`` (zeros); ``batch_sizes`` is an integer tensor [T] or
  None (see docs/lstm.md).  ``lstm_backward`` returns ``dh0``/``dc0`` as
  two outputs instead of the API's ``[dh0, dc0]`` list.
- Every output is a fresh tensor (never a view of an input, nor of another
  output).  Inputs are passed to the kernels as they are (DLPack, zero-copy;
  see ``fusedgrad.api``).
- Devices: every op takes CPU or CUDA tensors, all on one device (the LSTM's
  ``batch_sizes`` may stay on the CPU, as torch's own packed sequences keep
  it).  CUDA runs the cuda target's kernels on torch's current stream, from
  ``$FUSEDGRAD_ARTIFACTS`` or built on first use, which needs nvcc; the LSTM
  keeps every buffer on the tensors' device.  A tensor on another device
  raises a ValueError naming the argument; the fake implementations accept
  meta tensors too and raise the same error otherwise, so tracing an
  unsupported program fails at trace time, not at run time.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch

from .. import api as _api
from .. import lstm as _lstm
from ..tensors import NP_DTYPES, TORCH_DEVICES, dtype_text

__all__ = ["thnn_fused_lstm_cell_backward", "layer_norm", "lstm_cell_backward_op", "layer_norm_backward_op",
           "lstm_forward_op", "lstm_backward_op"]


# --------------------------------------------------------------------------- device checks


def _check_device(name: str, t, allow_meta: bool = False) -> None:
    if t is None:
        return
    if isinstance(t, (list, tuple)):
        for k, v in enumerate(t):
            _check_device(f"{name}[{k}]", v, allow_meta)
        return
    dev = t.device.type
    if dev in TORCH_DEVICES or (allow_meta and dev == "meta"):
        return
    raise ValueError(f"{name}: expected a CPU or CUDA tensor, got a tensor on device {t.device}")


def _check_devices(named: dict, allow_meta: bool = False, host_ok=()) -> None:
    """Each tensor on the CPU or a CUDA device and all on one device; those named in ``host_ok``
    may instead be on the CPU (host-side data such as an LSTM's batch_sizes)."""
    for name, t in named.items():
        _check_device(name, t, allow_meta)
    first = None
    for name, t in named.items():
        for k, v in enumerate(t if isinstance(t, (list, tuple)) else [t]):
            if v is None or (name in host_ok and v.device.type == "cpu"):
                continue
            label = f"{name}[{k}]" if isinstance(t, (list, tuple)) else name
            if first is None:
                first = (label, v.device)
            elif v.device != first[1]:
                raise ValueError(f"{label}: expected a tensor on {first[1]} (the device of {first[0]}), "
                                 f"got {v.device}")


# --------------------------------------------------------------------------- lstm_cell_backward


def _lstm_cell_backward_impl(grad_hy: Optional[torch.Tensor], grad_cy: Optional[torch.Tensor], cx: torch.Tensor,
                             cy: torch.Tensor, workspace: torch.Tensor,
                             has_bias: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    _check_devices({"grad_hy": grad_hy, "grad_cy": grad_cy, "cx": cx, "cy": cy, "workspace": workspace})
    try:
        grad_gates, grad_cx, grad_bias = _api.lstm_cell_backward(grad_hy, grad_cy, cx, cy, workspace, has_bias)
    except (TypeError, ValueError) as e:  # the API names the argument "storage"
        raise type(e)(str(e).replace("storage", "workspace")) from None
    if grad_bias is None:
        grad_bias = cx.new_empty((0,))
    return grad_gates, grad_cx, grad_bias


lstm_cell_backward_op = torch.library.custom_op(
    "fusedgrad::lstm_cell_backward", _lstm_cell_backward_impl, mutates_args=(),
    schema="(Tensor? grad_hy, Tensor? grad_cy, Tensor cx, Tensor cy, Tensor workspace, bool has_bias) "
           "-> (Tensor, Tensor, Tensor)")


@lstm_cell_backward_op.register_fake
def _lstm_cell_backward_fake(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    _check_devices({"grad_hy": grad_hy, "grad_cy": grad_cy, "cx": cx, "cy": cy, "workspace": workspace},
                   allow_meta=True)
    torch._check(workspace.dim() == 2 and cx.dim() == 2,
                 lambda: f"workspace, cx: expected [N, 4H] and [N, H], got {list(workspace.shape)}, {list(cx.shape)}")
    torch._check(workspace.shape[1] == 4 * cx.shape[1],
                 lambda: f"workspace: expected shape [N, 4H] with H = cx.shape[1], got {list(workspace.shape)}")
    grad_gates = workspace.new_empty(workspace.shape)
    grad_cx = cx.new_empty(cx.shape)
    grad_bias = workspace.new_empty((workspace.shape[1],) if has_bias else (0,))
    return grad_gates, grad_cx, grad_bias


def thnn_fused_lstm_cell_backward(grad_hy, grad_cy, cx, cy, workspace, has_bias: bool):
    """``torch._thnn_fused_lstm_cell_backward_impl`` on fusedgrad's kernel.

    grad_hy, grad_cy [N, H] (either may be None), cx, cy [N, H], workspace
    [N, 4H] (activated gates i, f, g, o).  Returns (grad_gates [N, 4H],
    grad_cx [N, H], grad_bias [4H] or None when ``has_bias`` is False); with
    both gradients None, (None, None, None), like torch.
    """
    if grad_hy is None and grad_cy is None:
        return None, None, None
    grad_gates, grad_cx, grad_bias = lstm_cell_backward_op(grad_hy, grad_cy, cx, cy, workspace, has_bias)
    return grad_gates, grad_cx, (grad_bias if has_bias else None)


# --------------------------------------------------------------------------- layer_norm_backward


def _layer_norm_backward_impl(x: torch.Tensor, dy: torch.Tensor, mean: torch.Tensor, var: torch.Tensor,
                              gamma: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    _check_devices({"x": x, "dy": dy, "mean": mean, "var": var, "gamma": gamma})
    dx, dgamma, dbeta = _api.layer_norm_backward(x, dy, mean, var, gamma, eps)
    return dx, dgamma, dbeta


layer_norm_backward_op = torch.library.custom_op(
    "fusedgrad::layer_norm_backward", _layer_norm_backward_impl, mutates_args=(),
    schema="(Tensor x, Tensor dy, Tensor mean, Tensor var, Tensor gamma, float eps) -> (Tensor, Tensor, Tensor)")


@layer_norm_backward_op.register_fake
def _layer_norm_backward_fake(x, dy, mean, var, gamma, eps):
    _check_devices({"x": x, "dy": dy, "mean": mean, "var": var, "gamma": gamma}, allow_meta=True)
    torch._check(x.dim() >= 1, lambda: "x: expected shape [..., D]")
    D = x.shape[-1]
    return x.new_empty(x.shape), x.new_empty((D,)), x.new_empty((D,))


class _LayerNorm(torch.autograd.Function):
    """y = LayerNorm over the last axis of x2 [..., D]; backward through fusedgrad::layer_norm_backward."""

    @staticmethod
    def forward(x2, weight, bias, eps):
        D = x2.shape[-1]
        out, mean, rstd = torch.ops.aten.native_layer_norm(x2, [D], weight, bias, eps)
        if x2.dtype == torch.float32:
            # var = 1/rstd^2 - eps: its absolute error is a few ulp of var + eps, and the kernel only
            # ever uses var + eps, so nothing is lost (clamped: rounding may dip below zero)
            var = (rstd.reciprocal().square() - eps).clamp_min(0.0)
        else:
            # torch keeps mean/rstd in the input dtype here: recompute both in float32, round once
            v, m = torch.var_mean(x2.float(), dim=-1, correction=0, keepdim=True)
            var, mean = v.to(x2.dtype), m.to(x2.dtype)
        return out, mean.squeeze(-1), var.squeeze(-1)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x2, weight, bias, eps = inputs
        _, mean, var = output
        ctx.save_for_backward(x2, weight, mean, var)
        ctx.eps = eps
        ctx.has_weight = weight is not None
        ctx.has_bias = bias is not None
        ctx.mark_non_differentiable(mean, var)

    @staticmethod
    def backward(ctx, dy, _dmean, _dvar):
        x2, weight, mean, var = ctx.saved_tensors
        D = x2.shape[-1]
        gamma = weight if weight is not None else x2.new_ones((D,))
        dx, dgamma, dbeta = layer_norm_backward_op(x2, dy.contiguous(), mean, var, gamma, ctx.eps)
        return (dx, dgamma if ctx.has_weight else None, dbeta if ctx.has_bias else None, None)


def layer_norm(x: torch.Tensor, normalized_shape, weight: Optional[torch.Tensor] = None,
               bias: Optional[torch.Tensor] = None, eps: float = 1e-5) -> torch.Tensor:
    """``torch.nn.functional.layer_norm`` whose backward runs fusedgrad's kernel.

    The forward is torch's (``aten.native_layer_norm``); the normalized
    trailing dims are flattened to one axis D for the kernel.  Gradients flow
    to x, weight and bias (once differentiable: the backward op has no
    autograd formula of its own).  x must be float32, float16 or bfloat16 and
    weight of x's dtype, as the kernel takes them: others raise a TypeError
    here, not in the backward.
    """
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    normalized_shape = tuple(normalized_shape)
    k = len(normalized_shape)
    if k == 0 or tuple(x.shape[x.dim() - k:]) != normalized_shape or x.dim() < k:
        raise ValueError(f"normalized_shape: expected the trailing dims of x {list(x.shape)}, "
                         f"got {list(normalized_shape)}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != normalized_shape:
            raise ValueError(f"{name}: expected shape {list(normalized_shape)}, got {list(t.shape)}")
    _check_devices({"x": x, "weight": weight, "bias": bias}, allow_meta=True)
    # the backward kernel's dtypes (the bias is not one of its arguments)
    if dtype_text(x.dtype) not in NP_DTYPES:
        raise TypeError(f"x: expected dtype float32, float16 or bfloat16, got {dtype_text(x.dtype)}")
    if weight is not None and weight.dtype != x.dtype:
        raise TypeError(f"weight: expected dtype {dtype_text(x.dtype)} (the dtype of x), "
                        f"got {dtype_text(weight.dtype)}")
    lead = x.shape[:x.dim() - k]
    D = 1
    for s in normalized_shape:
        D *= s
    x2 = x.reshape(*lead, D)
    w2 = weight.reshape(D) if weight is not None else None
    b2 = bias.reshape(D) if bias is not None else None
    out, _, _ = _LayerNorm.apply(x2, w2, b2, float(eps))
    return out.reshape(x.shape)


# --------------------------------------------------------------------------- full LSTM


def _lstm_dims(input, params, has_biases, num_layers, bidirectional, batch_first, batch_sizes):
    """(T, B, H, D·L) from the shapes alone (works on fake / symbolic shapes)."""
    D = 2 if bidirectional else 1
    per = 4 if has_biases else 2
    torch._check(len(params) == num_layers * D * per,
                 lambda: f"params: expected {num_layers * D * per} tensors, got {len(params)}")
    H = params[1].shape[1]
    if batch_sizes is not None:
        T = batch_sizes.shape[0]
        B = input.shape[0] // T
    elif batch_first:
        B, T = input.shape[0], input.shape[1]
    else:
        T, B = input.shape[0], input.shape[1]
    return T, B, H, D * num_layers


def _span(t: torch.Tensor) -> tuple[int, int]:
    st = t.untyped_storage()
    return st.data_ptr(), st.data_ptr() + st.nbytes()


def _fresh(outs: Sequence[torch.Tensor], inputs: Sequence[Optional[torch.Tensor]]) -> list[torch.Tensor]:
    """The outputs, contiguous and each with memory of its own: a custom op must not return aliases
    (of its inputs or of each other).  fusedgrad.lstm's outputs already are; this only guarantees it."""
    taken = [_span(t) for t in inputs if t is not None and t.numel()]
    res = []
    for t in outs:
        t = t.contiguous()
        if t.numel():
            lo, hi = _span(t)
            if any(lo < b and a < hi for a, b in taken):
                t = t.clone()
                lo, hi = _span(t)
            taken.append((lo, hi))
        res.append(t)
    return res


def _lstm_forward_impl(input: torch.Tensor, hx: list[torch.Tensor], params: list[torch.Tensor], has_biases: bool,
                       num_layers: int, bidirectional: bool, batch_first: bool,
                       batch_sizes: Optional[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    _check_devices({"input": input, "hx": hx, "params": params, "batch_sizes": batch_sizes},
                   host_ok=("batch_sizes",))
    outs = _lstm.lstm_forward(input, list(hx), list(params), has_biases, num_layers, 0.0, True, bidirectional,
                              batch_first, batch_sizes)
    return tuple(_fresh(outs, [input, *hx, *params]))


lstm_forward_op = torch.library.custom_op(
    "fusedgrad::lstm_forward", _lstm_forward_impl, mutates_args=(),
    schema="(Tensor input, Tensor[] hx, Tensor[] params, bool has_biases, int num_layers, bool bidirectional, "
           "bool batch_first, Tensor? batch_sizes) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, "
           "Tensor, Tensor, Tensor)")


@lstm_forward_op.register_fake
def _lstm_forward_fake(input, hx, params, has_biases, num_layers, bidirectional, batch_first, batch_sizes):
    _check_devices({"input": input, "hx": hx, "params": params, "batch_sizes": batch_sizes}, allow_meta=True,
                   host_ok=("batch_sizes",))
    T, B, H, LD = _lstm_dims(input, params, has_biases, num_layers, bidirectional, batch_first, batch_sizes)
    DH = (2 if bidirectional else 1) * H
    if batch_sizes is not None:
        out_shape = (input.shape[0], DH)
    else:
        out_shape = (input.shape[0], input.shape[1], DH)
    output = input.new_empty(out_shape)
    hy, cy = input.new_empty((LD, B, H)), input.new_empty((LD, B, H))
    saved = [input.new_empty((LD, T, B, H)) for _ in range(7)]
    return (output, hy, cy, *saved)


def _lstm_backward_impl(grad_y: torch.Tensor, grad_hy: Optional[torch.Tensor], grad_cy: Optional[torch.Tensor],
                        input: torch.Tensor, hx: list[torch.Tensor], params: list[torch.Tensor], i: torch.Tensor,
                        j: torch.Tensor, f: torch.Tensor, o: torch.Tensor, h: torch.Tensor, c: torch.Tensor,
                        tanhc: torch.Tensor, has_biases: bool, num_layers: int, bidirectional: bool,
                        batch_first: bool, batch_sizes: Optional[torch.Tensor], need_dx: bool = True):
    _check_devices({"grad_y": grad_y, "grad_hy": grad_hy, "grad_cy": grad_cy, "input": input, "hx": hx,
                    "params": params, "i": i, "j": j, "f": f, "o": o, "h": h, "c": c, "tanhc": tanhc,
                    "batch_sizes": batch_sizes}, host_ok=("batch_sizes",))
    dx, (dh0, dc0), dparams = _lstm.backward(
        grad_y, grad_hy, grad_cy, input, list(hx), list(params), i, j, f, o, h, c, tanhc, has_biases, num_layers,
        0.0, True, bidirectional, batch_first, batch_sizes, need_dx=need_dx)
    if dx is None:  # not asked for: an empty tensor (the schema returns a Tensor)
        dx = input.new_empty((0,))
    outs = _fresh([dx, dh0, dc0, *dparams],
                  [grad_y, grad_hy, grad_cy, input, *hx, *params, i, j, f, o, h, c, tanhc])
    return outs[0], outs[1], outs[2], outs[3:]


lstm_backward_op = torch.library.custom_op(
    "fusedgrad::lstm_backward", _lstm_backward_impl, mutates_args=(),
    schema="(Tensor grad_y, Tensor? grad_hy, Tensor? grad_cy, Tensor input, Tensor[] hx, Tensor[] params, "
           "Tensor i, Tensor j, Tensor f, Tensor o, Tensor h, Tensor c, Tensor tanhc, bool has_biases, "
           "int num_layers, bool bidirectional, bool batch_first, Tensor? batch_sizes, bool need_dx=True) "
           "-> (Tensor, Tensor, Tensor, Tensor[])")


@lstm_backward_op.register_fake
def _lstm_backward_fake(grad_y, grad_hy, grad_cy, input, hx, params, i, j, f, o, h, c, tanhc, has_biases,
                        num_layers, bidirectional, batch_first, batch_sizes, need_dx=True):
    _check_devices({"grad_y": grad_y, "grad_hy": grad_hy, "grad_cy": grad_cy, "input": input, "hx": hx,
                    "params": params, "i": i, "j": j, "f": f, "o": o, "h": h, "c": c, "tanhc": tanhc,
                    "batch_sizes": batch_sizes}, allow_meta=True, host_ok=("batch_sizes",))
    T, B, H, LD = _lstm_dims(input, params, has_biases, num_layers, bidirectional, batch_first, batch_sizes)
    dx = input.new_empty(input.shape if need_dx else (0,))
    dh0, dc0 = input.new_empty((LD, B, H)), input.new_empty((LD, B, H))
    return dx, dh0, dc0, [p.new_empty(p.shape) for p in params]


# --------------------------------------------------------------------------- autograd of the full LSTM op


def _lstm_forward_setup(ctx, inputs, output):
    input, hx, params, has_biases, num_layers, bidirectional, batch_first, batch_sizes = inputs
    ctx.flags = (has_biases, num_layers, bidirectional, batch_first)
    ctx.n_hx, ctx.n_params = len(hx), len(params)
    # unused outputs (the seven saved activations, often hy/cy) get None, not
    # materialised zero tensors: at (50,32,256,256,2,2) those zeros cost ~40 ms
    ctx.set_materialize_grads(False)
    ctx.has_batch_sizes = batch_sizes is not None
    extra = [batch_sizes] if batch_sizes is not None else []
    ctx.save_for_backward(input, *hx, *params, *output[3:], *extra)


def _lstm_forward_backward(ctx, grad_y, grad_hy, grad_cy, *_saved_outputs_grads):
    has_biases, num_layers, bidirectional, batch_first = ctx.flags
    saved = list(ctx.saved_tensors)
    input = saved.pop(0)
    hx = [saved.pop(0) for _ in range(ctx.n_hx)]
    params = [saved.pop(0) for _ in range(ctx.n_params)]
    acts = [saved.pop(0) for _ in range(7)]
    batch_sizes = saved.pop(0) if ctx.has_batch_sizes else None
    if grad_y is None:  # output unused: its gradient is zero
        _, B, H, _ = _lstm_dims(input, params, has_biases, num_layers, bidirectional, batch_first, batch_sizes)
        D = 2 if bidirectional else 1
        grad_y = input.new_zeros((*input.shape[:-1], D * H))
    need_dx = ctx.needs_input_grad[0]
    dx, dh0, dc0, dparams = torch.ops.fusedgrad.lstm_backward(
        grad_y, grad_hy, grad_cy, input, hx, params, *acts, has_biases, num_layers, bidirectional, batch_first,
        batch_sizes, need_dx)
    return (dx if need_dx else None), ([dh0, dc0] if ctx.n_hx else []), list(dparams), None, None, None, None, None


# fusedgrad::lstm_forward is differentiable in input, hx and params through fusedgrad::lstm_backward,
# so torch.compile / torch.export see one opaque op each way
lstm_forward_op.register_autograd(_lstm_forward_backward, setup_context=_lstm_forward_setup)
