#!/usr/bin/env python3
"""PyTorch counterpart of `kgpt bench` for the GPU, in the form its users run it: the same two model
families (golf and gpt2), timed the same way (full optimizer steps of grad_accum micro-steps on
synthetic tokens), as parameter-golf's train_gpt.py and nanoGPT's train.py set PyTorch up:

- the model compiled whole (`torch.compile(dynamic=False, fullgraph=True)`), bf16 autocast;
- SDPA pinned to the flash backend (cuDNN, memory-efficient and math off), the backends printed;
  flash's backward is not deterministic, so kgpt is compared with cuDNN's non-deterministic backward;
- Muon's Newton-Schulz compiled (`torch.compile` of the function, as train_gpt.py does), the updates
  gathered in one flat bf16 buffer;
- gpt2's vocabulary padded to a multiple of 64 (50,304), as nanoGPT pads GPT-2's; targets stay
  below the tokenizer's 50,257.

  python3 bench/torch_reference.py golf --batch 64 --seq 1024 --accum 8 --steps 5 --warmup 3
  python3 bench/torch_reference.py gpt2 --batch 16 --seq 1024 --accum 1 --steps 10 --warmup 3
  python3 bench/torch_reference.py gpt2 --size 1p3b --batch 4 --seq 2048 --accum 8 --steps 3 --warmup 2

`--fp8 mlp|all` runs the blocks' MLP (or every) linear layer on FP8 tensor cores (torch._scaled_mm)
with kgpt's model.fp8 recipe: per-tensor power-of-two scales taken in the same pass, e4m3 inputs
and weights, e5m2 gradients, fast accumulation in the forward only.

`--muon-world W` times one rank of W as train_gpt.py shares Muon: matrix i is orthogonalised by rank
i % W, the rank with the most Newton-Schulz arithmetic is the one timed (it sets the step), and the
update buffer's all-reduce is left out (one GPU has nobody to exchange with; bench/scaling.py adds it
at NVLink bandwidth). The optimizer's own time is measured apart with CUDA events (`opt_ms`).

MFU on two counts over the H100/H200 SXM dense bf16 peak (989.4 TFLOP/s): kgpt's, 6 N + 12 L H D T
with N without learned positions (`mfu_bf16`), and llm.c's, 6 N + 6 L C T with the position table in
N (`mfu_llmc`). Memory: the allocator's peak allocated and reserved bytes, and the device's memory in
use after the timed steps (`cudaMemGetInfo`: context and libraries included), the measure kgpt's
`device_mem_used_mb` is.
"""

import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

H100_BF16_PEAK = 989.4e12  # dense bf16, H100 SXM; the H200's is the same


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


E4M3_MAX, E5M2_MAX = 448.0, 57344.0


def to_fp8(t, dtype, largest):
    """t at a scale of its own, 2^k with k the largest that keeps max |t| within the format (kgpt's
    model.fp8 recipe, torchtitan's "tensorwise"), and the scale undone, 2^-k, for _scaled_mm."""
    amax = t.abs().amax().float().clamp(min=1e-30)
    k = torch.floor(torch.log2(largest / amax))
    return (t.float() * torch.exp2(k)).clamp(-largest, largest).to(dtype), torch.exp2(-k)


class Fp8LinearFunction(torch.autograd.Function):
    """y = x W^T (+ b) on FP8 tensor cores: x and W in e4m3, dy in e5m2, each operand rounded at its
    own scale in the pass that uses it (the backward rounds x and W again, as kgpt does); the forward
    with fast accumulation, the backward without; dW in fp32."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        x2 = x.reshape(-1, x.shape[-1]).to(torch.bfloat16)
        w = weight.to(torch.bfloat16)
        x8, sx = to_fp8(x2, torch.float8_e4m3fn, E4M3_MAX)
        w8, sw = to_fp8(w, torch.float8_e4m3fn, E4M3_MAX)
        y = torch._scaled_mm(x8, w8.t(), scale_a=sx, scale_b=sw, out_dtype=torch.bfloat16, use_fast_accum=True,
                             bias=None if bias is None else bias.to(torch.bfloat16))
        ctx.save_for_backward(x2, w)
        ctx.x_shape, ctx.x_dtype, ctx.has_bias = x.shape, x.dtype, bias is not None
        return y.view(*x.shape[:-1], -1)

    @staticmethod
    def backward(ctx, dy):
        x2, w = ctx.saved_tensors
        dy2 = dy.reshape(-1, dy.shape[-1]).to(torch.bfloat16)
        dy8, sdy = to_fp8(dy2, torch.float8_e5m2, E5M2_MAX)
        dyt8, _ = to_fp8(dy2.t().contiguous(), torch.float8_e5m2, E5M2_MAX)
        wt8, sw = to_fp8(w.t().contiguous(), torch.float8_e4m3fn, E4M3_MAX)
        xt8, sx = to_fp8(x2.t().contiguous(), torch.float8_e4m3fn, E4M3_MAX)
        dx = torch._scaled_mm(dy8, wt8.t(), scale_a=sdy, scale_b=sw, out_dtype=torch.bfloat16)
        dw = torch._scaled_mm(dyt8, xt8.t(), scale_a=sdy, scale_b=sx, out_dtype=torch.float32)
        db = dy2.float().sum(0) if ctx.has_bias else None
        return dx.view(ctx.x_shape).to(ctx.x_dtype), dw, db


class Fp8Linear(nn.Linear):
    def forward(self, x):
        return Fp8LinearFunction.apply(x, self.weight, self.bias)


def use_fp8(model, which):
    """The blocks' linear layers (`all`) or their MLPs' (`mlp`) on FP8 products, as kgpt's model.fp8."""
    mlp = {"fc", "mlp_proj", "c_fc"}
    count = 0
    for block in model.blocks:
        for name, layer in block.named_modules():
            if isinstance(layer, nn.Linear) and (which == "all" or name.split(".")[-1] in mlp):
                layer.__class__ = Fp8Linear
                count += 1
    return count


