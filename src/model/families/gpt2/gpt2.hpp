#pragma once
// The gpt2 family (nanoGPT / GPT-2): x = wte[tokens] + wpe[positions]; L blocks of
//   x += c_proj(Attn(c_attn(LN1(x))));  x += mlp.c_proj(GELU(mlp.c_fc(LN2(x))))
// with multi-head causal attention and biases on every linear; final LN; logits through the tied
// embedding or an untied head (softcapped when model.logit_softcap > 0); cross-entropy. Activations
// are token-major in the activation type A; the residual adds and biases ride in the products, and
// so do the GELU and its gradient where the backend can (ops/linear.hpp, model.gelu_epilogue).

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "model/layers/attention.hpp"
#include "model/layers/mlp.hpp"
#include "model/model_base.hpp"
#include "model/ops/linear.hpp"
#include "model/parameters.hpp"
#include "model/recompute.hpp"
#include "model/storage.hpp"

namespace kgpt::model {

// gpt2's tensors, for the values and (a second instance) for the gradients. C d_model, F the MLP
// width (mlp_mult * C), V vocab, P learned positions.
template <class T>
struct Gpt2BlockTensors {
  Vector<T> ln_1_w, ln_1_b;         // ln_1.weight, ln_1.bias (C)
  Matrix<T> c_attn;                 // attn.c_attn.weight (3C, C)
  Vector<T> c_attn_b;               // attn.c_attn.bias (3C)
  Matrix<T> c_proj;                 // attn.c_proj.weight (C, C)
  Vector<T> c_proj_b;               // attn.c_proj.bias (C)
  Vector<T> ln_2_w, ln_2_b;         // ln_2.weight, ln_2.bias (C)
  Matrix<T> c_fc;                   // mlp.c_fc.weight (F, C)
  Vector<T> c_fc_b;                 // mlp.c_fc.bias (F)
  Matrix<T> mlp_proj;               // mlp.c_proj.weight (C, F)
  Vector<T> mlp_proj_b;             // mlp.c_proj.bias (C)
};

template <class T>
struct Gpt2Tensors {
  Matrix<T> wte, wpe;  // transformer.wte.weight (V, C), transformer.wpe.weight (P, C)
  std::vector<Gpt2BlockTensors<T>> blocks;
  Vector<T> ln_f_w, ln_f_b;  // transformer.ln_f.weight, .bias (C)
  Matrix<T> lm_head;         // lm_head.weight (V, C); empty when the embedding is tied
};

// The one declaration of gpt2's parameters, with nanoGPT's names: wte N(0, tied_embed_init_std)
// (0.02 by default), wpe N(0, 0.02); per block LayerNorms (weight 1, bias 0), c_attn and c_fc
// N(0, 0.02), the two output projections N(0, 0.02 / sqrt(2 n_layer)), biases 0; ln_f; an untied head
// N(0, 0.02), nanoGPT's init of a Linear.
template <class Tensors, class Declare>
void declare_gpt2(const config::ModelConfig& m, int block_size, Tensors& t, Declare&& declare) {
  const std::size_t c = m.d_model, v = m.vocab_size, f = c * m.mlp_mult;
  const double projection_std = 0.02 / std::sqrt(2.0 * m.n_layer);
  const double wte_std = m.tie_embeddings ? m.tied_embed_init_std : 0.02;
  declare(t.wte, TensorSpec{"transformer.wte.weight", {v, c}, Role::embedding, Init::normal, wte_std});
  declare(t.wpe, TensorSpec{"transformer.wpe.weight", {static_cast<std::size_t>(block_size), c}, Role::embedding,
                            Init::normal, 0.02});
  int block = -1;  // the block being declared
  auto norm = [&](auto& w, auto& b, const std::string& name) {
    declare(w, in_block({name + ".weight", {c}, Role::norm, Init::constant, 1.0}, block));
    declare(b, in_block({name + ".bias", {c}, Role::norm, Init::zeros}, block));
  };
  auto dense = [&](auto& w, auto& b, const std::string& name, Role role, std::size_t out, std::size_t in,
                   double std_dev) {
    declare(w, in_block({name + ".weight", {out, in}, role, Init::normal, std_dev}, block));
    declare(b, in_block({name + ".bias", {out}, Role::bias, Init::zeros}, block));
  };
  t.blocks.resize(static_cast<std::size_t>(m.n_layer));
  for (int i = 0; i < m.n_layer; ++i) {
    auto& b = t.blocks[static_cast<std::size_t>(i)];
    const std::string p = "transformer.h." + std::to_string(i) + ".";
    block = i;
    norm(b.ln_1_w, b.ln_1_b, p + "ln_1");
    dense(b.c_attn, b.c_attn_b, p + "attn.c_attn", Role::attention, 3 * c, c, 0.02);
    dense(b.c_proj, b.c_proj_b, p + "attn.c_proj", Role::attention, c, c, projection_std);
    norm(b.ln_2_w, b.ln_2_b, p + "ln_2");
    dense(b.c_fc, b.c_fc_b, p + "mlp.c_fc", Role::mlp, f, c, 0.02);
    dense(b.mlp_proj, b.mlp_proj_b, p + "mlp.c_proj", Role::mlp, c, f, projection_std);
  }
  block = -1;
  norm(t.ln_f_w, t.ln_f_b, "transformer.ln_f");
  if (!m.tie_embeddings) declare(t.lm_head, TensorSpec{"lm_head.weight", {v, c}, Role::head, Init::normal, 0.02});
}

// gpt2's activations and workspaces.
template <class T, class A>
struct Gpt2Activations {
  struct Kept {
    Buffer<A> x_in;  // the block's input
  };
  // What a block's backward reads, its own or (rebuilt blocks, model/recompute.hpp) shared.
  struct Working {
    Buffer<A> h1, qkv, o, x_attn, h2, fc, act;
    Buffer<T> mean1, rstd1, mean2, rstd2;
  };
  BlockActivations<Kept, Working> blocks;
  Buffer<A> x_last, final;
  Buffer<T> mean_final, rstd_final;
  Buffer<A> dx, d_o, d_hidden, d_qkv;  // backward scratch, shared by all layers
  Buffer<T> partials;
};

template <class T, class A, class Declare>
void declare_gpt2_activations(const config::ModelConfig& m, std::size_t max_tokens, Gpt2Activations<T, A>& a,
                              Declare&& declare) {
  const std::size_t c = m.d_model, f = c * m.mlp_mult;
  using Acts = Gpt2Activations<T, A>;
  a.blocks.declare(
      m, [&](typename Acts::Kept& k) { declare(k.x_in, ActivationSpec{"x_in", c}); },
      [&](typename Acts::Working& L, const std::vector<int>&) {
        declare(L.h1, ActivationSpec{"h1", c});
        declare(L.mean1, ActivationSpec{"mean1", 1});
        declare(L.rstd1, ActivationSpec{"rstd1", 1});
        declare(L.qkv, ActivationSpec{"qkv", 3 * c});
        declare(L.o, ActivationSpec{"o", c});
        declare(L.x_attn, ActivationSpec{"x_attn", c});
        declare(L.h2, ActivationSpec{"h2", c});
        declare(L.mean2, ActivationSpec{"mean2", 1});
        declare(L.rstd2, ActivationSpec{"rstd2", 1});
        declare(L.fc, ActivationSpec{"fc", f});
        declare(L.act, ActivationSpec{"act", f});
      });
  declare(a.x_last, ActivationSpec{"x_out", c});
  declare(a.final, ActivationSpec{"final", c});
  declare(a.mean_final, ActivationSpec{"mean_final", 1});
  declare(a.rstd_final, ActivationSpec{"rstd_final", 1});
  for (Buffer<A>* b : {&a.dx, &a.d_o}) declare(*b, ActivationSpec{"backward", c});
  declare(a.d_hidden, ActivationSpec{"backward_mlp", f});
  declare(a.d_qkv, ActivationSpec{"backward_qkv", 3 * c});
  declare(a.partials, ActivationSpec::elements("column_partials", ops::ColumnSums<T, 2>::workspace(max_tokens, std::max(3 * c, f))));
}

// T: parameters, gradients and statistics; A: activations (T, or bf16).
template <class T, class A = T>
class Gpt2Model final : public ModelBase<T, A, Gpt2Tensors> {
  using Base = ModelBase<T, A, Gpt2Tensors>;

