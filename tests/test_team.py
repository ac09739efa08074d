"""The CPU kernels' thread team (fusedgrad.team): torch's OpenMP threads, its size, forks, the fallback.

Each check runs in a process of its own, so that it sees a process as a user's starts (no other test
has started a pool in it).  None of them times anything: which threads ran a kernel, how many, and
whether new threads appeared are facts of the run.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import SESSION_CACHE

torch = pytest.importorskip("torch")

_PRELUDE = r"""
import json, os, sys
import numpy as np
import torch
import fusedgrad
from fusedgrad import team
from fusedgrad.torch import LSTM

def threads():
    return {int(t) for t in os.listdir("/proc/self/task")}

def gomp_copies():
    return len({line.split()[-1] for line in open("/proc/self/maps") if "libgomp" in line})

def train_step(model, x):
    y, _ = model(x)
    y.square().sum().backward()
    return [p.grad.clone() for p in model.parameters()]

torch.manual_seed(0)
model = LSTM(24, 40, num_layers=2, bidirectional=True)
x = torch.randn(9, 5, 24)
"""


def _run(body: str, **env) -> dict:
    proc = subprocess.run([sys.executable, "-c", _PRELUDE + body],
                          env={**os.environ, "FUSEDGRAD_CACHE": SESSION_CACHE, **env},
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_kernels_run_on_torchs_openmp_threads():
    """A training step of fusedgrad.torch.LSTM starts no thread: its kernels' team is made of the
    threads torch's own parallel op started (one OpenMP runtime in the process), of torch's size."""
    got = _run(r"""
torch.ones(1 << 22).mul(2.0).sum()          # a torch parallel op: torch's OpenMP team now exists
train_step(model, x)                         # loads the kernels (and the launcher) once
before = threads()
grads = train_step(model, x)
print(json.dumps({"before": sorted(before), "after": sorted(threads()), "team": team.last_team(),
                  "launches": team.launches(), "torch_threads": torch.get_num_threads(),
                  "gomp": gomp_copies(), "why_not": team.why_not()}))
""")
    assert got["why_not"] is None
    assert got["launches"] > 0
    assert len(got["team"]) == got["torch_threads"] and len(set(got["team"])) == len(got["team"])
    assert set(got["team"]) <= set(got["before"]), got  # ran on threads that were already there
    assert got["after"] == got["before"], got  # and no pool of its own was started
    assert got["gomp"] == 1


def test_team_follows_torch_set_num_threads_with_the_same_bits():
    got = _run(r"""
out = {}
for n in (1, 2, 3):
    torch.set_num_threads(n)
    model.zero_grad(set_to_none=True)
    grads = train_step(model, x)
    out[n] = {"team": len(team.last_team()), "bits": [g.numpy().tobytes().hex() for g in grads]}
print(json.dumps(out))
""")
    for n, row in got.items():
        assert row["team"] == int(n)
        assert row["bits"] == got["1"]["bits"], f"{n} threads: other bits than 1"


def test_forked_child_runs_alone():
    """A child forked after the team ran cannot use the OpenMP pool (its threads were not forked): it
    runs each launch as a team of one, with the same bits, instead of hanging."""
    got = _run(r"""
ref = [g.numpy().tobytes() for g in train_step(model, x)]
parent = len(team.last_team())
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    model.zero_grad(set_to_none=True)
    grads = train_step(model, x)
    same = [g.numpy().tobytes() for g in grads] == ref
    os.write(w, json.dumps({"team": team.last_team(), "same": same}).encode())
    os._exit(0)
os.close(w)
child = json.loads(os.read(r, 1 << 16))
os.waitpid(pid, 0)
print(json.dumps({"parent": parent, "child": child, "pid": pid}))
""")
    assert got["child"]["same"]
    assert got["child"]["team"] == [got["pid"]]  # the child's own main thread, alone
    assert got["parent"] == torch.get_num_threads()


def test_tvm_team_on_request():
    """FUSEDGRAD_TEAM=tvm keeps the loader's thread pool: the launcher is not used and the kernels
    give the same results."""
    body = r"""
grads = train_step(model, x)
print(json.dumps({"launches": team.launches(), "why_not": team.why_not(),
                  "bits": [g.numpy().tobytes().hex() for g in grads]}))
"""
    tvm_pool = _run(body, FUSEDGRAD_TEAM="tvm")
    openmp = _run(body)
    assert tvm_pool["launches"] == 0 and tvm_pool["why_not"] == "FUSEDGRAD_TEAM=tvm"
    assert openmp["launches"] > 0 and openmp["why_not"] is None
    assert tvm_pool["bits"] == openmp["bits"]


def test_python_threads_get_a_team_each_with_the_same_bits():
    """Steps from several Python threads at once: each thread's launches get a team of their own
    (OpenMP starts one per thread that launches), and every step gives the bits of a lone step."""
    got = _run(r"""
import threading
ref = [g.numpy().tobytes().hex() for g in train_step(model, x)]
out = []
def worker():
    mine = LSTM(24, 40, num_layers=2, bidirectional=True)
    mine.load_state_dict(model.state_dict())
    same = True
    for _ in range(5):
        mine.zero_grad(set_to_none=True)
        same &= [g.numpy().tobytes().hex() for g in train_step(mine, x)] == ref
    out.append({"same": same, "team": team.last_team(), "main": threading.get_native_id()})
threads = [threading.Thread(target=worker) for _ in range(3)]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps(out))
""")
    assert len(got) == 3 and all(r["same"] for r in got), got
    leaders = [r["team"][0] for r in got]
    assert leaders == [r["main"] for r in got]  # each thread leads its own team
    members = [tid for r in got for tid in r["team"]]
    assert len(members) == len(set(members)), got  # no thread served two teams at once
