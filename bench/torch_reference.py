#!/usr/bin/env python3
"""PyTorch counterpart of `kgpt bench` for the GPU: the same two model families (golf and gpt2),
timed the same way (full optimizer steps of grad_accum micro-steps on synthetic tokens), with
torch.compile, bf16 autocast and F.scaled_dot_product_attention. It is the figure kgpt's CUDA
build is compared with in docs/benchmarks.md.

  python3 bench/torch_reference.py golf --batch 64 --seq 1024 --accum 8 --steps 5 --warmup 3
  python3 bench/torch_reference.py gpt2 --batch 16 --seq 1024 --accum 1 --steps 10 --warmup 3

Model FLOPs per token are counted as kgpt counts them: 6 N + 12 L H D T, N without learned
positions. MFU is model FLOP/s over the H100 SXM dense bf16 peak (989.4 TFLOP/s).
"""

import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

H100_BF16_PEAK = 989.4e12


def rms_norm(x):
    return F.rms_norm(x, (x.size(-1),), eps=1e-6)


class Rotary(nn.Module):
    def __init__(self, dim, base=10000.0):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)),
                             persistent=False)

    def forward(self, t, device):
        freqs = torch.outer(torch.arange(t, device=device, dtype=torch.float32), self.inv_freq)
        return freqs.cos()[None, None], freqs.sin()[None, None]


def apply_rope(x, cos, sin):
    half = x.size(-1) // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos + x2 * sin, -x1 * sin + x2 * cos), dim=-1).type_as(x)


class GolfAttention(nn.Module):
    def __init__(self, d, heads, kv_heads):
        super().__init__()
        self.h, self.kv, self.hd = heads, kv_heads, d // heads
        self.c_q = nn.Linear(d, d, bias=False)
        self.c_k = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.c_v = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        nn.init.zeros_(self.proj.weight)
        self.q_gain = nn.Parameter(torch.full((heads,), 1.5))
        self.rotary = Rotary(self.hd)

    def forward(self, x):
        b, t, d = x.shape
        q = self.c_q(x).view(b, t, self.h, self.hd).transpose(1, 2)
        k = self.c_k(x).view(b, t, self.kv, self.hd).transpose(1, 2)
        v = self.c_v(x).view(b, t, self.kv, self.hd).transpose(1, 2)
        q, k = rms_norm(q), rms_norm(k)
        cos, sin = self.rotary(t, x.device)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        q = q * self.q_gain.to(q.dtype)[None, :, None, None]
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv != self.h)
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, d))


class GolfBlock(nn.Module):
    def __init__(self, d, heads, kv_heads, mlp_mult):
        super().__init__()
        self.attn = GolfAttention(d, heads, kv_heads)
        self.fc = nn.Linear(d, mlp_mult * d, bias=False)
        self.mlp_proj = nn.Linear(mlp_mult * d, d, bias=False)
        nn.init.zeros_(self.mlp_proj.weight)
        self.attn_scale = nn.Parameter(torch.ones(d))
        self.mlp_scale = nn.Parameter(torch.ones(d))
        self.resid_mix = nn.Parameter(torch.stack((torch.ones(d), torch.zeros(d))))

    def forward(self, x, x0):
        mix = self.resid_mix.to(x.dtype)
        x = mix[0] * x + mix[1] * x0
        x = x + self.attn_scale.to(x.dtype) * self.attn(rms_norm(x))
        x = x + self.mlp_scale.to(x.dtype) * self.mlp_proj(torch.relu(self.fc(rms_norm(x))).square())
        return x


class Golf(nn.Module):
    def __init__(self, vocab=1024, layers=9, d=512, heads=8, kv_heads=4, mlp_mult=2, softcap=30.0):
        super().__init__()
        self.softcap = softcap
        self.tok_emb = nn.Embedding(vocab, d)
        nn.init.normal_(self.tok_emb.weight, std=0.005)
        self.encoders = layers // 2
        self.decoders = layers - self.encoders
        self.skip_weights = nn.Parameter(torch.ones(min(self.encoders, self.decoders), d))
        self.blocks = nn.ModuleList([GolfBlock(d, heads, kv_heads, mlp_mult) for _ in range(layers)])

    def forward(self, idx, targets):
        x = rms_norm(self.tok_emb(idx))
        x0, skips = x, []
        for i in range(self.encoders):
            x = self.blocks[i](x, x0)
            skips.append(x)
        for i in range(self.decoders):
            if skips:
                x = x + self.skip_weights[i].to(x.dtype) * skips.pop()
            x = self.blocks[self.encoders + i](x, x0)
        logits = F.linear(rms_norm(x), self.tok_emb.weight).float()
        logits = self.softcap * torch.tanh(logits / self.softcap)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