 public:
  // max_seq is also the number of learned positions (wpe rows).
  Gpt2Model(const config::ModelConfig& config, int max_batch, int max_seq);

 protected:
  void embedding_forward(const ExecSpace& exec) override;
  void block_forward(const ExecSpace& exec, int l) override;
  Matrix<A> final_forward(const ExecSpace& exec) override;
  Matrix<A> final_input() const override;
  void final_backward(const ExecSpace& exec, const GradientsReady& ready) override;
  void block_backward(const ExecSpace& exec, int l, const GradientsReady& ready) override;
  void embedding_backward(const ExecSpace& exec, const GradientsReady& ready) override;
  const Matrix<A>& head_weights() const override { return this->config_.tie_embeddings ? this->wa_.wte : this->wa_.lm_head; }
  const Matrix<T>& head_grad() const override { return this->config_.tie_embeddings ? this->g_.wte : this->g_.lm_head; }

 private:
  Matrix<A> block_input(int l) const;  // x_in of block l: the embedding's output or block l - 1's
  Workspace<T> partials() const { return Workspace<T>(acts_.partials); }

  int hidden_;
  std::vector<layers::AttentionProjections<T, A>> attn_;         // per block
  std::vector<layers::Mlp<T, A, layers::GeluActivation>> mlp_;  // per block
  Gpt2Activations<T, A> acts_;
};

}  // namespace kgpt::model
