"""fusedgrad's full LSTM served by its Ascend package on the CPU twin of CANN: ``lstm_forward`` and
``lstm_backward`` with the semantics (arguments, shapes, returns) of ``fusedgrad.lstm_forward`` /
``lstm_backward``, each call running the generated aclnnLSTM / aclnnLstmBackward
(generated/ascend/lstm, built against tests/ascend_twin with tests/ascend_app/lstm_app.cpp, the kernels
run by the AscendC twin with all its checks) in a child process.

Inputs may be numpy arrays or torch tensors of float32, float16 or bfloat16 (the aclnn API's dtypes,
one for all); results come back as the inputs' kind and dtype.  ``pad`` > 0 gives every tensor of rank >= 2 rows of its last size + pad (nothing
contiguous: the operator gathers and scatters through its workspace); ``cores`` sets the vector cores
the twin reports (FG_TWIN_VECTOR_CORES) and ``cube_cores`` the cube cores.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

import build_cache
from ascend_shim import launch_shim

HERE = Path(__file__).parent
TWIN = HERE / "ascend_twin"
APP = HERE / "ascend_app" / "lstm_app.cpp"
_BUILT: dict = {}
COUNTERS: dict = {}  # mode ("fwd" / "bwd") -> the twin's counters of the last such call
LAUNCHES: dict = {}  # mode -> the kernels the last such call launched, in the stream's order


def build(root: Path | None = None) -> Path:
    """The app linked with the generated package under ``root`` (a tree ascend.write made, only read;
    None: the package written fresh into a temporary folder), built once per process."""
    if "exe" in _BUILT:
        return _BUILT["exe"]
    tmp = Path(tempfile.mkdtemp(prefix="fg-ascend-lstm-"))
    if root is None:
        from fusedgrad.lowering import ascend

        ascend.write_lstm(tmp)
    pkg = Path(root or tmp) / "lstm"
    (tmp / "shim.cpp").write_text(launch_shim(pkg / "op_kernel", pkg / "op_host", "lstm"))
    exe = tmp / "lstm_app"
    inc = [f"-I{TWIN}", f"-I{TWIN / 'aclnn'}", f"-I{pkg / 'op_kernel'}", f"-I{pkg / 'op_host'}"]
    cmd = [shutil.which("g++") or "g++", "-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", "-DFG_TWIN_COUNTERS", *inc,
           "-o", str(exe),
           str(APP), str(pkg / "op_host" / "aclnn_lstm.cpp"), str(tmp / "shim.cpp")]
    proc = build_cache.run(cmd, outputs=[exe])
    if proc.returncode != 0:
        raise RuntimeError("building the Ascend LSTM app failed:\n" + proc.stderr[-4000:])
    _BUILT["exe"] = exe
    return exe


class TwinError(RuntimeError):
    """The operator refused the call (its status) or the twin stopped it (a broken CANN rule)."""


DTYPES = {"float32": 0, "float16": 1, "bfloat16": 2}  # the app's dtype codes


def _np(a):
    """float32 numpy of a numpy array or torch tensor (exact for float16 / bfloat16)."""
    if a is None:
        return None
    if hasattr(a, "detach"):
        return a.detach().cpu().float().numpy().astype(np.float32)
    return np.asarray(a).astype(np.float32)


def _like(a):
    """(kind, dtype name) of a numpy array or torch tensor."""
    if hasattr(a, "detach"):
        return "torch", str(a.dtype).removeprefix("torch.")
    return "numpy", str(np.asarray(a).dtype)


def _back(a: np.ndarray, like):
    kind, dtype = like
    if kind == "torch":
        import torch

        return torch.from_numpy(np.ascontiguousarray(a)).to(getattr(torch, dtype))
    import ml_dtypes

    return a.astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype))


def _run(mode: str, cfg: list[int], bs, blobs: list, sizes: list[tuple], pad: int, cores, cube_cores, exe=None,
         dtype=0, warmup=False, no_dparams=False):
    exe = exe or build()
    with tempfile.TemporaryDirectory(prefix="fg-ascend-lstm-run-") as d:
        d = Path(d)
        (d / "cfg").write_text(" ".join(str(int(v)) for v in cfg + [pad, dtype]) + ("\n" + " ".join(str(int(b)) for b in bs) if bs is not None else ""))
        (d / "in").write_bytes(b"".join(np.ascontiguousarray(b, np.float32).tobytes() for b in blobs))
        env = dict(os.environ, FG_TWIN_LAUNCH_LOG="1")
        if cores:
            env["FG_TWIN_VECTOR_CORES"] = str(cores)
        if cube_cores:
            env["FG_TWIN_CUBE_CORES"] = str(cube_cores)
        if warmup:  # a smaller call first, in the same process
            env["FG_APP_WARMUP"] = "1"
        if no_dparams:  # outputMask {dx, dh0, dc0}: no parameters' gradients
            env["FG_APP_NO_DPARAMS"] = "1"
        proc = subprocess.run([str(exe), mode, str(d / "cfg"), str(d / "in"), str(d / "out")], capture_output=True,
                              text=True, timeout=3000, env=env)
        if proc.returncode != 0:
            raise TwinError((proc.stdout + proc.stderr)[-3000:])
        raw = np.frombuffer((d / "out").read_bytes(), np.float32)
        LAUNCHES[mode] = [line.split()[1] for line in proc.stderr.splitlines() if line.startswith("launch ")]
        for line in proc.stdout.splitlines():  # the twin's counters of the call, when the app prints them
            if line.startswith("twin: "):
                words = line.split()[1:]
                COUNTERS[mode] = {k: int(v) for k, v in zip(words[::2], words[1::2])}
    out, at = [], 0
    for shape in sizes:
        n = int(np.prod(shape))
        out.append(raw[at:at + n].reshape(shape).copy())
        at += n
    assert at == raw.size, (at, raw.size)
    return out


def _sizes(input, params, has_biases, num_layers, bidirectional, batch_first, batch_sizes):
    D, L = (2 if bidirectional else 1), int(num_layers)
    per = 4 if has_biases else 2
    H = int(np.asarray(params[1].shape)[1])
    x = input
    if batch_sizes is not None:
        bs = [int(b) for b in (batch_sizes.tolist() if hasattr(batch_sizes, "tolist") else batch_sizes)]
        T, B, I = len(bs), bs[0], int(x.shape[1])
    else:
        bs = None
        T, B, I = (int(x.shape[1]), int(x.shape[0]), int(x.shape[2])) if batch_first else (int(s) for s in x.shape)
    return T, B, I, H, L, D, per, bs


def lstm_forward(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first=False,
                 batch_sizes=None, pad=0, cores=None, cube_cores=None, exe=None, warmup=False):
    """fusedgrad.lstm_forward through aclnnLSTM on the twin: (output, hy, cy, i, j, f, o, h, c, tanhc).
    ``exe``: another build of tests/ascend_app/lstm_app.cpp to run (e.g. one linked by CMake);
    ``warmup``: the app makes a smaller call first, in the same process."""
    kind = _like(input)
    T, B, I, H, L, D, per, bs = _sizes(input, params, has_biases, num_layers, bidirectional, batch_first, batch_sizes)
    LD = L * D
    has_hx = bool(hx) and len(hx) == 2
    blobs = [_np(input)] + [_np(p) for p in params] + ([_np(hx[0]), _np(hx[1])] if has_hx else [])
    cfg = [T, B, I, H, L, D, has_biases, batch_first, train, bs is not None, has_hx]
    ydims = (T, B, D * H) if bs is not None or not batch_first else (B, T, D * H)
    sizes = [ydims, (LD, B, H), (LD, B, H)] + ([(T, B, H)] * (7 * LD) if train else [])
    res = _run("fwd", cfg, bs, blobs, sizes, pad, cores, cube_cores, exe, DTYPES[kind[1]], warmup)
    y, hy, cy = res[:3]
    if bs is not None:
        y = y.reshape(T * B, D * H)
    if train:
        lists = [np.stack(res[3 + a * LD: 3 + (a + 1) * LD]) for a in range(7)]  # i, j, f, o, h, c, tanhc
        return tuple(_back(v, kind) for v in [y, hy, cy] + lists)
    empty = np.empty((0,), np.float32)
    return tuple(_back(v, kind) for v in (y, hy, cy, empty, empty, empty, empty, hy.copy(), cy.copy(), empty))


def lstm_backward(grad_y, grad_hy, grad_cy, input, hx, params, i, j, f, o, h, c, tanhc, has_biases, num_layers,
                  dropout, train, bidirectional, batch_first=False, batch_sizes=None, pad=0, cores=None,
                  cube_cores=None, exe=None, no_dparams=False):
    """fusedgrad.lstm_backward through aclnnLstmBackward on the twin: (dx, [dh0, dc0], dparams);
    ``no_dparams``: the call's outputMask leaves the parameters' gradients out (dparams come back zero)."""
    kind = _like(input)
    T, B, I, H, L, D, per, bs = _sizes(input, params, has_biases, num_layers, bidirectional, batch_first, batch_sizes)
    LD = L * D
    zeros = np.zeros((LD, B, H), np.float32)
    h0, c0 = (_np(hx[0]), _np(hx[1])) if hx else (zeros, zeros)
    dh = zeros if grad_hy is None else _np(grad_hy)
    dc = zeros if grad_cy is None else _np(grad_cy)
    saved = [_np(a) for a in (i, j, f, o, h, c, tanhc)]  # each [LD, T, B, H]; the API's order: i, g, f, o, h, c, tanhc
    blobs = [_np(input), h0, c0] + [_np(p) for p in params] + [_np(grad_y), dh, dc]
    blobs += [s[k] for s in saved for k in range(LD)]
    cfg = [T, B, I, H, L, D, has_biases, batch_first, True, bs is not None, True]
    xdims = (T * B, I) if bs is not None else ((B, T, I) if batch_first else (T, B, I))
    sizes = [xdims, (LD, B, H), (LD, B, H)] + [tuple(int(s) for s in p.shape) for p in params]
    res = _run("bwd", cfg, bs, blobs, sizes, pad, cores, cube_cores, exe, DTYPES[kind[1]], no_dparams=no_dparams)
    return _back(res[0], kind), [_back(res[1], kind), _back(res[2], kind)], [_back(r, kind) for r in res[3:]]