class Gpt2Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.h = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.c_fc = nn.Linear(d, 4 * d)
        self.mlp_proj = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.h, d // self.h).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(b, t, d))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class Gpt2(nn.Module):
    def __init__(self, vocab=50257, layers=12, d=768, heads=12, block=1024):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(block, d)
        self.blocks = nn.ModuleList([Gpt2Block(d, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        t = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight).float()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def newton_schulz(g, steps=5, eps=1e-7):
    a, b, c = 3.4445, -4.7750, 2.0315
    x = g.bfloat16()
    x = x / (x.norm() + eps)
    transposed = g.size(0) > g.size(1)
    if transposed:
        x = x.T
    for _ in range(steps):
        s = x @ x.T
        x = a * x + (b * s + c * s @ s) @ x
    return x.T if transposed else x


class Muon(torch.optim.Optimizer):
    """parameter-golf's Muon (one GPU): Nesterov momentum, Newton-Schulz in bf16."""

    def __init__(self, params, lr=0.04, momentum=0.95, steps=5):
        super().__init__(params, dict(lr=lr, momentum=momentum, steps=steps))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                if "buf" not in state:
                    state["buf"] = torch.zeros_like(p)
                buf = state["buf"]
                buf.mul_(group["momentum"]).add_(p.grad)
                g = p.grad.add(buf, alpha=group["momentum"])
                u = newton_schulz(g, group["steps"])
                p.add_(u.type_as(p), alpha=-group["lr"] * max(1.0, p.size(0) / p.size(1)) ** 0.5)


def make(args):
    if args.family == "golf":
        model = Golf()
        matrices = [p for n, p in model.blocks.named_parameters() if p.dim() == 2 and "resid_mix" not in n]
        scalars = [p for n, p in model.blocks.named_parameters() if p.dim() < 2 or "resid_mix" in n]
        scalars.append(model.skip_weights)
        optimizers = [
            torch.optim.Adam([{"params": [model.tok_emb.weight], "lr": 0.05}, {"params": scalars, "lr": 0.04}],
                             betas=(0.9, 0.95), eps=1e-8, fused=True),
            Muon(matrices, lr=0.04),
        ]
        positions = 0
    else:
        model = Gpt2(block=args.seq)
        optimizers = [torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)]
        positions = model.wpe.weight.numel()
    return model, optimizers, positions


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("family", choices=["golf", "gpt2"])
    parser.add_argument("--batch", type=int, default=64, help="sequences per micro-step")
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--accum", type=int, default=8, help="micro-steps per optimizer step")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--json", help="write the result here as JSON")
    args = parser.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    device = "cuda"
    torch.manual_seed(0)
    model, optimizers, positions = make(args)
    model = model.to(device)
    n_params = sum(p.numel() for p in model.parameters()) - positions
    step_model = model if args.no_compile else torch.compile(model)
    cfg = dict(golf=(9, 8, 64), gpt2=(12, 12, 64))[args.family]
    flops_per_token = 6.0 * n_params + 12.0 * cfg[0] * cfg[1] * cfg[2] * args.seq
    vocab = 1024 if args.family == "golf" else 50257
    gen = torch.Generator(device=device).manual_seed(3)
    x = torch.randint(0, vocab, (args.batch, args.seq), device=device, generator=gen)
    y = torch.randint(0, vocab, (args.batch, args.seq), device=device, generator=gen)

    def step():
        for opt in optimizers:
            opt.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for _ in range(args.accum):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = step_model(x, y)
            (loss / args.accum).backward()
            loss_sum += loss.detach()
        for opt in optimizers:
            opt.step()
        return loss_sum / args.accum

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / args.steps
    tokens = args.batch * args.seq * args.accum
    result = dict(
        family=args.family, params=n_params, batch=args.batch, seq=args.seq, accum=args.accum,
        tokens_per_step=tokens, ms_per_step=seconds * 1e3, tokens_per_s=tokens / seconds,
        model_tflops=flops_per_token * tokens / seconds / 1e12,
        mfu_bf16=flops_per_token * tokens / seconds / H100_BF16_PEAK,
        peak_mem_gib=torch.cuda.max_memory_allocated() / 2**30, loss=float(loss),
        device=torch.cuda.get_device_name(), torch=torch.__version__, compiled=not args.no_compile,
    )
    print("torch_reference " + " ".join(f"{k}:{v:.4g}" if isinstance(v, float) else f"{k}:{v}"
                                        for k, v in result.items()), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    if not math.isfinite(result["loss"]):
        raise SystemExit("non-finite loss")


if __name__ == "__main__":
    main()
