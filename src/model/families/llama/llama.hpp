#pragma once
// The llama family (Llama 2 / 3 style, Hugging Face's LlamaForCausalLM): token embedding; L blocks of
//   x += o_proj(Attn(RoPE(q_proj(h)), RoPE(k_proj(h)), v_proj(h))),  h = RMSNorm_w(x)
//   x += down_proj(silu(gate_proj(h)) * up_proj(h)),                  h = RMSNorm_w(x)
// with grouped-query attention, RoPE (Hugging Face's rotate_half over the full head dimension,
// model.rope_base), RMSNorm with
// a learned weight (eps 1e-5), no biases, a SwiGLU MLP of width mlp_mult * C; final RMSNorm; an
// untied output head by default; AdamW by default. Tensor names are Hugging Face's. Its kernels
// (RoPE without norm or gain, SwiGLU) are its own (kernels.hpp); its attention and MLP sublayers,
// RoPE tables and the rest are shared with the other families (model_base.hpp, layers/, ops/).

#include <string>
#include <vector>

#include "config/config.hpp"
#include "model/attention/heads.hpp"
#include "model/families/llama/kernels.hpp"
#include "model/layers/attention.hpp"
#include "model/layers/mlp.hpp"
#include "model/layers/rotary.hpp"
#include "model/model_base.hpp"
#include "model/ops/linear.hpp"
#include "model/parameters.hpp"
#include "model/recompute.hpp"
#include "model/storage.hpp"

