"""The LSTM's scratch buffers come from a pool shared by calls: reuse must never leak data between calls."""
from __future__ import annotations

import numpy as np

import fusedgrad
from fusedgrad.lstm import buffers


def _args(rng, T, B, I, H, varlen):
    params = [rng.standard_normal(s).astype(np.float32) * 0.3 for s in ((4 * H, I), (4 * H, H), (4 * H,), (4 * H,))]
    x = rng.standard_normal((T * B, I) if varlen else (T, B, I)).astype(np.float32)
    bs = [B] * (T - 2) + [B - 1, 1] if varlen else None
    return x, params, bs


def _run(x, params, bs, gy):
    out = fusedgrad.lstm_forward(x, [], params, True, 1, 0.0, True, False, False, bs)
    back = fusedgrad.lstm_backward(gy, None, None, x, [], params, *out[3:], True, 1, 0.0, True, False, False, bs)
    return [np.array(a, copy=True) for a in out[:3]] + [back[0].copy(), *back[1], *back[2]]


def test_pooled_buffers_do_not_leak_between_calls():
    rng = np.random.default_rng(0)
    T, B, I, H = 5, 33, 32, 32  # panel-sized: the packed GEMM path, and a few-rows remainder
    x, params, bs = _args(rng, T, B, I, H, varlen=True)
    gy = rng.standard_normal((T * B, H)).astype(np.float32)
    first = _run(x, params, bs, gy)
    assert buffers._POOL, "scratch buffers were not returned to the pool"
    # a different call of the same sizes fills the pooled buffers with other values (no padding)...
    x2, params2, _ = _args(np.random.default_rng(1), T, B, I, H, varlen=False)
    _run(x2 * 100, params2, None, rng.standard_normal((T, B, H)).astype(np.float32) * 100)
    # ...and the variable-length call, which relies on zeroed rows past each step's batch, is unchanged
    again = _run(x, params, bs, gy)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


def test_pool_is_bounded(monkeypatch):
    monkeypatch.setattr(buffers, "POOL_BYTES", 1 << 20)
    ws = buffers.Workspace()
    for _ in range(3):
        ws.get((512, 1024))  # 2 MiB each
    ws.release()
    assert sum(a.nbytes for a in buffers._POOL) <= 1 << 20


def test_concurrent_calls_from_threads_match_sequential_ones():
    """Calls from several Python threads share the pool and TVM's runtime: results must not mix."""
    import threading

    T, B, I, H = 6, 33, 32, 32
    cases = []
    for seed in range(4):
        rng = np.random.default_rng(10 + seed)
        x, params, _ = _args(rng, T, B, I, H, varlen=False)
        gy = rng.standard_normal((T, B, H)).astype(np.float32)
        cases.append((x, params, gy))
    expected = [_run(x, params, None, gy) for x, params, gy in cases]
    got = [None] * len(cases)
    errors = []

    def work(k):
        try:
            for _ in range(3):
                got[k] = _run(*cases[k][:2], None, cases[k][2])
        except Exception as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(cases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    for exp, res in zip(expected, got):
        for a, b in zip(exp, res):
            np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))
