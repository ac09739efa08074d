"""Train a small character-level language model twice: with fusedgrad's LSTM and with torch.nn.LSTM.

Both models start from the same weights (the fusedgrad model is built from a fixed seed and
its state_dict is loaded into the torch.nn.LSTM model), see the same batches and use the same
optimizer (Adam), so their loss curves must agree step by step.  The text is generated here:
sentences from a tiny grammar, so nothing is downloaded.

Model: Embedding(V, 16) -> LSTM(16, 64, num_layers=2) -> Linear(64, V), next-character
cross-entropy on batches of 16 windows of 32 characters.

Agreement: |loss_fusedgrad - loss_torch| <= TOL * max(1, |loss_torch|) at every step, TOL = 1e-4.
Both run in float32 but sum in different orders (differences ~1e-7 per op); Adam then
carries those into the weights, so the gap grows slowly over the steps (~1e-6 after 60
steps here), far inside TOL.

    python examples/train_lstm.py [--steps N]

It prints both loss curves with each step's time, and both models' median step time after
WARMUP steps (the first loads the kernels).

Progress goes to stderr: a line before the imports (torch, then TVM), fusedgrad's log of each kernel
it builds on first use (none after `fusedgrad generate`, which fills the kernel cache), and the steps.
"""
from __future__ import annotations

import argparse
import copy
import logging
import random
import statistics
import sys
import time

if __name__ == "__main__":  # the imports below take 5-25 s (torch, then TVM): say so first
    print("importing torch and fusedgrad (TVM) ...", file=sys.stderr, flush=True)

import torch  # noqa: E402
from torch import nn  # noqa: E402

from fusedgrad.torch.lstm import LSTM  # noqa: E402

TOL = 1e-4
WARMUP = 5  # steps before the step times count
SEQ, BATCH, EMBED, HIDDEN, LAYERS, LR = 32, 16, 16, 64, 2, 1e-2


def make_text(n_sentences: int = 400, seed: int = 0) -> str:
    rng = random.Random(seed)
    subjects = ["the cat", "a dog", "my friend", "the old man", "she", "he", "the bird"]
    verbs = ["sees", "likes", "chases", "finds", "eats", "hears"]
    objects = ["the ball", "a fish", "the moon", "some bread", "the red box", "a tree"]
    tails = ["", " today", " again", " at night", " in the park"]
    return " ".join(f"{rng.choice(subjects)} {rng.choice(verbs)} {rng.choice(objects)}{rng.choice(tails)}."
                    for _ in range(n_sentences))


class CharModel(nn.Module):
    def __init__(self, vocab: int, lstm: nn.Module):
        super().__init__()
        self.embed = nn.Embedding(vocab, EMBED)
        self.lstm = lstm
        self.head = nn.Linear(HIDDEN, vocab)

    def forward(self, x):  # x [B, T] -> logits [B, T, V]
        out, _ = self.lstm(self.embed(x))
        return self.head(out)


def batches(data: torch.Tensor, steps: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        starts = torch.randint(0, len(data) - SEQ - 1, (BATCH,), generator=g)
        idx = starts[:, None] + torch.arange(SEQ + 1)
        chunk = data[idx]
        yield chunk[:, :-1], chunk[:, 1:]


def train(model: nn.Module, data: torch.Tensor, steps: int, seed: int, name: str = "",
          verbose: bool = False, times: list | None = None) -> list[float]:
    """The loss of every step; each step's seconds (forward, backward, optimizer) go to ``times``."""
    t0 = shown = time.perf_counter()
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    losses = []
    for x, y in batches(data, steps, seed):
        start = time.perf_counter()
        logits = model(x)
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if times is not None:
            times.append(time.perf_counter() - start)
        # progress on stderr: the first and last steps, and one line every 2 s between
        if verbose and (len(losses) in (1, steps) or time.perf_counter() - shown >= 2.0):
            shown = time.perf_counter()
            print(f"{name}: step {len(losses)}/{steps}, loss {losses[-1]:.4f}, {shown - t0:.1f} s",
                  file=sys.stderr, flush=True)
    return losses


def main(steps: int = 60, seed: int = 0, verbose: bool = True) -> tuple[list[float], list[float]]:
    """Train both models; returns (fusedgrad losses, torch.nn.LSTM losses), one per step."""
    text = make_text(seed=seed)
    vocab = sorted(set(text))
    data = torch.tensor([vocab.index(ch) for ch in text])
    torch.manual_seed(seed)
    ours = CharModel(len(vocab), LSTM(EMBED, HIDDEN, num_layers=LAYERS, batch_first=True))
    ref = CharModel(len(vocab), nn.LSTM(EMBED, HIDDEN, num_layers=LAYERS, batch_first=True))
    ref.load_state_dict(copy.deepcopy(ours.state_dict()))  # same initial weights, every module

    t0 = time.perf_counter()
    if verbose:
        print("training with fusedgrad.torch.LSTM (its first step loads the kernels, or builds them when "
              "`fusedgrad generate` has not)", file=sys.stderr, flush=True)
    time_ours, time_ref = [], []
    loss_ours = train(ours, data, steps, seed, "fusedgrad.torch.LSTM", verbose, time_ours)
    t1 = time.perf_counter()
    if verbose:
        print("training with torch.nn.LSTM", file=sys.stderr, flush=True)
    loss_ref = train(ref, data, steps, seed, "torch.nn.LSTM", verbose, time_ref)
    t2 = time.perf_counter()

    worst = 0.0
    if verbose:
        print(f"{'step':>4}  {'fusedgrad':>10}  {'nn.LSTM':>10}  {'|diff|':>9}  {'fusedgrad ms':>12}  {'nn.LSTM ms':>10}")
    for k, (a, b) in enumerate(zip(loss_ours, loss_ref)):
        diff = abs(a - b)
        worst = max(worst, diff / max(1.0, abs(b)))
        if verbose:
            print(f"{k:4d}  {a:10.6f}  {b:10.6f}  {diff:9.2e}  {time_ours[k] * 1e3:12.2f}  {time_ref[k] * 1e3:10.2f}")
    if verbose:
        print(f"train time: fusedgrad LSTM {t1 - t0:.2f} s (first call builds/loads the kernels), "
              f"nn.LSTM {t2 - t1:.2f} s")
        warm = min(WARMUP, max(0, steps - 1))  # the steps after these are timed (first use loads kernels)
        ours_ms, ref_ms = (statistics.median(t[warm:]) * 1e3 for t in (time_ours, time_ref))
        print(f"median step after {warm} warm-up steps: fusedgrad.torch.LSTM {ours_ms:.2f} ms, "
              f"torch.nn.LSTM {ref_ms:.2f} ms ({ours_ms / ref_ms:.2f}x)")
        print(f"final loss: fusedgrad {loss_ours[-1]:.6f}  nn.LSTM {loss_ref[-1]:.6f}; "
              f"worst relative gap {worst:.2e} (tolerance {TOL:g})")
    assert worst <= TOL, f"loss curves diverge: worst relative gap {worst:.3g} > {TOL:g}"
    return loss_ours, loss_ref


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    # fusedgrad logs each kernel it builds (first use) on its "fusedgrad" logger at INFO
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    logging.getLogger("fusedgrad").setLevel(logging.INFO)
    start = time.perf_counter()
    main(args.steps, args.seed)
    print(f"total {time.perf_counter() - start:.1f} s")
