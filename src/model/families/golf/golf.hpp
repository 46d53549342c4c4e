#pragma once
// The golf family (parameter-golf's baseline): token embedding -> RMSNorm = x0; L blocks of
//   x = mix0*x + mix1*x0;  x += attn_scale * Attn(RMSNorm(x));  x += mlp_scale * MLP(RMSNorm(x))
// with GQA attention (RMSNorm and RoPE on q and k, per-head q_gain) and a relu^2 MLP; U-Net skips
// (the first L/2 block outputs are added back, scaled by skip_weights, before the last blocks, in
// reverse order); final RMSNorm; logits through the tied embedding (or an untied head), softcapped;
// cross-entropy. Forward keeps every activation the hand-written backward needs, token-major and in
// the activation type A (T, or bf16 for train.precision: bf16); parameters, their gradients, norm
// statistics and the loss stay in T.

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "core/bf16.hpp"
#include "core/views.hpp"
#include "model/attention/attention.hpp"
#include "model/language_model.hpp"
#include "model/ops/embedding.hpp"
#include "model/parameters.hpp"
#include "model/storage.hpp"

namespace kgpt::model {

// golf's tensors, for the values and (a second instance) for the gradients. Shapes with
// C d_model, V vocab, H heads, KV*D the key/value width, F = mlp_mult * C.
template <class T>
struct GolfBlockTensors {
  Matrix<T> c_q, c_k, c_v, proj;    // attn.c_q.weight (C, C), attn.c_k/c_v.weight (KV*D, C), attn.proj.weight (C, C)
  Vector<T> q_gain;                 // attn.q_gain (H)
  Matrix<T> fc, mlp_proj;           // mlp.fc.weight (F, C), mlp.proj.weight (C, F)
  Vector<T> attn_scale, mlp_scale;  // (C)
  Matrix<T> resid_mix;              // (2, C)
};

template <class T>
struct GolfTensors {
  Matrix<T> tok_emb;  // tok_emb.weight (V, C)
  std::vector<GolfBlockTensors<T>> blocks;
  Matrix<T> skip_weights;  // (min(encoders, decoders), C); empty without skips
  Matrix<T> lm_head;       // lm_head.weight (V, C); empty when the embedding is tied
};

// U-Net split of golf: the first n_layer / 2 blocks are encoders, the rest decoders.
inline int golf_encoder_layers(int n_layer) { return n_layer / 2; }
inline int golf_skip_count(int n_layer) {
  const int encoders = golf_encoder_layers(n_layer);
  const int decoders = n_layer - encoders;
  return encoders < decoders ? encoders : decoders;
}

// The one declaration of golf's parameters, with parameter-golf's names: the tied embedding
// N(0, tied_embed_init_std) (untied: N(0, 1), nn.Embedding's default); per block c_q, c_k, c_v as
// nn.Linear, U(-1/sqrt(C), 1/sqrt(C)), proj zero, q_gain qk_gain_init, mlp.fc as nn.Linear, mlp.proj
// zero, attn_scale and mlp_scale 1, resid_mix rows (1, 0); skip_weights 1; an untied head zero.
template <class Tensors, class Declare>
void declare_golf(const config::ModelConfig& m, Tensors& t, Declare&& declare) {
  const std::size_t c = m.d_model, v = m.vocab_size, h = m.n_head;
  const std::size_t kv_dim = static_cast<std::size_t>(m.n_kv_head) * (c / h), hidden = c * m.mlp_mult;
  const double linear_bound = 1.0 / std::sqrt(static_cast<double>(c));  // every Linear here reads C features
  declare(t.tok_emb, TensorSpec{"tok_emb.weight", {v, c}, ParamGroup::embedding, Init::normal,
                                m.tie_embeddings ? m.tied_embed_init_std : 1.0});
  t.blocks.resize(static_cast<std::size_t>(m.n_layer));
  for (int i = 0; i < m.n_layer; ++i) {
    auto& b = t.blocks[static_cast<std::size_t>(i)];
    const std::string p = "blocks." + std::to_string(i) + ".";
    declare(b.c_q, TensorSpec{p + "attn.c_q.weight", {c, c}, ParamGroup::matrix, Init::uniform, linear_bound});
    declare(b.c_k, TensorSpec{p + "attn.c_k.weight", {kv_dim, c}, ParamGroup::matrix, Init::uniform, linear_bound});
    declare(b.c_v, TensorSpec{p + "attn.c_v.weight", {kv_dim, c}, ParamGroup::matrix, Init::uniform, linear_bound});
    declare(b.proj, TensorSpec{p + "attn.proj.weight", {c, c}, ParamGroup::matrix, Init::zeros});
    declare(b.q_gain, TensorSpec{p + "attn.q_gain", {h}, ParamGroup::scalar, Init::constant, m.qk_gain_init});
    declare(b.fc, TensorSpec{p + "mlp.fc.weight", {hidden, c}, ParamGroup::matrix, Init::uniform, linear_bound});
    declare(b.mlp_proj, TensorSpec{p + "mlp.proj.weight", {c, hidden}, ParamGroup::matrix, Init::zeros});
    declare(b.attn_scale, TensorSpec{p + "attn_scale", {c}, ParamGroup::scalar, Init::constant, 1.0});
    declare(b.mlp_scale, TensorSpec{p + "mlp_scale", {c}, ParamGroup::scalar, Init::constant, 1.0});
    declare(b.resid_mix, TensorSpec{p + "resid_mix", {2, c}, ParamGroup::scalar, Init::first_row, 1.0});
  }
  const int skips = golf_skip_count(m.n_layer);
  if (skips > 0) {
    declare(t.skip_weights, TensorSpec{"skip_weights", {static_cast<std::size_t>(skips), c}, ParamGroup::scalar,
                                       Init::constant, 1.0});
  }
  if (!m.tie_embeddings) declare(t.lm_head, TensorSpec{"lm_head.weight", {v, c}, ParamGroup::head, Init::zeros});
}

// T: parameters, gradients and statistics (float, or double for the finite-difference tests);
// A: activations (T, or bf16).
template <class T, class A = T>
class GolfModel final : public LanguageModel<T> {
 public:
  // Activations are sized for micro-batches of up to max_batch sequences of up to max_seq tokens.
  GolfModel(const config::ModelConfig& config, int max_batch, int max_seq);
  ~GolfModel() override;
  GolfModel(const GolfModel&) = delete;
  GolfModel& operator=(const GolfModel&) = delete;

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
  void block_forward(const ExecSpace& exec, int l, const Matrix<A>& x_prev);
  void block_backward(const ExecSpace& exec, int l, const Matrix<A>& dx);
  // The logits' matrix (the tied embedding or the head) in A, and its gradient.
  const Matrix<A>& head() const { return config_.tie_embeddings ? wa_.tok_emb : wa_.lm_head; }
  const Matrix<T>& head_grad() const { return config_.tie_embeddings ? g_.tok_emb : g_.lm_head; }

