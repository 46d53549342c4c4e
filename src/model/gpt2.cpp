#include "model/gpt2.hpp"

#include "core/error.hpp"
#include "model/gemm.hpp"
#include "model/layouts.hpp"
#include "model/ops/activations.hpp"
#include "model/ops/attention.hpp"
#include "model/ops/cross_entropy.hpp"
#include "model/ops/elementwise.hpp"
#include "model/ops/embedding.hpp"
#include "model/ops/heads.hpp"
#include "model/ops/layernorm.hpp"

namespace kgpt::model {

namespace {
constexpr double kLayerNormEps = 1e-5;  // nn.LayerNorm's default
}

template <class T>
struct Gpt2Model<T>::Layer {
  Buffer<T> x_in, h1, mean1, rstd1, qkv, q, k, v, o, o_flat, x_attn, h2, mean2, rstd2, fc, act;
};

template <class T>
Gpt2Model<T>::Gpt2Model(const config::ModelConfig& config, int max_batch, int max_seq)
    : config_(config),
      precision_(gemm_precision(config.precision)),
      max_batch_(max_batch),
      max_seq_(max_seq),
      vocab_(config.vocab_size),
      width_(config.d_model),
      heads_(config.n_head),
      head_dim_(config.d_model / config.n_head),
      hidden_(config.d_model * config.mlp_mult),
      params_(gpt2_layout(config, max_seq)),
      stage_(max_batch, max_seq) {
  declare_gpt2(config, max_seq, w_, ViewBinder<T>(params_.layout(), params_.values()));
  declare_gpt2(config, max_seq, g_, ViewBinder<T>(params_.layout(), params_.grads()));
  for (int l = 0; l < config.n_layer; ++l) {
    block_spans_.push_back(params_.layout().span("transformer.h." + std::to_string(l) + "."));
  }
  ln_f_span_ = params_.layout().span("transformer.ln_f.");
  if (!config.tie_embeddings) head_span_ = params_.layout().span("lm_head.weight");
  const std::size_t n = static_cast<std::size_t>(max_batch) * max_seq, c = width_;
  auto buffer = [](const std::string& name, std::size_t size) { return Buffer<T>("kgpt::gpt2::" + name, size); };
  layers_.resize(config.n_layer);
  for (int l = 0; l < config.n_layer; ++l) {
    Layer& L = layers_[l];
    L.x_in = buffer("x_in", n * c);
    L.h1 = buffer("h1", n * c);
    L.mean1 = buffer("mean1", n);
    L.rstd1 = buffer("rstd1", n);
    L.qkv = buffer("qkv", n * 3 * c);
    L.q = buffer("q", n * c);
    L.k = buffer("k", n * c);
    L.v = buffer("v", n * c);
    L.o = buffer("o", n * c);
    L.o_flat = buffer("o_flat", n * c);
    L.x_attn = buffer("x_attn", n * c);
    L.h2 = buffer("h2", n * c);
    L.mean2 = buffer("mean2", n);
    L.rstd2 = buffer("rstd2", n);
    L.fc = buffer("fc", n * hidden_);
    L.act = buffer("act", n * hidden_);
  }
  x_last_ = buffer("x_out", n * c);
  final_ = buffer("final", n * c);
  mean_final_ = buffer("mean_final", n);
  rstd_final_ = buffer("rstd_final", n);
  logits_ = buffer("logits", n * vocab_);
  lse_ = buffer("lse", n);
  losses_ = buffer("losses", n);
  for (Buffer<T>* b : {&dx_, &tmp_, &d_q_, &d_k_, &d_v_, &d_o_}) *b = buffer("backward", n * c);
  d_big_ = buffer("backward_mlp", n * hidden_);
  d_big2_ = buffer("backward_mlp", n * hidden_);
  d_qkv_ = buffer("backward_qkv", n * 3 * c);
  attention_ = make_attention<T>(config.attention, attention_shape(config, max_batch, max_seq), precision_,
                                 "kgpt::gpt2::");
  initialize(params_, 0);
}

template <class T>
Gpt2Model<T>::~Gpt2Model() = default;

template <class T>
double Gpt2Model<T>::forward(const ExecSpace& exec, const ConstTokenMatrix& inputs, const ConstTokenMatrix& targets) {
  stage_.stage(exec, inputs, targets, "gpt2 model");
  batch_ = stage_.batch();
  seq_ = stage_.seq();
  rows_ = batch_ * seq_;
  const std::size_t n = rows_, c = width_, b = batch_, t = seq_, h = heads_, d = head_dim_;
  const TokenMatrix tokens = stage_.inputs(), target_view = stage_.targets();
  Matrix<T> x = layers_.empty() ? x_last_.mat(n, c) : layers_[0].x_in.mat(n, c);
  ops::embedding_forward<T>(exec, tokens, w_.wte, x);
  ops::position_embedding_forward<T>(exec, seq_, w_.wpe, x);
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    Layer& L = layers_[l];
    const Gpt2BlockTensors<T>& W = w_.blocks[l];
    const Matrix<T> x_in = L.x_in.mat(n, c), h1 = L.h1.mat(n, c), qkv = L.qkv.mat(n, 3 * c);
    ops::layernorm_forward<T>(exec, x_in, W.ln_1_w, W.ln_1_b, h1, L.mean1.vec(n), L.rstd1.vec(n), T(kLayerNormEps));
    gemm(exec, Op::none, Op::transpose, T(1), h1, W.c_attn, T(0), qkv, precision_);
    ops::bias_forward<T>(exec, W.c_attn_b, qkv);
    ops::split_heads<T>(exec, qkv, 0, L.q.t4(b, h, t, d));
    ops::split_heads<T>(exec, qkv, static_cast<int>(c), L.k.t4(b, h, t, d));
    ops::split_heads<T>(exec, qkv, static_cast<int>(2 * c), L.v.t4(b, h, t, d));
    attention_->forward(exec, l, L.q.t4(b, h, t, d), L.k.t4(b, h, t, d), L.v.t4(b, h, t, d), L.o.t4(b, h, t, d));
    ops::merge_heads<T>(exec, L.o.t4(b, h, t, d), 0, L.o_flat.mat(n, c));
    const Matrix<T> x_attn = L.x_attn.mat(n, c);
    Kokkos::deep_copy(exec, x_attn, x_in);
    gemm(exec, Op::none, Op::transpose, T(1), L.o_flat.mat(n, c), W.c_proj, T(1), x_attn, precision_);  // residual add
    ops::bias_forward<T>(exec, W.c_proj_b, x_attn);
    ops::layernorm_forward<T>(exec, x_attn, W.ln_2_w, W.ln_2_b, L.h2.mat(n, c), L.mean2.vec(n), L.rstd2.vec(n),
                              T(kLayerNormEps));
    gemm(exec, Op::none, Op::transpose, T(1), L.h2.mat(n, c), W.c_fc, T(0), L.fc.mat(n, hidden_), precision_);
    ops::bias_forward<T>(exec, W.c_fc_b, L.fc.mat(n, hidden_));
    ops::gelu_tanh_forward<T>(exec, L.fc.mat(n, hidden_), L.act.mat(n, hidden_));
    const Matrix<T> x_out = l + 1 < layers_.size() ? layers_[l + 1].x_in.mat(n, c) : x_last_.mat(n, c);
    Kokkos::deep_copy(exec, x_out, x_attn);
    gemm(exec, Op::none, Op::transpose, T(1), L.act.mat(n, hidden_), W.mlp_proj, T(1), x_out, precision_);  // residual add
    ops::bias_forward<T>(exec, W.mlp_proj_b, x_out);
  }
  ops::layernorm_forward<T>(exec, x_last_.mat(n, c), w_.ln_f_w, w_.ln_f_b, final_.mat(n, c), mean_final_.vec(n),
                            rstd_final_.vec(n), T(kLayerNormEps));
  return ops::cross_entropy_forward<T>(exec, final_.mat(n, c), head(), target_view, T(config_.logit_softcap),
                                       logits_.mat(n, vocab_), lse_.vec(n), losses_.vec(n), precision_);
}

