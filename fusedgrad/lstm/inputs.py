"""Validation and layout of the LSTM's public arguments.

:func:`parse` checks every argument of ``lstm_forward`` / ``lstm_backward`` and
returns the :class:`~fusedgrad.lstm.Config` they describe; :class:`Inputs`
says where the call runs (:func:`arrays_for`: host memory for numpy arrays and
CPU tensors, the tensors' device for torch CUDA tensors), converts the tensors
to float32 arrays there and the results back to the caller's kind and dtype;
the layout helpers move rows between the public layouts (batch_first, packed
variable-length) and the time-major [T·B, width] rows the kernels read.
"""
from __future__ import annotations

import numbers
from typing import Any, Sequence

import numpy as np

from ..tensors import INDEX_MAX, NP_DTYPES, TORCH_DEVICES, classify, dtype_text, torch_module
from .buffers import HOST, TorchArrays, gemm_dtype_for
from .config import Config

F32 = np.float32


def arrays_for(kind: str, device, dtype: str):
    """Where a call on ``dtype`` tensors of ``kind`` on ``device`` keeps its buffers: host memory
    (numpy, the llvm kernels) for numpy arrays and CPU tensors, else torch tensors on the tensors'
    device, with its GEMMs on tensor cores where the device has them for a 16-bit call, and for a
    float32 call in TF32 where ``torch.backends.cudnn.allow_tf32`` says so (its default: yes), as
    ``torch.nn.LSTM`` on cuDNN does (``buffers.gemm_dtype_for``)."""
    if kind == "torch" and device.type != "cpu":
        tf32 = bool(torch_module().backends.cudnn.allow_tf32)
        return TorchArrays(device, gemm_dtype_for(TORCH_DEVICES[device.type], dtype, tf32=tf32))
    return HOST


class Inputs:
    """Validated inputs: kind, dtype and device shared by all, converted to float32 arrays where
    the call runs (``arrays``)."""

    def __init__(self, kind: str, dtype: str, device=None):
        self.kind, self.dtype, self.device = kind, dtype, device
        self.arrays = arrays_for(kind, device, dtype)

    @staticmethod
    def gather(named: Sequence[tuple[str, Any]]) -> "Inputs":
        first_name, first = named[0]
        kind, obj = classify(first_name, first)
        dtype = dtype_text(obj.dtype)
        if dtype not in NP_DTYPES:
            raise TypeError(f"{first_name}: expected dtype float32, float16 or bfloat16, got {dtype}")
        device = obj.device if kind == "torch" else None
        for name, value in named[1:]:
            k, obj = classify(name, value)
            if k != kind:
                raise TypeError(f"{name}: expected a {'torch tensor' if kind == 'torch' else 'numpy array'} "
                                f"like {first_name}, got {type(value).__name__}")
            if dtype_text(obj.dtype) != dtype:
                raise TypeError(f"{name}: expected dtype {dtype} (the dtype of {first_name}), "
                                f"got {dtype_text(obj.dtype)}")
            if kind == "torch" and obj.device != device:
                raise ValueError(f"{name}: expected a tensor on {device} (the device of {first_name}), "
                                 f"got {obj.device}")
        return Inputs(kind, dtype, device)

    def f32(self, value):
        """A C-contiguous float32 array where the call runs (no copy for contiguous, writable float32
        input)."""
        _, a = classify("tensor", value)  # validated by gather: detaches torch
        if self.kind == "torch":
            a = (a if a.dtype == torch_module().float32 else a.float()).contiguous()
            return a if self.arrays is not HOST else np.ascontiguousarray(a.numpy())
        a = np.ascontiguousarray(a, dtype=F32)
        return a if a.flags.writeable else a.copy()  # the kernels take no read-only arrays (DLPack)

    def out(self, a):
        """A float32 result as the caller's kind and dtype."""
        if self.kind == "torch":
            torch = torch_module()
            t = a if self.arrays is not HOST else torch.from_numpy(a)
            return t if self.dtype == "float32" else t.to(getattr(torch, self.dtype))
        return a if self.dtype == "float32" else a.astype(NP_DTYPES[self.dtype])


def shape_of(value) -> tuple[int, ...]:
    return tuple(int(s) for s in value.shape)


def _check_flags(has_biases, num_layers, dropout, train, bidirectional, batch_first) -> None:
    for name, v in (("has_biases", has_biases), ("train", train), ("bidirectional", bidirectional),
                    ("batch_first", batch_first)):
        if not isinstance(v, (bool, np.bool_)):
            raise TypeError(f"{name}: expected a bool, got {type(v).__name__}")
    if not isinstance(num_layers, numbers.Integral) or isinstance(num_layers, (bool, np.bool_)) or num_layers < 1:
        raise ValueError(f"num_layers: expected an integer >= 1, got {num_layers!r}")
    if not isinstance(dropout, numbers.Real) or float(dropout) != 0.0:
        raise ValueError(f"dropout: expected 0.0 (dropout between layers is not supported), got {dropout!r}")