  config::ModelConfig config_;
  int max_batch_, max_seq_, vocab_, width_, heads_, kv_heads_, head_dim_, hidden_, qkv_width_, encoders_, skips_;
  int batch_ = 0, seq_ = 0, rows_ = 0;
  Parameters<T> params_;
  GolfTensors<T> w_, g_;   // views into the values and the gradients
  Vector<A> shadow_;       // the values rounded to A, when A is not T
  GolfTensors<A> wa_;      // the weights the products read: the values, or their shadow
  bool fused_qkv_ = false;  // c_q, c_k, c_v lie back to back: one (C + 2 KV D, C) product
  std::vector<BufferSpan> block_spans_;
  BufferSpan skip_span_{0, 0}, head_span_{0, 0};
  Matrix<T> rope_cos_, rope_sin_;
  TokenStage stage_;
  std::vector<Layer> layers_;
  Buffer<A> x0_, final_, d_logits_;
  Buffer<T> rstd0_, rstd_final_, logits_, lse_, losses_, gain_rows_, partials_;
  Kokkos::View<double, MemSpace> loss_scratch_;
  // Backward scratch, shared by all layers.
  Buffer<A> dx_, dx0_, d_branch_, d_hidden_, d_h_, d_o_, d_qf_, d_kf_, d_qkv_;
  std::unique_ptr<Attention<A>> attention_;
  std::vector<Buffer<A>> d_skips_;
  ops::EmbeddingSortSpace<T> sort_space_;
};

}  // namespace kgpt::model
