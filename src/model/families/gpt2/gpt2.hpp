#pragma once
// The gpt2 family (nanoGPT / GPT-2): x = wte[tokens] + wpe[positions]; L blocks of
//   x += c_proj(Attn(c_attn(LN1(x))));  x += mlp.c_proj(GELU(mlp.c_fc(LN2(x))))
// with multi-head causal attention and biases on every linear; final LN; logits through the tied
// embedding or an untied head (softcapped when model.logit_softcap > 0); cross-entropy. Activations
// are token-major in the activation type A; the residual adds and biases ride in the products.

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "core/views.hpp"
#include "model/attention/attention.hpp"
#include "model/language_model.hpp"
#include "model/ops/embedding.hpp"
#include "model/parameters.hpp"
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
  declare(t.wte, TensorSpec{"transformer.wte.weight", {v, c}, ParamGroup::embedding, Init::normal, wte_std});
  declare(t.wpe, TensorSpec{"transformer.wpe.weight", {static_cast<std::size_t>(block_size), c}, ParamGroup::embedding,
                            Init::normal, 0.02});
  auto norm = [&](auto& w, auto& b, const std::string& name) {
    declare(w, TensorSpec{name + ".weight", {c}, ParamGroup::scalar, Init::constant, 1.0});
    declare(b, TensorSpec{name + ".bias", {c}, ParamGroup::scalar, Init::zeros});
  };
  auto dense = [&](auto& w, auto& b, const std::string& name, std::size_t out, std::size_t in, double std_dev) {
    declare(w, TensorSpec{name + ".weight", {out, in}, ParamGroup::matrix, Init::normal, std_dev});
    declare(b, TensorSpec{name + ".bias", {out}, ParamGroup::scalar, Init::zeros});
  };
  t.blocks.resize(static_cast<std::size_t>(m.n_layer));
  for (int i = 0; i < m.n_layer; ++i) {
    auto& b = t.blocks[static_cast<std::size_t>(i)];
    const std::string p = "transformer.h." + std::to_string(i) + ".";
    norm(b.ln_1_w, b.ln_1_b, p + "ln_1");
    dense(b.c_attn, b.c_attn_b, p + "attn.c_attn", 3 * c, c, 0.02);
    dense(b.c_proj, b.c_proj_b, p + "attn.c_proj", c, c, projection_std);
    norm(b.ln_2_w, b.ln_2_b, p + "ln_2");
    dense(b.c_fc, b.c_fc_b, p + "mlp.c_fc", f, c, 0.02);
    dense(b.mlp_proj, b.mlp_proj_b, p + "mlp.c_proj", c, f, projection_std);
  }
  norm(t.ln_f_w, t.ln_f_b, "transformer.ln_f");
  if (!m.tie_embeddings) declare(t.lm_head, TensorSpec{"lm_head.weight", {v, c}, ParamGroup::head, Init::normal, 0.02});
}

// T: parameters, gradients and statistics; A: activations (T, or bf16).
template <class T, class A = T>
class Gpt2Model final : public LanguageModel<T> {
 public:
  // max_seq is also the number of learned positions (wpe rows).
  Gpt2Model(const config::ModelConfig& config, int max_batch, int max_seq);
  ~Gpt2Model() override;
  Gpt2Model(const Gpt2Model&) = delete;
  Gpt2Model& operator=(const Gpt2Model&) = delete;

  Parameters<T>& parameters() override { return params_; }
  const Parameters<T>& parameters() const override { return params_; }
  using LanguageModel<T>::forward;
  void forward(const ExecSpace& exec, const ConstTokenMatrix& inputs, const ConstTokenMatrix& targets,
               const Kokkos::View<double, MemSpace>& loss_sum) override;
  using LanguageModel<T>::backward;
  void backward(const ExecSpace& exec, T grad_scale, const GradientsReady& ready) override;
  Matrix<T> logits() const override { return logits_.mat(rows_, vocab_); }
  const char* attention_name() const override { return attention_->name(); }

 private:
  struct Layer;
  const Matrix<A>& head() const { return config_.tie_embeddings ? wa_.wte : wa_.lm_head; }
  const Matrix<T>& head_grad() const { return config_.tie_embeddings ? g_.wte : g_.lm_head; }
  Matrix<A> block_input(int l) const;  // x_in of block l: the embedding's output or block l - 1's

  config::ModelConfig config_;
  int max_batch_, max_seq_, vocab_, width_, heads_, head_dim_, hidden_;
  int batch_ = 0, seq_ = 0, rows_ = 0;
  Parameters<T> params_;
  Gpt2Tensors<T> w_, g_;  // views into the values and the gradients
  Vector<A> shadow_;      // the values rounded to A, when A is not T
  Gpt2Tensors<A> wa_;     // the weights and biases the products read: the values, or their shadow
  std::vector<BufferSpan> block_spans_;
  BufferSpan ln_f_span_{0, 0}, head_span_{0, 0};
  TokenStage stage_;
  std::vector<Layer> layers_;
  Buffer<A> x_last_, final_, d_logits_;
  Buffer<T> mean_final_, rstd_final_, logits_, lse_, losses_, partials_;
  Kokkos::View<double, MemSpace> loss_scratch_;
  Buffer<A> dx_, d_h_, d_o_, d_hidden_, d_qkv_;
  std::unique_ptr<Attention<A>> attention_;
  ops::EmbeddingSortSpace<T> sort_space_;
};

}  // namespace kgpt::model