def last_steps(bs: np.ndarray) -> list[tuple[int, int, int]]:
    """(t, b0, b1): the rows b0..b1-1 whose last step is t, for every t that is some row's last.

    The batch sizes do not increase, so such rows are a contiguous run and plain slices reach
    them (no index tensors: nothing is copied from the host while a call runs)."""
    ends = [int(v) for v in bs[1:]] + [0]
    return [(t, ends[t], int(bs[t])) for t in range(len(bs)) if ends[t] < bs[t]]


def _torch_sizes(t) -> np.ndarray:
    """A batch_sizes tensor's values, read to the host: a tensor without readable integer values
    (sparse, nested, on the meta device, floating point) is refused by name first."""
    torch = torch_module()
    if t.is_nested or t.layout != torch.strided:
        got = "a nested tensor" if t.is_nested else f"layout {dtype_text(t.layout)}"
        raise TypeError(f"batch_sizes: expected a dense (strided) tensor, got {got}")
    if t.device.type not in TORCH_DEVICES:
        raise ValueError(f"batch_sizes: expected a tensor on device cpu or cuda (its values are read), got {t.device}")
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        raise TypeError(f"batch_sizes: expected integers, got dtype {dtype_text(t.dtype)}")
    return t.detach().cpu().numpy()


def _batch_sizes(batch_sizes) -> np.ndarray:
    if isinstance(batch_sizes, np.ndarray) or isinstance(batch_sizes, (list, tuple)):
        bs = np.asarray(batch_sizes)
    elif torch_module() is not None and isinstance(batch_sizes, torch_module().Tensor):
        bs = _torch_sizes(batch_sizes)
    else:
        raise TypeError(f"batch_sizes: expected a list or an integer numpy/torch array, got {type(batch_sizes).__name__}")
    if bs.ndim != 1 or bs.size == 0:
        raise ValueError(f"batch_sizes: expected a non-empty 1-D sequence [T], got shape {list(bs.shape)}")
    if bs.dtype.kind not in "iu" and not (bs.dtype == object and all(isinstance(v, numbers.Integral) for v in bs)):
        raise TypeError(f"batch_sizes: expected integers, got dtype {bs.dtype}")
    if bs.dtype.kind != "i" and any(int(v) > np.iinfo(np.int64).max for v in bs.tolist()):  # uint64, Python ints
        raise ValueError(f"batch_sizes: expected entries below 2**63, got {[int(v) for v in bs]}")
    bs = bs.astype(np.int64)
    if (bs <= 0).any():
        raise ValueError(f"batch_sizes: expected every entry > 0, got {bs.tolist()}")
    if (np.diff(bs) > 0).any():
        raise ValueError(f"batch_sizes: expected non-increasing sizes, got {bs.tolist()}")
    return bs


