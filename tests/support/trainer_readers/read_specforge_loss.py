"""examples/specforge_cpu.py's plain-torch EAGLE-3 loss against SpecForge 0.2.0's own reference formula.

Usage (in .venv-specforge): python read_specforge_loss.py SEED
SpecForge's `core/loss.py` keeps, beside its triton kernels, a "Reference implementation"
`_compute_loss(logits, target_p, position_mask)`. That module imports triton at the top
and wraps the function in `torch.compile`, so the function's own source is taken from the installed
file (located without importing it), its decorator dropped, and it is run in plain torch. Both losses
get the same random logits (float32 and bf16), target distributions and 0/1 position masks (rows
masked out included); each one's value and gradient with respect to the logits is reported.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import torch
from described import emit

ROOT = Path(__file__).resolve().parents[3]


def specforge_reference():
    """`_compute_loss` from the installed SpecForge's core/loss.py, without its torch.compile decorator."""
    package = Path(importlib.util.find_spec("specforge").origin).parent
    source = (package / "core" / "loss.py").read_text(encoding="utf-8")
    (node,) = [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "_compute_loss"]
    node.decorator_list = []
    scope = {"torch": torch, "nn": torch.nn}
    exec(compile(ast.Module(body=[node], type_ignores=[]), str(package / "core" / "loss.py"), "exec"), scope)
    return scope["_compute_loss"]


def ours():
    spec = importlib.util.spec_from_file_location("specforge_cpu", ROOT / "examples" / "specforge_cpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.PlainLogSoftmaxLoss.apply


def value_and_grad(loss_fn, logits: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> tuple[float, torch.Tensor]:
    leaf = logits.detach().clone().requires_grad_(True)
    loss = loss_fn(leaf, target, mask)
    loss.backward()
    return float(loss.detach()), leaf.grad.float()


generator = torch.Generator().manual_seed(int(sys.argv[1]))
reference, plain = specforge_reference(), ours()
cases = []
for dtype in (torch.float32, torch.bfloat16):
    batch, length, vocab = 2, 5, 37
    logits = (torch.randn(batch, length, vocab, generator=generator) * 3).to(dtype)
    target = torch.softmax(torch.randn(batch, length, vocab, generator=generator) * 2, dim=-1)
    mask = (torch.rand(batch, length, 1, generator=generator) > 0.4).float()
    mask[0, 0, 0], mask[1, -1, 0] = 0.0, 1.0  # at least one row each way
    ref_value, ref_grad = value_and_grad(reference, logits, target, mask)
    our_value, our_grad = value_and_grad(plain, logits, target, mask)
    cases.append({"dtype": str(dtype), "masked_rows": int((mask == 0).sum()), "reference": ref_value, "ours": our_value,
                  "grad_max_abs_diff": float((ref_grad - our_grad).abs().max()),
                  "grad_max_abs": float(ref_grad.abs().max())})
emit(cases)