def newton_schulz(g, steps: int = 5, eps: float = 1e-7):
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


def newton_schulz_flops(rows, cols, steps=5):
    m, n = min(rows, cols), max(rows, cols)
    return steps * (2 * m * m * n + 2 * m * m * m + 2 * m * m * n)


class Muon(torch.optim.Optimizer):
    """parameter-golf's Muon: Nesterov momentum, Newton-Schulz in bf16, the updates in one flat bf16
    buffer. With world > 1, only matrix i with i % world == rank is orthogonalised here."""

    def __init__(self, params, lr=0.04, momentum=0.95, steps=5, world=1, rank=0, orthogonalise=newton_schulz):
        super().__init__(params, dict(lr=lr, momentum=momentum, steps=steps))
        self.world, self.rank, self.orthogonalise = world, rank, orthogonalise

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            params = group["params"]
            flat = torch.zeros(sum(p.numel() for p in params), device=params[0].device, dtype=torch.bfloat16)
            at = 0
            for i, p in enumerate(params):
                if i % self.world == self.rank:
                    state = self.state[p]
                    if "buf" not in state:
                        state["buf"] = torch.zeros_like(p)
                    buf = state["buf"]
                    buf.mul_(group["momentum"]).add_(p.grad)
                    g = self.orthogonalise(p.grad.add(buf, alpha=group["momentum"]), group["steps"])
                    g = g * max(1.0, p.size(0) / p.size(1)) ** 0.5
                    flat[at:at + p.numel()] = g.reshape(-1)
                at += p.numel()
            # world > 1: the all-reduce of `flat` across ranks would go here (not timed on one GPU).
            at = 0
            for p in params:
                p.add_(flat[at:at + p.numel()].view_as(p).to(p.dtype), alpha=-group["lr"])
                at += p.numel()


def busiest_rank(matrices, world):
    """The rank of `world` with the most Newton-Schulz arithmetic under i % world sharing."""
    load = [0] * world
    for i, p in enumerate(matrices):
        load[i % world] += newton_schulz_flops(p.size(0), p.size(1))
    return max(range(world), key=lambda r: load[r]), load


SIZES = {"124m": dict(layers=12, d=768, heads=12), "1p3b": dict(layers=24, d=2048, heads=16)}


def make(args):
    ns = newton_schulz if args.no_compile else torch.compile(newton_schulz)
    if args.family == "golf":
        model = Golf()
        matrices = [p for n, p in model.blocks.named_parameters() if p.dim() == 2 and "resid_mix" not in n]
        scalars = [p for n, p in model.blocks.named_parameters() if p.dim() < 2 or "resid_mix" in n]
        scalars.append(model.skip_weights)
        rank, load = busiest_rank(matrices, args.muon_world)
        optimizers = [
            torch.optim.Adam([{"params": [model.tok_emb.weight], "lr": 0.05}, {"params": scalars, "lr": 0.04}],
                             betas=(0.9, 0.95), eps=1e-8, fused=True),
            Muon(matrices, lr=0.04, world=args.muon_world, rank=rank, orthogonalise=ns),
        ]
        shape = dict(layers=9, heads=8, head_dim=64, d=512, vocab=1024, model_vocab=1024)
        extra = dict(muon_world=args.muon_world, muon_rank=rank,
                     muon_share=load[rank] / max(1, sum(load)))
    else:
        size = SIZES[args.size]
        vocab = 50257
        model_vocab = (vocab + args.vocab_pad - 1) // args.vocab_pad * args.vocab_pad
        model = Gpt2(vocab=model_vocab, layers=size["layers"], d=size["d"], heads=size["heads"], block=args.seq)
        decay = [p for p in model.parameters() if p.dim() >= 2]
        other = [p for p in model.parameters() if p.dim() < 2]
        optimizers = [torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                                        lr=6e-4, betas=(0.9, 0.95), fused=True)]
        shape = dict(layers=size["layers"], heads=size["heads"], head_dim=size["d"] // size["heads"], d=size["d"],
                     vocab=vocab, model_vocab=model_vocab)
        extra = dict(size=args.size)
    return model, optimizers, shape, extra