template <class T>
void Gpt2Model<T>::backward(const ExecSpace& exec, T grad_scale, const GradientsReady& ready) {
  const std::size_t n = rows_, c = width_, b = batch_, t = seq_, h = heads_, d = head_dim_;
  const Matrix<T> dx = dx_.mat(n, c), tmp = tmp_.mat(n, c);
  const ConstTokenMatrix targets = stage_.targets(), tokens = stage_.inputs();
  ops::cross_entropy_backward<T>(exec, final_.mat(n, c), head(), targets, T(config_.logit_softcap),
                                 logits_.mat(n, vocab_), lse_.vec(n), grad_scale, tmp, head_grad(), precision_);
  if (ready && !config_.tie_embeddings) ready(head_span_.first, head_span_.second);
  ops::layernorm_backward<T>(exec, x_last_.mat(n, c), w_.ln_f_w, mean_final_.vec(n), rstd_final_.vec(n), tmp, dx,
                             g_.ln_f_w, g_.ln_f_b);
  if (ready) ready(ln_f_span_.first, ln_f_span_.second);
  for (int l = static_cast<int>(layers_.size()) - 1; l >= 0; --l) {
    Layer& L = layers_[l];
    const Gpt2BlockTensors<T>& W = w_.blocks[static_cast<std::size_t>(l)];
    const Gpt2BlockTensors<T>& G = g_.blocks[static_cast<std::size_t>(l)];
    // x_out = x_attn + mlp: dx flows to x_attn unchanged and into the MLP.
    ops::bias_backward<T>(exec, dx, G.mlp_proj_b);
    gemm(exec, Op::none, Op::none, T(1), dx, W.mlp_proj, T(0), d_big_.mat(n, hidden_), precision_);
    gemm(exec, Op::transpose, Op::none, T(1), dx, L.act.mat(n, hidden_), T(1), G.mlp_proj, precision_);
    ops::gelu_tanh_backward<T>(exec, L.fc.mat(n, hidden_), d_big_.mat(n, hidden_), d_big2_.mat(n, hidden_));
    ops::bias_backward<T>(exec, d_big2_.mat(n, hidden_), G.c_fc_b);
    gemm(exec, Op::none, Op::none, T(1), d_big2_.mat(n, hidden_), W.c_fc, T(0), tmp, precision_);
    gemm(exec, Op::transpose, Op::none, T(1), d_big2_.mat(n, hidden_), L.h2.mat(n, c), T(1), G.c_fc, precision_);
    ops::layernorm_backward<T>(exec, L.x_attn.mat(n, c), W.ln_2_w, L.mean2.vec(n), L.rstd2.vec(n), tmp, d_q_.mat(n, c),
                               G.ln_2_w, G.ln_2_b);
    ops::add_into<T>(exec, d_q_.mat(n, c), dx);
    // x_attn = x_in + attention: dx flows to x_in unchanged and into attention.
    ops::bias_backward<T>(exec, dx, G.c_proj_b);
    gemm(exec, Op::none, Op::none, T(1), dx, W.c_proj, T(0), tmp, precision_);
    gemm(exec, Op::transpose, Op::none, T(1), dx, L.o_flat.mat(n, c), T(1), G.c_proj, precision_);
    ops::split_heads<T>(exec, tmp, 0, d_o_.t4(b, h, t, d));
    attention_->backward(exec, l, L.q.t4(b, h, t, d), L.k.t4(b, h, t, d), L.v.t4(b, h, t, d), L.o.t4(b, h, t, d),
                        d_o_.t4(b, h, t, d), d_q_.t4(b, h, t, d), d_k_.t4(b, h, t, d), d_v_.t4(b, h, t, d));
    const Matrix<T> d_qkv = d_qkv_.mat(n, 3 * c);
    ops::merge_heads<T>(exec, d_q_.t4(b, h, t, d), 0, d_qkv);
    ops::merge_heads<T>(exec, d_k_.t4(b, h, t, d), static_cast<int>(c), d_qkv);
    ops::merge_heads<T>(exec, d_v_.t4(b, h, t, d), static_cast<int>(2 * c), d_qkv);
    ops::bias_backward<T>(exec, d_qkv, G.c_attn_b);
    gemm(exec, Op::none, Op::none, T(1), d_qkv, W.c_attn, T(0), tmp, precision_);
    gemm(exec, Op::transpose, Op::none, T(1), d_qkv, L.h1.mat(n, c), T(1), G.c_attn, precision_);
    ops::layernorm_backward<T>(exec, L.x_in.mat(n, c), W.ln_1_w, L.mean1.vec(n), L.rstd1.vec(n), tmp, d_q_.mat(n, c),
                               G.ln_1_w, G.ln_1_b);
    ops::add_into<T>(exec, d_q_.mat(n, c), dx);
    if (ready) ready(block_spans_[l].first, block_spans_[l].second);
  }
  ops::position_embedding_backward<T>(exec, seq_, dx, g_.wpe);
  ops::embedding_backward<T>(exec, tokens, dx, g_.wte);
}

template class Gpt2Model<float>;
template class Gpt2Model<double>;

}  // namespace kgpt::model
