"""LayerNorm backward over the last axis.

Inputs
    x      [M, D]  the forward input (any leading shape is flattened to M by the API)
    dy     [M, D]  gradient of the output
    mean   [M]     per-row mean of x
    var    [M]     per-row (biased) variance of x -- the variance, not rstd
    gamma  [D]     scale
    eps    float   scalar, default 1e-5; rstd = 1 / sqrt(var + eps)
Outputs
    dx     [M, D]  = rstd * (dy*gamma - mean_D(dy*gamma) - xhat * mean_D(dy*gamma*xhat))
    dgamma [D]     = sum_M dy * xhat
    dbeta  [D]     = sum_M dy
with xhat = (x - mean) * rstd.  Reduced precision is computed in float32 and
rounded once on store.  The row sums are split over LANES interleaved partial
sums (element d goes to partial d % LANES), added in lane order; a target may
add the LANES partials in another fixed order (CUDA: a warp-shuffle tree), so
each target's bits are the same on every run.
"""
from __future__ import annotations

import numpy as np
from tvm import te, tirx

from . import OpDef, ScalarSpec, TensorSpec, register

ACC = "float32"
LANES = 16
# rows per dgamma/dbeta partial sum: the sums over M add blocks of this many rows, then the blocks in
# order (OpDef.partial_rows: every schedule of the sums reads it)
PARTIAL_ROWS = 32


def _row_sum(M, D, value, name):
    """sum_d value(m, d) as LANES interleaved partials then a lane-order sum."""
    c = te.reduce_axis((0, (D + LANES - 1) // LANES), name=f"{name}_c")
    lanes = te.compute(
        (M, LANES),
        lambda m, l: te.sum(
            tirx.if_then_else(c * LANES + l < D, value(m, c * LANES + l), tirx.const(0.0, ACC)), axis=c
        ),
        name=f"{name}_lanes",
    )
    l = te.reduce_axis((0, LANES), name=f"{name}_l")
    return te.compute((M,), lambda m: te.sum(lanes[m, l], axis=l), name=name)


def compute(dtype: str):
    """Build the TE graph; returns the kernel arguments in order."""
    M, D = te.var("M"), te.var("D")
    x = te.placeholder((M, D), dtype, name="x")
    dy = te.placeholder((M, D), dtype, name="dy")
    mean = te.placeholder((M,), dtype, name="mean")
    var = te.placeholder((M,), dtype, name="var")
    gamma = te.placeholder((D,), dtype, name="gamma")
    eps = te.var("eps", ACC)

    def f32(t, *idx):
        return t[idx].astype(ACC)

    rstd = te.compute((M,), lambda m: tirx.const(1.0, ACC) / te.sqrt(f32(var, m) + eps), name="rstd")

    def xhat(m, d):
        return (f32(x, m, d) - f32(mean, m)) * rstd[m]

    def dyg(m, d):
        return f32(dy, m, d) * f32(gamma, d)

    sum_dyg = _row_sum(M, D, dyg, "sum_dyg")
    sum_dyg_xhat = _row_sum(M, D, lambda m, d: dyg(m, d) * xhat(m, d), "sum_dyg_xhat")
    inv_d = tirx.const(1.0, ACC) / D.astype(ACC)
    dx = te.compute(
        (M, D),
        lambda m, d: (
            rstd[m] * (dyg(m, d) - sum_dyg[m] * inv_d - xhat(m, d) * (sum_dyg_xhat[m] * inv_d))
        ).astype(dtype),
        name="dx",
    )
    r = te.reduce_axis((0, M), name="r")
    dgamma_acc = te.compute((D,), lambda d: te.sum(f32(dy, r, d) * xhat(r, d), axis=r), name="dgamma_acc")
    r2 = te.reduce_axis((0, M), name="r2")
    dbeta_acc = te.compute((D,), lambda d: te.sum(f32(dy, r2, d), axis=r2), name="dbeta_acc")
    dgamma = te.compute((D,), lambda d: dgamma_acc[d].astype(dtype), name="dgamma")
    dbeta = te.compute((D,), lambda d: dbeta_acc[d].astype(dtype), name="dbeta")
    return [x, dy, mean, var, gamma, eps, dx, dgamma, dbeta]


def reference(x, dy, mean, var, gamma, eps=1e-5, **_):
    """float64 numpy reference (rows are the leading axes flattened)."""
    rstd = 1.0 / np.sqrt(var + eps)
    xhat = (x - mean[:, None]) * rstd[:, None]
    g = dy * gamma
    dx = rstd[:, None] * (g - g.mean(axis=1, keepdims=True) - xhat * (g * xhat).mean(axis=1, keepdims=True))
    return {"dx": dx, "dgamma": (dy * xhat).sum(axis=0), "dbeta": dy.sum(axis=0)}


def forward_reference(x, gamma, beta, eps=1e-5):
    """LayerNorm forward (float64): returns (y, mean, var) with var the biased variance."""
    mean = x.mean(axis=-1)
    var = x.var(axis=-1)
    y = (x - mean[..., None]) / np.sqrt(var[..., None] + eps) * gamma + beta
    return y, mean, var


def sample(dims, rng):
    """Inputs from a real forward: x ~ N(0.5, 2), gamma ~ N(1, 0.1), dy ~ N(0, 1)."""
    M, D = dims["M"], dims["D"]
    x = 0.5 + 2.0 * rng.standard_normal((M, D))
    gamma = 1.0 + 0.1 * rng.standard_normal(D)
    _, mean, var = forward_reference(x, gamma, np.zeros(D))
    return {"x": x, "dy": rng.standard_normal((M, D)), "mean": mean, "var": var, "gamma": gamma}


def nbytes(dims, itemsize):
    """Read x, dy, mean, var, gamma; write dx, dgamma, dbeta."""
    M, D = dims["M"], dims["D"]
    return itemsize * (3 * M * D + 2 * M + 3 * D)


OP = register(
    OpDef(
        name="layer_norm_backward",
        short="lng",
        partial_rows=PARTIAL_ROWS,
        inputs=(
            TensorSpec("x", ("M", "D")),
            TensorSpec("dy", ("M", "D")),
            TensorSpec("mean", ("M",)),
            TensorSpec("var", ("M",)),
            TensorSpec("gamma", ("D",)),
        ),
        outputs=(TensorSpec("dx", ("M", "D")), TensorSpec("dgamma", ("D",)), TensorSpec("dbeta", ("D",))),
        scalars=(ScalarSpec("eps", 1e-5),),
        variants=({},),
        compute=compute,
        reference=reference,
        sample=sample,
        nbytes=nbytes,
        shapes={
            "M=1 D=1": {"M": 1, "D": 1},
            "D=7": {"M": 3, "D": 7},
            "odd, not a vector multiple": {"M": 13, "D": 37},
            "M=4096 D=1024": {"M": 4096, "D": 1024},
            "M=8192 D=4096": {"M": 8192, "D": 4096},
        },
        doc=__doc__,
    )
)