namespace kgpt::model {

// C d_model, V vocab, KV*D the key/value width, F = mlp_mult * C.
template <class T>
struct LlamaBlockTensors {
  Vector<T> input_norm;                 // input_layernorm.weight (C)
  Matrix<T> q_proj, k_proj, v_proj;     // self_attn.{q,k,v}_proj.weight (C, C), (KV*D, C), (KV*D, C)
  Matrix<T> o_proj;                     // self_attn.o_proj.weight (C, C)
  Vector<T> post_norm;                  // post_attention_layernorm.weight (C)
  Matrix<T> gate_proj, up_proj;         // mlp.gate_proj.weight, mlp.up_proj.weight (F, C)
  Matrix<T> down_proj;                  // mlp.down_proj.weight (C, F)
};

template <class T>
struct LlamaTensors {
  Matrix<T> embed;  // model.embed_tokens.weight (V, C)
  std::vector<LlamaBlockTensors<T>> blocks;
  Vector<T> norm;     // model.norm.weight (C)
  Matrix<T> lm_head;  // lm_head.weight (V, C); empty when the embedding is tied
};

// The one declaration of llama's parameters, initialised as Hugging Face initialises Llama:
// every matrix and the embedding N(0, 0.02) (a tied embedding N(0, tied_embed_init_std)), the
// norms' weights 1. q, k and v lie back to back, and gate and up: each pair is read as one matrix.
template <class Tensors, class Declare>
void declare_llama(const config::ModelConfig& m, Tensors& t, Declare&& declare) {
  const std::size_t c = m.d_model, v = m.vocab_size;
  const std::size_t kv_dim = head_shape(m).kv_width(), f = c * m.mlp_mult;
  declare(t.embed, TensorSpec{"model.embed_tokens.weight", {v, c}, Role::embedding, Init::normal,
                              m.tie_embeddings ? m.tied_embed_init_std : 0.02});
  t.blocks.resize(static_cast<std::size_t>(m.n_layer));
  for (int i = 0; i < m.n_layer; ++i) {
    auto& b = t.blocks[static_cast<std::size_t>(i)];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    auto spec = [i](TensorSpec s) { return in_block(std::move(s), i); };
    declare(b.input_norm, spec({p + "input_layernorm.weight", {c}, Role::norm, Init::constant, 1.0}));
    declare(b.q_proj, spec({p + "self_attn.q_proj.weight", {c, c}, Role::attention, Init::normal, 0.02}));
    declare(b.k_proj, spec({p + "self_attn.k_proj.weight", {kv_dim, c}, Role::attention, Init::normal, 0.02}));
    declare(b.v_proj, spec({p + "self_attn.v_proj.weight", {kv_dim, c}, Role::attention, Init::normal, 0.02}));
    declare(b.o_proj, spec({p + "self_attn.o_proj.weight", {c, c}, Role::attention, Init::normal, 0.02}));
    declare(b.post_norm, spec({p + "post_attention_layernorm.weight", {c}, Role::norm, Init::constant, 1.0}));
    declare(b.gate_proj, spec({p + "mlp.gate_proj.weight", {f, c}, Role::mlp, Init::normal, 0.02}));
    declare(b.up_proj, spec({p + "mlp.up_proj.weight", {f, c}, Role::mlp, Init::normal, 0.02}));
    declare(b.down_proj, spec({p + "mlp.down_proj.weight", {c, f}, Role::mlp, Init::normal, 0.02}));
  }
  declare(t.norm, TensorSpec{"model.norm.weight", {c}, Role::norm, Init::constant, 1.0});
  if (!m.tie_embeddings) declare(t.lm_head, TensorSpec{"lm_head.weight", {v, c}, Role::head, Init::normal, 0.02});
}

template <class T, class A>
struct LlamaActivations {
  struct Kept {
    Buffer<A> x_in;  // the block's input
  };
  // What a block's backward reads, its own or (rebuilt blocks, model/recompute.hpp) shared.
  struct Working {
    Buffer<A> h1, qkv, q_rot, k_rot, o, x_attn, h2, gu, act;
    Buffer<T> rstd1, rstd2;
  };
  BlockActivations<Kept, Working> blocks;
  Buffer<A> x_last, final;
  Buffer<T> rstd_final;
  Buffer<A> dx, d_o, d_qr, d_kr, d_qkv, d_act, d_gu;  // backward scratch, shared by all layers
  Buffer<T> partials;
};

template <class T, class A, class Declare>
void declare_llama_activations(const config::ModelConfig& m, std::size_t max_tokens, LlamaActivations<T, A>& a,
                               Declare&& declare) {
  const std::size_t c = m.d_model, kvd = head_shape(m).kv_width();
  const std::size_t f = c * m.mlp_mult, w = head_shape(m).qkv_width();
  using Acts = LlamaActivations<T, A>;
  a.blocks.declare(
      m, [&](typename Acts::Kept& k) { declare(k.x_in, ActivationSpec{"x_in", c}); },
      [&](typename Acts::Working& L, const std::vector<int>&) {
        declare(L.h1, ActivationSpec{"h1", c});
        declare(L.rstd1, ActivationSpec{"rstd1", 1});
        declare(L.qkv, ActivationSpec{"qkv", w});
        declare(L.q_rot, ActivationSpec{"q_rot", c});
        declare(L.k_rot, ActivationSpec{"k_rot", kvd});
        declare(L.o, ActivationSpec{"o", c});
        declare(L.x_attn, ActivationSpec{"x_attn", c});
        declare(L.h2, ActivationSpec{"h2", c});
        declare(L.rstd2, ActivationSpec{"rstd2", 1});
        declare(L.gu, ActivationSpec{"gate_up", 2 * f});
        declare(L.act, ActivationSpec{"act", f});
      });
  declare(a.x_last, ActivationSpec{"x_out", c});
  declare(a.final, ActivationSpec{"final", c});
  declare(a.rstd_final, ActivationSpec{"rstd_final", 1});
  for (Buffer<A>* b : {&a.dx, &a.d_o, &a.d_qr}) declare(*b, ActivationSpec{"backward", c});
  declare(a.d_kr, ActivationSpec{"backward_kv", kvd});
  declare(a.d_qkv, ActivationSpec{"backward_qkv", w});
  declare(a.d_act, ActivationSpec{"backward_mlp", f});
  declare(a.d_gu, ActivationSpec{"backward_gate_up", 2 * f});
  declare(a.partials, ActivationSpec::elements("column_partials", ops::ColumnSums<T, 1>::workspace(max_tokens, c)));
}

template <class T, class A = T>
class LlamaModel final : public ModelBase<T, A, LlamaTensors> {
  using Base = ModelBase<T, A, LlamaTensors>;

 public:
  LlamaModel(const config::ModelConfig& config, int max_batch, int max_seq);

 protected:
  void embedding_forward(const ExecSpace& exec) override;
  void block_forward(const ExecSpace& exec, int l) override;
  Matrix<A> final_forward(const ExecSpace& exec) override;
  Matrix<A> final_input() const override;
  void final_backward(const ExecSpace& exec, const GradientsReady& ready) override;
  void block_backward(const ExecSpace& exec, int l, const GradientsReady& ready) override;
  void embedding_backward(const ExecSpace& exec, const GradientsReady& ready) override;
  const Matrix<A>& head_weights() const override { return this->config_.tie_embeddings ? this->wa_.embed : this->wa_.lm_head; }
  const Matrix<T>& head_grad() const override { return this->config_.tie_embeddings ? this->g_.embed : this->g_.lm_head; }

 private:
  Matrix<A> block_input(int l) const;  // x_in of block l: the embedding's output or block l - 1's
  Workspace<T> partials() const { return Workspace<T>(acts_.partials); }

  int hidden_;
  std::vector<layers::AttentionProjections<T, A>> attn_;  // per block: q, k, v (stacked, or three), o
  std::vector<layers::Mlp<T, A, llama::SwiGlu<T>>> mlp_;  // per block: gate and up (stacked, or two), down
  layers::RotaryTables<T> rotary_;
  LlamaActivations<T, A> acts_;
};

}  // namespace kgpt::model
