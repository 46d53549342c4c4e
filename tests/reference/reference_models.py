"""Independent PyTorch versions of kgpt's two model families, written from the model description in
docs/design.md, for checking kgpt's forward and hand-written backward tensor by tensor.

Runs on Debian's python3-torch 1.13 (CPU): no F.rms_norm and no F.scaled_dot_product_attention, so
both are spelled out here. Tensor names match kgpt's parameter declarations (src/model/families/).
"""
import math

import torch
import torch.nn.functional as F


def rms_norm(x, eps):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)


def causal_attention(q, k, v):
    """q (B, H, T, D); k, v (B, KV, T, D) with H a multiple of KV (grouped-query attention)."""
    heads, kv_heads, t, d = q.size(1), k.size(1), q.size(2), q.size(3)
    if kv_heads != heads:
        k = k.repeat_interleave(heads // kv_heads, dim=1)
        v = v.repeat_interleave(heads // kv_heads, dim=1)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(d)
    mask = torch.ones(t, t, dtype=torch.bool).tril()
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def rope_angles(t, d, base):
    """(T, D/2) angles t * base^(-2i/D) of the rotary embedding, in float64."""
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    return torch.outer(torch.arange(t, dtype=torch.float64), inv_freq)


def rotary(x, base, dims=0):
    """Half-split rotary embedding of x (B, H, T, D) over the first `dims` dimensions of each head (0:
    all of them; partial RoPE passes the rest through)."""
    t, d = x.size(2), dims if dims > 0 else x.size(3)
    angles = rope_angles(t, d, base)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2, rest = x[..., : d // 2], x[..., d // 2 : d], x[..., d:]
    return torch.cat((x1 * cos + x2 * sin, -x1 * sin + x2 * cos, rest), dim=-1)


def exclusive(y, v):
    """XSA: each head's output y (B, H, T, D) minus its projection on its own token's normalized value,
    v (B, KV, T, D) of the head's key/value group."""
    vn = F.normalize(v, dim=-1).repeat_interleave(y.size(1) // v.size(1), dim=1)
    return y - (y * vn).sum(dim=-1, keepdim=True) * vn


def block_order(n_layer, recur_start, recur_count):
    """The blocks in the order they run, as the golf record's layer list has them: under depth
    recurrence blocks recur_start .. recur_start + recur_count - 1 run again right after their first
    pass."""
    if recur_start < 0:
        return list(range(n_layer))
    end = recur_start + recur_count
    return list(range(end)) + list(range(recur_start, end)) + list(range(end, n_layer))


class Golf(torch.nn.Module):
    """parameter-golf's baseline family: GQA, RoPE, relu^2 MLP, weightless RMSNorm (also on q and k),
    q_gain, residual mix with x0, attn/mlp scales, U-Net skips, tied embedding, logit softcap; the
    records' SmearGate where the weights hold a smear_gate, their BigramHash where they hold a
    bigram table, their parallel residuals from block parallel_from on, and their depth recurrence:
    blocks recur_start .. recur_start + recur_count - 1 run again right after their first pass; the
    records' value embeddings, partial RoPE (rope_dims of each head rotate), LN scale (each block's
    norms times 1/sqrt(layer + 1), the layer as run), XSA (on the last xsa_last_n layers run) and the
    attention output gate (where the weights hold attn.attn_gate_proj)."""

    def __init__(self, params, n_layer, n_head, n_kv_head, rope_base, softcap, eps, parallel_from=-1,
                 recur_start=-1, recur_count=1, value_embed_layers=(), rope_dims=0, ln_scale=False, xsa_last_n=0):
        super().__init__()
        self.rope_dims, self.ln_scale, self.xsa_last_n = rope_dims, ln_scale, xsa_last_n
        self.value_embed_layers = list(value_embed_layers)  # layers as run, each with ve_layer_scales.j
        self.p = torch.nn.ParameterDict({k.replace(".", "__"): torch.nn.Parameter(v) for k, v in params.items()})
        self.n_layer, self.n_head, self.n_kv_head = n_layer, n_head, n_kv_head
        self.rope_base, self.softcap, self.eps = rope_base, softcap, eps
        self.parallel_from = parallel_from  # blocks from this one on: attention and MLP side by side
        self.order = block_order(n_layer, recur_start, recur_count)

    def w(self, name):
        return self.p[name.replace(".", "__")]

    def block(self, i, x, x0, ve=None, layer=0):
        """Block i run as layer `layer`; ve: the value embedding this layer adds to v (the record's
        v + v_embed), or None."""
        b = f"blocks.{i}."
        bsz, t, c = x.shape
        d = c // self.n_head
        scale = 1 / math.sqrt(layer + 1) if self.ln_scale else 1.0  # LN scale
        mix = self.w(b + "resid_mix")
        x = mix[0] * x + mix[1] * x0
        h = rms_norm(x, self.eps) * scale
        q = (h @ self.w(b + "attn.c_q.weight").t()).view(bsz, t, self.n_head, d).transpose(1, 2)
        k = (h @ self.w(b + "attn.c_k.weight").t()).view(bsz, t, self.n_kv_head, d).transpose(1, 2)
        v = h @ self.w(b + "attn.c_v.weight").t()
        if ve is not None:
            v = v + ve
        v = v.view(bsz, t, self.n_kv_head, d).transpose(1, 2)
        q = rotary(rms_norm(q, self.eps), self.rope_base, self.rope_dims)
        k = rotary(rms_norm(k, self.eps), self.rope_base, self.rope_dims)
        q = q * self.w(b + "attn.q_gain")[None, :, None, None]
        y = causal_attention(q, k, v)
        if layer >= len(self.order) - self.xsa_last_n:
            y = exclusive(y, v)
        gate = b + "attn.attn_gate_proj.weight"
        if gate.replace(".", "__") in self.p:  # the output gate: 2 sigmoid of the input's first features
            w = self.w(gate)
            y = y * (2 * torch.sigmoid(h[..., : w.size(1)] @ w.t())).transpose(1, 2)[..., None]
        y = y.transpose(1, 2).reshape(bsz, t, c)
        attn = self.w(b + "attn_scale") * (y @ self.w(b + "attn.proj.weight").t())
        parallel = 0 <= self.parallel_from <= i
        if not parallel:  # sequential: the MLP reads the norm of the attention's residual
            x = x + attn
            h = rms_norm(x, self.eps) * scale
        m = torch.relu(h @ self.w(b + "mlp.fc.weight").t()).square() @ self.w(b + "mlp.proj.weight").t()
        return x + self.w(b + "mlp_scale") * m + (attn if parallel else 0)

    def bigram(self, tokens):
        """The scaled, projected rows of the bigram table at each position's hash."""
        table = self.w("bigram.embed.weight")
        last = table.size(0) - 1
        rows = torch.full_like(tokens, last)
        rows[:, 1:] = torch.bitwise_xor(36313 * tokens[:, 1:], 27191 * tokens[:, :-1]) % last
        e = F.embedding(rows, table)
        if "bigram__proj__weight" in self.p:
            e = e @ self.w("bigram.proj.weight").t()
        return self.w("bigram.scale") * e

    def value_embed(self, tokens, layer):
        """The value embedding layer `layer` (as run) adds to v: g_j s (table[tok] W^T), or None."""
        if layer not in self.value_embed_layers:
            return None
        e = F.embedding(tokens, self.w("ve_shared.embed.weight"))
        if "ve_shared__proj__weight" in self.p:
            e = e @ self.w("ve_shared.proj.weight").t()
        j = self.value_embed_layers.index(layer)
        return self.w(f"ve_layer_scales.{j}") * (self.w("ve_shared.scale") * e)

    def logits(self, tokens):
        x = F.embedding(tokens, self.w("tok_emb.weight"))
        if "bigram__embed__weight" in self.p:
            x = x + self.bigram(tokens)
        x = rms_norm(x, self.eps)
        if "smear_gate" in self.p:
            # SmearGate: each position takes a share sigmoid(gate) of the previous one (none before
            # the first).
            g = torch.sigmoid(self.w("smear_gate"))
            previous = torch.cat((torch.zeros_like(x[:, :1]), x[:, :-1]), dim=1)
            x = (1 - g) * x + g * previous
        x0, skips = x, []
        layers = len(self.order)
        encoders = layers // 2
        for i in range(encoders):
            x = self.block(self.order[i], x, x0, self.value_embed(tokens, i), i)
            skips.append(x)
        for i in range(layers - encoders):
            if skips:
                x = x + self.w("skip_weights")[i] * skips.pop()
            x = self.block(self.order[encoders + i], x, x0, self.value_embed(tokens, encoders + i), encoders + i)
        z = rms_norm(x, self.eps) @ self.head().t()
        return self.softcap * torch.tanh(z / self.softcap) if self.softcap > 0 else z

    def head(self):
        """The untied output head when there is one, else the tied embedding."""
        return self.w("lm_head.weight") if "lm_head__weight" in self.p else self.w("tok_emb.weight")

    def forward(self, tokens, targets):
        z = self.logits(tokens)
        return F.cross_entropy(z.reshape(-1, z.size(-1)), targets.reshape(-1)), z


class Gpt2(torch.nn.Module):
    """nanoGPT / GPT-2: learned positions, LayerNorm with bias, GELU (tanh), multi-head attention,
    tied embedding; blocks run in block_order (depth recurrence)."""

    def __init__(self, params, n_layer, n_head, softcap, eps=1e-5, recur_start=-1, recur_count=1):
        super().__init__()
        self.p = torch.nn.ParameterDict({k.replace(".", "__"): torch.nn.Parameter(v) for k, v in params.items()})
        self.n_layer, self.n_head, self.softcap, self.eps = n_layer, n_head, softcap, eps
        self.order = block_order(n_layer, recur_start, recur_count)

    def w(self, name):
        return self.p[name.replace(".", "__")]

    def norm(self, name, x):
        return F.layer_norm(x, (x.size(-1),), self.w(name + ".weight"), self.w(name + ".bias"), self.eps)

    def dense(self, name, x):
        return x @ self.w(name + ".weight").t() + self.w(name + ".bias")

    def logits(self, tokens):
        bsz, t = tokens.shape
        x = F.embedding(tokens, self.w("transformer.wte.weight")) + self.w("transformer.wpe.weight")[:t]
        c = x.size(-1)
        d = c // self.n_head
        for i in self.order:
            b = f"transformer.h.{i}."
            q, k, v = self.dense(b + "attn.c_attn", self.norm(b + "ln_1", x)).split(c, dim=-1)
            q, k, v = (u.view(bsz, t, self.n_head, d).transpose(1, 2) for u in (q, k, v))
            y = causal_attention(q, k, v).transpose(1, 2).reshape(bsz, t, c)
            x = x + self.dense(b + "attn.c_proj", y)
            h = F.gelu(self.dense(b + "mlp.c_fc", self.norm(b + "ln_2", x)), approximate="tanh")
            x = x + self.dense(b + "mlp.c_proj", h)
        head = self.w("lm_head.weight") if "lm_head__weight" in self.p else self.w("transformer.wte.weight")
        z = self.norm("transformer.ln_f", x) @ head.t()
        return self.softcap * torch.tanh(z / self.softcap) if self.softcap > 0 else z

    def forward(self, tokens, targets):
        z = self.logits(tokens)
        return F.cross_entropy(z.reshape(-1, z.size(-1)), targets.reshape(-1)), z


def rotate_half_rope(x, base):
    """Hugging Face's Llama rotary embedding of x (B, H, T, D): x cos + rotate_half(x) sin, with
    rotate_half(x) = (-x2, x1) of the halves and the angles of frequency i repeated over both halves."""
    t, d = x.size(2), x.size(3)
    angles = rope_angles(t, d, base)
    angles = torch.cat((angles, angles), dim=-1)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Llama(torch.nn.Module):
    """Hugging Face's LlamaForCausalLM: RMSNorm with a weight, rotate_half RoPE, grouped-query attention,
    SwiGLU MLP, no biases, an untied head (or the tied embedding), an optional logit softcap; blocks run
    in block_order (depth recurrence)."""

    def __init__(self, params, n_layer, n_head, n_kv_head, rope_base, softcap, eps=1e-5, recur_start=-1,
                 recur_count=1):
        super().__init__()
        self.p = torch.nn.ParameterDict({k.replace(".", "__"): torch.nn.Parameter(v) for k, v in params.items()})
        self.n_layer, self.n_head, self.n_kv_head = n_layer, n_head, n_kv_head
        self.rope_base, self.softcap, self.eps = rope_base, softcap, eps
        self.order = block_order(n_layer, recur_start, recur_count)

    def w(self, name):
        return self.p[name.replace(".", "__")]

    def norm(self, name, x):
        return rms_norm(x, self.eps) * self.w(name)

    def logits(self, tokens):
        x = F.embedding(tokens, self.w("model.embed_tokens.weight"))
        bsz, t, c = x.shape
        d = c // self.n_head
        for i in self.order:
            b = f"model.layers.{i}."
            h = self.norm(b + "input_layernorm.weight", x)
            q = (h @ self.w(b + "self_attn.q_proj.weight").t()).view(bsz, t, self.n_head, d).transpose(1, 2)
            k = (h @ self.w(b + "self_attn.k_proj.weight").t()).view(bsz, t, self.n_kv_head, d).transpose(1, 2)
            v = (h @ self.w(b + "self_attn.v_proj.weight").t()).view(bsz, t, self.n_kv_head, d).transpose(1, 2)
            q, k = rotate_half_rope(q, self.rope_base), rotate_half_rope(k, self.rope_base)
            y = causal_attention(q, k, v).transpose(1, 2).reshape(bsz, t, c)
            x = x + y @ self.w(b + "self_attn.o_proj.weight").t()
            h = self.norm(b + "post_attention_layernorm.weight", x)
            gate = F.silu(h @ self.w(b + "mlp.gate_proj.weight").t())
            x = x + (gate * (h @ self.w(b + "mlp.up_proj.weight").t())) @ self.w(b + "mlp.down_proj.weight").t()
        head = self.w("lm_head.weight") if "lm_head__weight" in self.p else self.w("model.embed_tokens.weight")
        z = self.norm("model.norm.weight", x) @ head.t()
        return self.softcap * torch.tanh(z / self.softcap) if self.softcap > 0 else z

    def forward(self, tokens, targets):
        z = self.logits(tokens)
        return F.cross_entropy(z.reshape(-1, z.size(-1)), targets.reshape(-1)), z


# Each family's independent model, from a dump's weights and settings (compare.py). A family that
# kgpt registers must have one here: tests/reference/test_coverage.py says so when it has not.
FAMILIES = {
    "golf": lambda w, s: Golf(w, int(s["n_layer"]), int(s["n_head"]), int(s["n_kv_head"]), s["rope_base"],
                              s["logit_softcap"], s["rms_eps"], int(s.get("parallel_residual_start", -1)),
                              int(s.get("recur_start", -1)), int(s.get("recur_count", 1)),
                              [int(n) for n in s.get("value_embed_layers", "").split(",") if n.strip()],
                              int(s.get("rope_dims", 0)), bool(s.get("ln_scale", 0)), int(s.get("xsa_last_n", 0))),
    "gpt2": lambda w, s: Gpt2(w, int(s["n_layer"]), int(s["n_head"]), s["logit_softcap"],
                              recur_start=int(s.get("recur_start", -1)), recur_count=int(s.get("recur_count", 1))),
    "llama": lambda w, s: Llama(w, int(s["n_layer"]), int(s["n_head"]), int(s["n_kv_head"]), s["rope_base"],
                                s["logit_softcap"], recur_start=int(s.get("recur_start", -1)),
                                recur_count=int(s.get("recur_count", 1))),
}