def parse(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first, batch_sizes,
           extra: Sequence[tuple[str, Any]] = ()):
    """Validate everything; returns (Config, Inputs, batch sizes [T], hx as a list)."""
    _check_flags(has_biases, num_layers, dropout, train, bidirectional, batch_first)
    L, D = int(num_layers), 2 if bidirectional else 1
    if not isinstance(params, (list, tuple)):
        raise TypeError(f"params: expected a list of tensors, got {type(params).__name__}")
    per = 4 if has_biases else 2
    if len(params) != L * D * per:
        raise ValueError(f"params: expected {L * D * per} tensors for num_layers={L}, "
                         f"bidirectional={bool(bidirectional)}, has_biases={bool(has_biases)} "
                         f"({per} per layer and direction), got {len(params)}")
    if hx is None:
        hx = []
    if not isinstance(hx, (list, tuple)) or len(hx) not in (0, 2):
        raise ValueError(f"hx: expected [h0, c0] or an empty list, got {type(hx).__name__} of length "
                         f"{len(hx) if isinstance(hx, (list, tuple)) else '-'}")
    named = [("input", input)] + [(f"params[{k}]", p) for k, p in enumerate(params)]
    named += [(n, v) for n, v in zip(("hx[0]", "hx[1]"), hx)] + [(n, v) for n, v in extra if v is not None]
    for n, v in named:
        if v is None:
            raise TypeError(f"{n}: expected a tensor, got None")
    inputs = Inputs.gather(named)
    shape = shape_of(input)
    if batch_sizes is not None:
        if len(shape) != 2:
            raise ValueError(f"input: expected shape [T*B, I] with batch_sizes, got {list(shape)}")
        bs = _batch_sizes(batch_sizes)
        T, B = len(bs), int(bs[0])
        if shape[0] != T * B:
            raise ValueError(f"input: expected {T * B} rows (T={T} batch_sizes entries x B=batch_sizes[0]={B}), "
                             f"got shape {list(shape)}")
        I = shape[1]
    else:
        if len(shape) != 3:
            raise ValueError(f"input: expected shape [{'B, T' if batch_first else 'T, B'}, I], got {list(shape)}")
        T, B = (shape[1], shape[0]) if batch_first else (shape[0], shape[1])
        I = shape[2]
        bs = np.full(T, B, dtype=np.int64)
    w_hh0 = shape_of(params[1])
    if len(w_hh0) != 2 or w_hh0[0] != 4 * w_hh0[1]:
        raise ValueError(f"params[1] (layer 0 w_hh): expected shape [4H, H], got {list(w_hh0)}")
    H = w_hh0[1]
    if H == 0:
        raise ValueError("params[1] (layer 0 w_hh): expected a hidden size H > 0 (shape [4H, H]), got [0, 0]")
    cfg = Config(T=T, B=B, I=I, H=H, L=L, D=D, has_biases=bool(has_biases), varlen=batch_sizes is not None)
    _check_buffer_sizes(cfg)
    for l in range(L):
        for d in range(D):
            base = (l * D + d) * per
            want = {"w_ih": (4 * H, cfg.in_size(l)), "w_hh": (4 * H, H), "b_ih": (4 * H,), "b_hh": (4 * H,)}
            for k, name in enumerate(list(want)[:per]):
                got = shape_of(params[base + k])
                if got != want[name]:
                    source = (f" (I = {I} from input, H = {H} from params[1])" if name == "w_ih" and l == 0
                              else f" (H = {H} from params[1])")
                    raise ValueError(f"params[{base + k}] (layer {l} {'reverse ' if d else ''}{name}): "
                                     f"expected shape {list(want[name])}{source}, got {list(got)}")
    for n, v in zip(("hx[0]", "hx[1]"), hx):
        if shape_of(v) != (L * D, B, H):
            raise ValueError(f"{n}: expected shape [D*L, B, H] = {[L * D, B, H]}, got {list(shape_of(v))}")
    return cfg, inputs, bs, list(hx)


def _check_buffer_sizes(cfg: Config) -> None:
    """Every buffer the LSTM's kernels index (lstm.py) holds at most INDEX_MAX elements: h, c and
    the saved gates of all steps [L*D, T, B, H], the whole-sequence gate pre-activations and their
    gradients [T*B, 4H], a layer's input and output [T*B, I or D*H], a weight [4H, I or D*H]."""
    T, B, I, H, L, D = cfg.T, cfg.B, cfg.I, cfg.H, cfg.L, cfg.D
    sizes = {"h, c and the saved gates [L*D, T, B, H]": L * D * T * B * H, "the gates [T*B, 4H]": T * B * 4 * H,
             "a layer's input [T*B, I]": T * B * I, "a layer's output [T*B, D*H]": T * B * D * H,
             "w_ih [4H, I]": 4 * H * I, "w_ih of layers after the first [4H, D*H]": 4 * H * D * H * (L > 1)}
    for what, n in sizes.items():
        if n > INDEX_MAX:
            raise ValueError(f"input, params: {what} would hold {n} elements (T={T}, B={B}, I={I}, H={H}, "
                             f"num_layers={L}, directions={D}), more than the kernels' 32-bit indices reach "
                             f"({INDEX_MAX}); split the sequence or the batch")


def time_major(cfg: Config, a, batch_first: bool, width: int, xp):
    """[T·B, width] time-major float32 rows of a public sequence tensor (``xp``'s arrays)."""
    if cfg.varlen or not batch_first:
        return a.reshape(cfg.T * cfg.B, width)
    return xp.contiguous(a.swapaxes(0, 1)).reshape(cfg.T * cfg.B, width)


def public_layout(cfg: Config, a, batch_first: bool, width: int, xp):
    if cfg.varlen:
        return a.reshape(cfg.T * cfg.B, width)
    a = a.reshape(cfg.T, cfg.B, width)
    return xp.contiguous(a.swapaxes(0, 1)) if batch_first else a


def padded_rows_zeroed(cfg: Config, x, bs: np.ndarray, xp, owned: bool):
    """x [T·B, n] with the rows past each step's batch size set to zero (a copy unless ``owned``)."""
    if not cfg.varlen or bs[-1] == cfg.B:
        return x
    x = x if owned else xp.copy(x)
    v = x.reshape(cfg.T, cfg.B, -1)
    for t in range(cfg.T):
        v[t, bs[t]:] = 0.0
    return x

