"""README.md as written: its commands and code blocks run, it stays a short front door, and every
relative link of README.md and docs/*.md reaches a file (and heading) that exists.

- The opening block's commands are the ones .ci/run runs, in order: CI runs them as written in a
  fresh virtual environment (pip's install; ``fusedgrad generate``, which builds and checks every
  CPU kernel, 92 s on 2 shared cores; the test command, which would recurse here).
- Every other shell command runs as written, in a temporary folder.
- Every Python block runs as written, and what it computed is checked against the float64
  references (or torch's gradients).
- The C block (the DSP call) is compiled with gcc against generated/dsp/ft78ne/ and run on the host
  port; the C++ block (the aclnn two-phase call) against generated/ascend/lstm_cell_backward/ on the
  CPU twin of CANN (tests/ascend_twin), each with a small caller in tests/readme_app/.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import build_cache
from ascend_shim import launch_shim
from conftest import has_torch, toolchain_missing
from fusedgrad import te_defs

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
APPS = Path(__file__).parent / "readme_app"
MAX_LINES = 260
FENCE = re.compile(r"^```([\w+]*)\n(.*?)^```", re.S | re.M)


def blocks(lang: str) -> list[str]:
    """The fenced blocks of README.md whose info string is ``lang``, in order."""
    return [body for kind, body in FENCE.findall(README.read_text()) if kind == lang]


def commands(block: str) -> list[str]:
    """A shell block's commands: each line without its comment, split at ``&&``."""
    lines = (ln.split(" #")[0].strip() for ln in block.splitlines())
    return [part.strip() for ln in lines if ln for part in ln.split("&&")]


def ci_commands() -> list[str]:
    return [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()]


def test_readme_is_a_short_front_door():
    n = len(README.read_text().splitlines())
    assert n <= MAX_LINES, f"README.md: expected at most {MAX_LINES} lines, got {n} (move the detail to docs/)"


def test_readme_opens_with_the_two_commands_ci_runs():
    """Right under the title: set up and run the main job, then the tests; .ci/run runs exactly
    these commands, in this order."""
    text = README.read_text()
    first = text.split("\n", 1)[1].lstrip("\n")
    assert first.startswith("```bash\n"), "README.md must open with the block of its two commands"
    block = FENCE.match(first).group(2)
    assert len([ln for ln in block.splitlines() if ln.strip()]) == 2, block
    cmds, ci = commands(block), ci_commands()
    assert cmds[0].startswith("pip install") and cmds[-1].startswith("pytest"), cmds
    at = [ci.index(c) if c in ci else None for c in cmds]
    assert None not in at and at == sorted(at), f"README's {cmds} are not .ci/run's commands in order"


SHELL = [c for b in blocks("bash")[1:] for c in commands(b)]


