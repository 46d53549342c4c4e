#!/usr/bin/python3
"""Checks a kgpt model against the independent PyTorch model of its family in reference_models.py.

usage: compare.py DUMP.h5   (written by reference_dump FAMILY[-untied|-muon|-normuon])

Compares, in float64: logits (1e-4 relative), the loss (1e-5), every parameter gradient (1e-4),
and the losses of 10 optimizer steps (1e-4). The block matrices take Muon or AdamW as the dump
says (golf: Muon, gpt2: AdamW, gpt2-muon: Muon, golf-normuon: NorMuon), each tensor in the optimizer group the dump names
(kgpt's declaration); the embeddings (embed_lr), an untied head
(head_lr) and the vectors and scalars (scalar_lr) take Adam; decoupled weight decay acts on every
group at the group's own rate (matrix, embed, head and scalar weight decay), whatever its optimizer.
"""
import os
import sys

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_models import FAMILIES  # noqa: E402

torch.set_default_dtype(torch.float64)
failures = []


def close(name, ours, theirs, rtol, floor=1e-6):
    ours, theirs = np.asarray(ours, dtype=np.float64), np.asarray(theirs, dtype=np.float64)
    error = np.max(np.abs(ours - theirs) / np.maximum(np.abs(theirs), floor)) if ours.size else 0.0
    scale_error = np.max(np.abs(ours - theirs)) / max(np.max(np.abs(theirs)), floor) if ours.size else 0.0
    # Elementwise relative error, except where an element is tiny next to its tensor's scale.
    ok = error <= rtol or scale_error <= rtol
    print(f"{'ok  ' if ok else 'FAIL'} {name}: max relative error {min(error, scale_error):.2e} (tolerance {rtol:g})")
    if not ok:
        failures.append(name)


def newton_schulz(g, steps):
    a, b, c = 3.4445, -4.7750, 2.0315
    x = g / (g.norm() + 1e-7)
    transposed = g.size(0) > g.size(1)
    if transposed:
        x = x.t()
    for _ in range(steps):
        m = x @ x.t()
        x = a * x + (b * m + c * m @ m) @ x
    return x.t() if transposed else x


def normalise_neurons(update, second_moments, p, beta2):
    """NorMuon's step on an orthogonalised update, from its definition (modded-nanogpt's record #41):
    per index of the longer side (rows when square), the mean square over the shorter side feeds a
    running second moment; the update is divided by its root, then rescaled to its former norm."""
    rows, cols = update.shape
    per_row = rows >= cols
    mean = (update * update).mean(dim=1) if per_row else (update * update).mean(dim=0)
    moment = second_moments.setdefault(p, torch.zeros_like(mean))
    moment.add_((1 - beta2) * (mean - moment))
    scale = 1 / moment.sqrt().clamp_min(1e-10)
    normalised = update * (scale[:, None] if per_row else scale[None, :])
    return normalised * (update.norm() / normalised.norm().clamp_min(1e-10))


with h5py.File(sys.argv[1], "r") as f:
    s = {k: float(v) for k, v in f["loss"].attrs.items()}  # and golf's value embedding layers, below
    params = {name: torch.tensor(np.array(f["params"][name])) for name in f["params"]}
    kgpt_grads = {name: np.array(f["grads"][name]) for name in f["grads"]}
    batches = [(torch.tensor(np.array(f["batch/inputs"])), torch.tensor(np.array(f["batch/targets"]))),
               (torch.tensor(np.array(f["batch/inputs2"])), torch.tensor(np.array(f["batch/targets2"])))]
    kgpt_logits, kgpt_loss = np.array(f["logits"]), float(f["loss"][()])
    kgpt_losses = np.array(f["train/losses"])
    groups = {name: (g.decode() if isinstance(g, bytes) else g) for name, g in
              ((name, f["groups"][name][()]) for name in f["params"])}
    family = f["family"][()]
    family = family.decode() if isinstance(family, bytes) else family
    matrix_optimizer = f["matrix_optimizer"][()]
    matrix_optimizer = matrix_optimizer.decode() if isinstance(matrix_optimizer, bytes) else matrix_optimizer
    if "value_embed_layers" in f:
        layers = f["value_embed_layers"][()]
        s["value_embed_layers"] = layers.decode() if isinstance(layers, bytes) else layers