def pin_flash_attention():
    from torch.backends import cuda as backends
    backends.enable_flash_sdp(True)
    backends.enable_cudnn_sdp(False)
    backends.enable_mem_efficient_sdp(False)
    backends.enable_math_sdp(False)
    return (f"flash={backends.flash_sdp_enabled()} cudnn={backends.cudnn_sdp_enabled()} "
            f"mem_efficient={backends.mem_efficient_sdp_enabled()} math={backends.math_sdp_enabled()}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("family", choices=["golf", "gpt2"])
    parser.add_argument("--size", choices=sorted(SIZES), default="124m", help="gpt2's shape")
    parser.add_argument("--batch", type=int, default=64, help="sequences per micro-step")
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--accum", type=int, default=8, help="micro-steps per optimizer step")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--vocab-pad", type=int, default=64, help="gpt2: the model's vocabulary rounded up to this")
    parser.add_argument("--muon-world", type=int, default=1, help="golf: time one rank of this many sharing Muon")
    parser.add_argument("--no-compile", action="store_true", help="eager model and Newton-Schulz (the weaker form)")
    parser.add_argument("--fp8", choices=["none", "mlp", "all"], default="none",
                        help="the blocks' linear layers (all) or their MLPs' on FP8 products (torch._scaled_mm)")
    parser.add_argument("--json", help="write the result here as JSON")
    args = parser.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    sdpa = pin_flash_attention()
    print(f"torch_reference sdpa_backends: {sdpa}", flush=True)
    device = "cuda"
    torch.manual_seed(0)
    model, optimizers, shape, extra = make(args)
    model = model.to(device)
    fp8_layers = use_fp8(model, args.fp8) if args.fp8 != "none" else 0
    positions = model.wpe.weight.numel() if args.family == "gpt2" else 0
    n_all = sum(p.numel() for p in model.parameters())
    n_params = n_all - positions
    step_model = model if args.no_compile else torch.compile(model, dynamic=False, fullgraph=True)
    flops_kgpt = 6.0 * n_params + 12.0 * shape["layers"] * shape["heads"] * shape["head_dim"] * args.seq
    flops_llmc = 6.0 * n_all + 6.0 * shape["layers"] * shape["d"] * args.seq
    gen = torch.Generator(device=device).manual_seed(3)
    x = torch.randint(0, shape["vocab"], (args.batch, args.seq), device=device, generator=gen)
    y = torch.randint(0, shape["vocab"], (args.batch, args.seq), device=device, generator=gen)
    opt_times = []

    def step():
        for opt in optimizers:
            opt.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for _ in range(args.accum):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = step_model(x, y)
            (loss / args.accum).backward()
            loss_sum += loss.detach()
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for opt in optimizers:
            opt.step()
        end.record()
        opt_times.append((begin, end))
        return loss_sum / args.accum

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    opt_times.clear()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / args.steps
    free, total = torch.cuda.mem_get_info()
    opt_ms = sorted(b.elapsed_time(e) for b, e in opt_times)[len(opt_times) // 2]
    tokens = args.batch * args.seq * args.accum
    result = dict(
        family=args.family, params=n_params, batch=args.batch, seq=args.seq, accum=args.accum,
        vocab=shape["vocab"], model_vocab=shape["model_vocab"],
        tokens_per_step=tokens, ms_per_step=seconds * 1e3, tokens_per_s=tokens / seconds, opt_ms=opt_ms,
        model_tflops=flops_kgpt * tokens / seconds / 1e12,
        mfu_bf16=flops_kgpt * tokens / seconds / H100_BF16_PEAK,
        mfu_llmc=flops_llmc * tokens / seconds / H100_BF16_PEAK,
        peak_mem_gib=torch.cuda.max_memory_allocated() / 2**30,
        peak_reserved_gib=torch.cuda.max_memory_reserved() / 2**30,
        device_used_mb=(total - free) / 2**20, loss=float(loss),
        device=torch.cuda.get_device_name(), torch=torch.__version__, compiled=not args.no_compile,
        sdpa="flash", fp8=args.fp8, fp8_layers=fp8_layers, **extra,
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