@pytest.mark.parametrize("cmd", SHELL, ids=[c.split(" --out")[0] for c in SHELL])
def test_the_shell_commands_run_as_written(cmd, tmp_path):
    proc = subprocess.run(cmd, shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{cmd}: exit {proc.returncode}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    for out in map(Path, re.findall(r"--out (\S+)", cmd)):  # the path, or files named from it (graph's plan-*.dot)
        written = (tmp_path / out).exists() or any((tmp_path / out.parent).glob(f"{out.stem}-*{out.suffix}"))
        assert written, f"{cmd}: wrote no {out}"


def _check_api(ns: dict) -> None:
    lstm = te_defs.get("lstm_cell_backward").reference(
        *(ns[k].astype(np.float64) for k in ("grad_hy", "grad_cy", "cx", "cy", "storage")), has_bias=True)
    for name in ("grad_gates", "grad_cx", "grad_bias"):
        np.testing.assert_allclose(ns[name], lstm[name], rtol=1e-5, atol=1e-5, err_msg=name)
    D = ns["x"].shape[-1]
    ln = te_defs.get("layer_norm_backward").reference(
        *(ns[k].reshape(-1, D).astype(np.float64) for k in ("x", "dy")),
        *(ns[k].reshape(-1).astype(np.float64) for k in ("mean", "var")), np.ones(D), 1e-5)
    np.testing.assert_allclose(ns["dx"], ln["dx"].reshape(ns["x"].shape), rtol=1e-4, atol=1e-4)
    for name in ("dgamma", "dbeta"):
        np.testing.assert_allclose(ns[name], ln[name], rtol=1e-4, atol=1e-4, err_msg=name)


def _check_torch(ns: dict) -> None:
    """The LSTM's input gradient is torch.nn.LSTM's with the same weights; the LayerNorm's weight
    gradient is there and finite."""
    import torch

    ref = torch.nn.LSTM(32, 64, num_layers=2, bidirectional=True)
    ref.load_state_dict(ns["lstm"].state_dict())
    x = ns["x"].detach().clone().requires_grad_(True)
    ref(x)[0].sum().backward()
    torch.testing.assert_close(ns["x"].grad, x.grad, rtol=1e-4, atol=1e-5)
    grad = ns["weight"].grad
    assert grad is not None and grad.shape == (64,) and torch.isfinite(grad).all()


PYTHON = blocks("python")
CHECKS = {"import fusedgrad.torch": _check_torch, "import fusedgrad\n": _check_api}


@pytest.mark.parametrize("code", PYTHON, ids=[f"python-{i}" for i in range(len(PYTHON))])
def test_the_python_blocks_run_as_written(code):
    check = next((f for key, f in CHECKS.items() if key in code), None)
    assert check, f"no check of this README block's results (add one to CHECKS):\n{code}"
    if check is _check_torch and not has_torch():
        pytest.skip("torch is not installed (pip install torch)")
    ns: dict = {}
    exec(compile(code, str(README), "exec"), ns)
    check(ns)


def _block(lang: str, needle: str) -> str:
    found = [b for b in blocks(lang) if needle in b]
    assert len(found) == 1, f"README.md: expected one {lang} block calling {needle}, found {len(found)}"
    return found[0]


def test_every_block_is_one_these_tests_run():
    """Shell and Python blocks run by the tests above; one C and one C++ block, each with its caller."""
    kinds = [kind for kind, _ in FENCE.findall(README.read_text())]
    assert set(kinds) <= {"bash", "python", "c", "c++"}, f"README.md: a block no test runs: {kinds}"
    assert kinds.count("c") == 1 and kinds.count("c++") == 1, "a new C/C++ block needs its caller in tests/readme_app"


def test_the_dsp_call_computes_the_layer_norm_backward(tmp_path):
    cc = shutil.which("gcc")
    if cc is None:
        toolchain_missing("no C compiler (gcc) on this machine")
    chip = ROOT / "generated" / "dsp" / "ft78ne"
    (tmp_path / "readme.c").write_text(_block("c", "fp_layernormgrad"))
    exe = tmp_path / "main"
    cmd = [cc, "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O2", f"-I{chip}", "-o", str(exe),
           str(tmp_path / "readme.c"), str(APPS / "layer_norm_grad_main.c"), str(chip / "layernormgrad.c"),
           str(chip / "fg_dsp_port_host.c"), "-lm", "-lpthread"]
    proc = build_cache.run(cmd, outputs=[exe], inputs=[chip])
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows, cols = 37, 45
    op = te_defs.get("layer_norm_backward")
    s = {k: a.astype(np.float32) for k, a in op.sample({"M": rows, "D": cols}, np.random.default_rng(1)).items()}
    (tmp_path / "in.bin").write_bytes(b"".join(s[k].tobytes() for k in ("x", "dy", "mean", "var", "gamma")))
    run = subprocess.run([str(exe), str(rows), str(cols), str(tmp_path / "in.bin"), str(tmp_path / "out.bin")],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"status {run.returncode}: {run.stderr}"
    out = np.fromfile(tmp_path / "out.bin", np.float32)
    ref = op.reference(*(s[k].astype(np.float64) for k in ("x", "dy", "mean", "var", "gamma")), 1e-5)
    got = {"dx": out[:rows * cols].reshape(rows, cols), "dgamma": out[rows * cols:rows * cols + cols],
           "dbeta": out[rows * cols + cols:]}
    for name, value in got.items():
        np.testing.assert_allclose(value, ref[name], rtol=1e-4, atol=1e-4, err_msg=name)


def test_the_aclnn_call_computes_the_cell_backward_on_the_twin(tmp_path):
    cxx = shutil.which("g++")
    if cxx is None:
        toolchain_missing("no C++ compiler (g++) on this machine")
    root, twin = ROOT / "generated" / "ascend" / "lstm_cell_backward", Path(__file__).parent / "ascend_twin"
    (tmp_path / "readme.cpp").write_text(_block("c++", "aclnnThnnFusedLstmCellBackward"))
    (tmp_path / "shim.cpp").write_text(launch_shim(root / "op_kernel", root / "op_host", "lstm_cell_backward"))
    exe = tmp_path / "main"
    inc = [f"-I{twin}", f"-I{twin / 'aclnn'}", f"-I{root / 'op_kernel'}", f"-I{root / 'op_host'}"]
    cmd = [cxx, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", *inc, "-o", str(exe), str(tmp_path / "readme.cpp"),
           str(APPS / "cell_backward_main.cpp"), str(root / "op_host" / "aclnn_thnn_fused_lstm_cell_backward.cpp"),
           str(tmp_path / "shim.cpp")]
    proc = build_cache.run(cmd, outputs=[exe])
    assert proc.returncode == 0, proc.stderr[-3000:]
    n, h = 9, 21
    op = te_defs.get("lstm_cell_backward")
    s = {k: a.astype(np.float32) for k, a in op.sample({"N": n, "H": h}, np.random.default_rng(2)).items()}
    names = ("grad_hy", "grad_cy", "cx", "cy", "storage")
    (tmp_path / "in.bin").write_bytes(b"".join(s[k].tobytes() for k in names))
    run = subprocess.run([str(exe), str(n), str(h), str(tmp_path / "in.bin"), str(tmp_path / "out.bin")],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "cell_backward: 0", (run.returncode, run.stdout, run.stderr)
    out = np.fromfile(tmp_path / "out.bin", np.float32)
    ref = op.reference(*(s[k].astype(np.float64) for k in names), has_bias=True)
    got = {"grad_gates": out[:4 * n * h].reshape(n, 4 * h), "grad_cx": out[4 * n * h:5 * n * h].reshape(n, h),
           "grad_bias": out[5 * n * h:]}
    for name, value in got.items():
        np.testing.assert_allclose(value, ref[name], rtol=1e-5, atol=1e-5, err_msg=name)


# --------------------------------------------------------------------------- links

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings (lower case, punctuation dropped, spaces to -)."""
    heads = re.findall(r"^#+\s+(.*)$", re.sub(FENCE, "", path.read_text()), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_relative_link_resolves(page):
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked here
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            broken.append(f"{target}: no file {dest}")
        elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
            broken.append(f"{target}: no heading #{anchor} in {dest.name}")
    assert not broken, f"{page.name}: broken links: {broken}"