def build(weights):
    return FAMILIES[family]({k: v.clone() for k, v in weights.items()}, s)


print(f"family {family}, matrices {matrix_optimizer}, tied {bool(s['tie_embeddings'])}")
model = build(params)
loss, logits = model(*batches[0])
loss.backward()
close("logits", kgpt_logits, logits.detach().reshape(kgpt_logits.shape).numpy(), 1e-4)
close("loss", [kgpt_loss], [loss.item()], 1e-5)
for name, grad in kgpt_grads.items():
    close("grad " + name, grad, model.w(name).grad.numpy(), 1e-4)

model = build(params)
losses = []
# The groups of the model's declaration, as the dump names them: block matrices, embeddings, an
# untied head, vectors and scalars.
named = {n.replace("__", "."): p for n, p in model.p.items()}
matrices = [p for n, p in named.items() if groups[n] == "matrix"]
embeddings = [p for n, p in named.items() if groups[n] == "embedding"]
heads = [p for n, p in named.items() if groups[n] == "head"]
scalars = [p for n, p in named.items() if groups[n] == "scalar"]
# Decoupled weight decay, each group at its own rate (AdamW's, and Muon's p *= 1 - lr wd).
adam_groups = [{"params": embeddings, "lr": s["embed_lr"], "weight_decay": s["embed_weight_decay"]},
               {"params": scalars, "lr": s["scalar_lr"], "weight_decay": s["scalar_weight_decay"]}]
if heads:
    adam_groups.append({"params": heads, "lr": s["head_lr"], "weight_decay": s["head_weight_decay"]})
if matrix_optimizer == "adamw":
    adam_groups.append({"params": matrices, "lr": s["matrix_lr"], "weight_decay": s["matrix_weight_decay"]})
adam = torch.optim.AdamW(adam_groups, betas=(s["beta1"], s["beta2"]), eps=s["adam_eps"])
momentum_buffers = [torch.zeros_like(p) for p in matrices]
second_moments = {}  # NorMuon's, by parameter
for step in range(10):
    model.zero_grad()
    loss, _ = model(*batches[step % 2])
    losses.append(loss.item())
    loss.backward()
    if matrix_optimizer in ("muon", "normuon"):
        # Nesterov momentum with warmup, Newton-Schulz, the shape scale, decoupled weight decay.
        warm = min(step / s["muon_momentum_warmup_steps"], 1.0) if s["muon_momentum_warmup_steps"] > 0 else 1.0
        mu = (1 - warm) * s["muon_momentum_warmup_start"] + warm * s["muon_momentum"]
        with torch.no_grad():
            for p, buf in zip(matrices, momentum_buffers):
                buf.mul_(mu).add_(p.grad)
                update = newton_schulz(p.grad + mu * buf, int(s["muon_backend_steps"]))
                if matrix_optimizer == "normuon":
                    update = normalise_neurons(update, second_moments, p, s["beta2"])
                p.mul_(1 - s["matrix_lr"] * s["matrix_weight_decay"])
                p.add_(update, alpha=-s["matrix_lr"] * max(1.0, p.size(0) / p.size(1)) ** 0.5)
    adam.step()
close("10-step losses", kgpt_losses, losses, 1e-4)
print("kgpt losses     ", np.array2string(kgpt_losses, precision=6))
print("reference losses", np.array2string(np.array(losses), precision=6))

print(f"{'passed' if not failures else 'failed'}: {len(failures)} failures")
sys.exit(1 if failures else 0)
