#include "model/golf.hpp"

#include "model/gemm.hpp"
#include "model/layouts.hpp"
#include "model/ops/activations.hpp"
#include "model/ops/attention.hpp"
#include "model/ops/cross_entropy.hpp"
#include "model/ops/elementwise.hpp"
#include "model/ops/embedding.hpp"
#include "model/ops/head_gain.hpp"
#include "model/ops/heads.hpp"
#include "model/ops/rmsnorm.hpp"
#include "model/ops/rope.hpp"

namespace kgpt::model {

namespace {
// F.rms_norm without eps uses the machine epsilon of float32; both precisions use it so that the
// double build checks the float model.
constexpr double kRmsEps = 1.1920928955078125e-07;
}  // namespace

template <class T>
struct GolfModel<T>::Layer {
  // Activations kept for the backward.
  Buffer<T> x_in, x_mix, h_attn, rstd_attn, q_lin, k_lin, v_lin, q_raw, k_raw, q_rstd, k_rstd, q_rope, k_rope, q_final,
      v, o, o_flat, attn_out, x_attn, h_mlp, rstd_mlp, fc, act, mlp_out, x_out;
};

template <class T>
GolfModel<T>::GolfModel(const config::ModelConfig& config, int max_batch, int max_seq)
    : config_(config),
      precision_(gemm_precision(config.precision)),
      max_batch_(max_batch),
      max_seq_(max_seq),
      vocab_(config.vocab_size),
      width_(config.d_model),
      heads_(config.n_head),
      kv_heads_(config.n_kv_head),
      head_dim_(config.d_model / config.n_head),
      hidden_(config.d_model * config.mlp_mult),
      encoders_(golf_encoder_layers(config.n_layer)),
      skips_(golf_skip_count(config.n_layer)),
      params_(golf_layout(config)),
      rope_cos_("kgpt::golf::rope_cos", max_seq, head_dim_ / 2),
      rope_sin_("kgpt::golf::rope_sin", max_seq, head_dim_ / 2),
      stage_(max_batch, max_seq) {
  declare_golf(config, w_, ViewBinder<T>(params_.layout(), params_.values()));
  declare_golf(config, g_, ViewBinder<T>(params_.layout(), params_.grads()));
  for (int l = 0; l < config.n_layer; ++l) block_spans_.push_back(params_.layout().span("blocks." + std::to_string(l) + "."));
  if (skips_ > 0) skip_span_ = params_.layout().span("skip_weights");
  if (!config.tie_embeddings) head_span_ = params_.layout().span("lm_head.weight");
  ops::rope_tables(rope_cos_, rope_sin_, config.rope_base);
  const std::size_t n = static_cast<std::size_t>(max_batch) * max_seq;
  const std::size_t c = width_, f = hidden_, kvd = static_cast<std::size_t>(kv_heads_) * head_dim_;
  const std::size_t bht = static_cast<std::size_t>(max_batch) * heads_ * max_seq;
  const std::size_t bkt = static_cast<std::size_t>(max_batch) * kv_heads_ * max_seq;
  auto buffer = [](const std::string& name, std::size_t size) { return Buffer<T>("kgpt::golf::" + name, size); };
  layers_.resize(config.n_layer);
  for (int l = 0; l < config.n_layer; ++l) {
    Layer& L = layers_[l];
    L.x_in = buffer("x_in", n * c);
    L.x_mix = buffer("x_mix", n * c);
    L.h_attn = buffer("h_attn", n * c);
    L.rstd_attn = buffer("rstd_attn", n);
    L.q_lin = buffer("q_lin", n * c);
    L.k_lin = buffer("k_lin", n * kvd);
    L.v_lin = buffer("v_lin", n * kvd);
    L.q_raw = buffer("q_raw", n * c);
    L.k_raw = buffer("k_raw", n * kvd);
    L.q_rstd = buffer("q_rstd", bht);
    L.k_rstd = buffer("k_rstd", bkt);
    L.q_rope = buffer("q_rope", n * c);
    L.k_rope = buffer("k_rope", n * kvd);
    L.q_final = buffer("q_final", n * c);
    L.v = buffer("v", n * kvd);
    L.o = buffer("o", n * c);
    L.o_flat = buffer("o_flat", n * c);
    L.attn_out = buffer("attn_out", n * c);
    L.x_attn = buffer("x_attn", n * c);
    L.h_mlp = buffer("h_mlp", n * c);
    L.rstd_mlp = buffer("rstd_mlp", n);
    L.fc = buffer("fc", n * f);
    L.act = buffer("act", n * f);
    L.mlp_out = buffer("mlp_out", n * c);
    L.x_out = buffer("x_out", n * c);
  }
  embedded_ = buffer("embedded", n * c);
  x0_ = buffer("x0", n * c);
  rstd0_ = buffer("rstd0", n);
  final_ = buffer("final", n * c);
  rstd_final_ = buffer("rstd_final", n);
  logits_ = buffer("logits", n * vocab_);
  lse_ = buffer("lse", n);
  losses_ = buffer("losses", n);
  for (Buffer<T>* b : {&dx_, &dx_next_, &dx0_, &tmp_, &d_mlp_out_, &d_attn_out_, &d_o_flat_, &d_o_, &d_q_, &d_q2_,
                       &d_q_lin_, &d_h_}) {
    *b = buffer("backward", n * c);
  }
  for (Buffer<T>* b : {&d_k_, &d_k2_, &d_v_, &d_k_lin_, &d_v_lin_}) *b = buffer("backward_kv", n * kvd);
  d_act_ = buffer("d_act", n * f);
  d_fc_ = buffer("d_fc", n * f);
  d_gain_slices_ = buffer("d_gain_slices", static_cast<std::size_t>(heads_) * max_batch);
  attention_ = make_attention<T>(config.attention, attention_shape(config, max_batch, max_seq), precision_,
                                 "kgpt::golf::");
  for (int s = 0; s < skips_; ++s) d_skips_.push_back(buffer("d_skip", n * c));
  initialize(params_, 0);
}

template <class T>
GolfModel<T>::~GolfModel() = default;

template <class T>
double GolfModel<T>::forward(const ExecSpace& exec, const ConstTokenMatrix& inputs, const ConstTokenMatrix& targets) {
  stage_.stage(exec, inputs, targets, "golf model");
  batch_ = stage_.batch();
  seq_ = stage_.seq();
  rows_ = batch_ * seq_;
  const std::size_t n = rows_, c = width_;
  const TokenMatrix tokens = stage_.inputs(), target_view = stage_.targets();

  ops::embedding_forward<T>(exec, tokens, w_.tok_emb, embedded_.mat(n, c));
  ops::rmsnorm_forward<T>(exec, embedded_.mat(n, c), x0_.mat(n, c), rstd0_.vec(n), T(kRmsEps));
  for (int l = 0; l < config_.n_layer; ++l) {
    const Matrix<T> x_in = layers_[l].x_in.mat(n, c);
    Kokkos::deep_copy(exec, x_in, l == 0 ? x0_.mat(n, c) : layers_[l - 1].x_out.mat(n, c));
    const int decoder = l - encoders_;
    if (decoder >= 0 && decoder < skips_) {
      const Matrix<T> skip = layers_[encoders_ - 1 - decoder].x_out.mat(n, c);
      ops::scaled_add_forward<T>(exec, skip, Kokkos::subview(ConstMatrix<T>(w_.skip_weights), decoder, Kokkos::ALL()),
                                 x_in);
    }
    block_forward(exec, l);
  }
  ops::rmsnorm_forward<T>(exec, layers_.back().x_out.mat(n, c), final_.mat(n, c), rstd_final_.vec(n), T(kRmsEps));
  return ops::cross_entropy_forward<T>(exec, final_.mat(n, c), head(), target_view, T(config_.logit_softcap),
                                       logits_.mat(n, vocab_), lse_.vec(n), losses_.vec(n), precision_);
}

template <class T>
void GolfModel<T>::block_forward(const ExecSpace& exec, int l) {
  Layer& L = layers_[l];
  const GolfBlockTensors<T>& W = w_.blocks[static_cast<std::size_t>(l)];
  const std::size_t n = rows_, c = width_, kvd = static_cast<std::size_t>(kv_heads_) * head_dim_, f = hidden_;
  const std::size_t b = batch_, t = seq_, h = heads_, kv = kv_heads_, d = head_dim_;
  const Matrix<T> x_mix = L.x_mix.mat(n, c), h_attn = L.h_attn.mat(n, c);
  ops::residual_mix_forward<T>(exec, L.x_in.mat(n, c), x0_.mat(n, c), W.resid_mix, x_mix);
  ops::rmsnorm_forward<T>(exec, x_mix, h_attn, L.rstd_attn.vec(n), T(kRmsEps));
  gemm(exec, Op::none, Op::transpose, T(1), h_attn, W.c_q, T(0), L.q_lin.mat(n, c), precision_);
  gemm(exec, Op::none, Op::transpose, T(1), h_attn, W.c_k, T(0), L.k_lin.mat(n, kvd), precision_);
  gemm(exec, Op::none, Op::transpose, T(1), h_attn, W.c_v, T(0), L.v_lin.mat(n, kvd), precision_);
  ops::split_heads<T>(exec, L.q_lin.mat(n, c), 0, L.q_raw.t4(b, h, t, d));
  ops::split_heads<T>(exec, L.k_lin.mat(n, kvd), 0, L.k_raw.t4(b, kv, t, d));
  ops::split_heads<T>(exec, L.v_lin.mat(n, kvd), 0, L.v.t4(b, kv, t, d));
  // RMSNorm over each head vector: the head-major tensors viewed as (rows, D).
  ops::rmsnorm_forward<T>(exec, L.q_raw.mat(b * h * t, d), L.q_rope.mat(b * h * t, d), L.q_rstd.vec(b * h * t), T(kRmsEps));
  ops::rmsnorm_forward<T>(exec, L.k_raw.mat(b * kv * t, d), L.k_rope.mat(b * kv * t, d), L.k_rstd.vec(b * kv * t),
                          T(kRmsEps));
  ops::rope_forward<T>(exec, rope_cos_, rope_sin_, L.q_rope.t4(b, h, t, d), L.q_rope.t4(b, h, t, d));
  ops::rope_forward<T>(exec, rope_cos_, rope_sin_, L.k_rope.t4(b, kv, t, d), L.k_rope.t4(b, kv, t, d));
  ops::head_gain_forward<T>(exec, L.q_rope.t4(b, h, t, d), W.q_gain, L.q_final.t4(b, h, t, d));
  attention_->forward(exec, l, L.q_final.t4(b, h, t, d), L.k_rope.t4(b, kv, t, d), L.v.t4(b, kv, t, d),
                     L.o.t4(b, h, t, d));
  ops::merge_heads<T>(exec, L.o.t4(b, h, t, d), 0, L.o_flat.mat(n, c));
  gemm(exec, Op::none, Op::transpose, T(1), L.o_flat.mat(n, c), W.proj, T(0), L.attn_out.mat(n, c), precision_);
  const Matrix<T> x_attn = L.x_attn.mat(n, c);
  Kokkos::deep_copy(exec, x_attn, x_mix);
  ops::scaled_add_forward<T>(exec, L.attn_out.mat(n, c), W.attn_scale, x_attn);
  ops::rmsnorm_forward<T>(exec, x_attn, L.h_mlp.mat(n, c), L.rstd_mlp.vec(n), T(kRmsEps));
  gemm(exec, Op::none, Op::transpose, T(1), L.h_mlp.mat(n, c), W.fc, T(0), L.fc.mat(n, f), precision_);
  ops::relu_squared_forward<T>(exec, L.fc.mat(n, f), L.act.mat(n, f));
  gemm(exec, Op::none, Op::transpose, T(1), L.act.mat(n, f), W.mlp_proj, T(0), L.mlp_out.mat(n, c), precision_);
  const Matrix<T> x_out = L.x_out.mat(n, c);
  Kokkos::deep_copy(exec, x_out, x_attn);
  ops::scaled_add_forward<T>(exec, L.mlp_out.mat(n, c), W.mlp_scale, x_out);
}

template <class T>
void GolfModel<T>::backward(const ExecSpace& exec, T grad_scale, const GradientsReady& ready) {
  const std::size_t n = rows_, c = width_;
  const Matrix<T> dx = dx_.mat(n, c), dx0 = dx0_.mat(n, c), tmp = tmp_.mat(n, c);
  const ConstTokenMatrix targets = stage_.targets(), tokens = stage_.inputs();
  ops::cross_entropy_backward<T>(exec, final_.mat(n, c), head(), targets, T(config_.logit_softcap),
                                 logits_.mat(n, vocab_), lse_.vec(n), grad_scale, tmp, head_grad(), precision_);
  if (ready && !config_.tie_embeddings) ready(head_span_.first, head_span_.second);
  ops::rmsnorm_backward<T>(exec, layers_.back().x_out.mat(n, c), rstd_final_.vec(n), tmp, dx);
  Kokkos::deep_copy(exec, dx0, T(0));
  for (int l = config_.n_layer - 1; l >= 0; --l) {
    // An encoder's output also feeds a decoder through its skip.
    if (l < skips_) ops::add_into<T>(exec, d_skips_[l].mat(n, c), dx);
    block_backward(exec, l, dx);
    if (ready) ready(block_spans_[l].first, block_spans_[l].second);
    const int decoder = l - encoders_;
    if (decoder >= 0 && decoder < skips_) {
      const int source = encoders_ - 1 - decoder;
      ops::scaled_add_backward<T>(exec, layers_[source].x_out.mat(n, c),
                                  Kokkos::subview(ConstMatrix<T>(w_.skip_weights), decoder, Kokkos::ALL()), dx,
                                  d_skips_[source].mat(n, c), Kokkos::subview(g_.skip_weights, decoder, Kokkos::ALL()));
    }
  }
  if (ready && skips_ > 0) ready(skip_span_.first, skip_span_.second);
  ops::add_into<T>(exec, dx, dx0);  // x0 is the first block's input and every block's mix input
  ops::rmsnorm_backward<T>(exec, embedded_.mat(n, c), rstd0_.vec(n), dx0, tmp);
  ops::embedding_backward<T>(exec, tokens, tmp, g_.tok_emb);
}

template <class T>
void GolfModel<T>::block_backward(const ExecSpace& exec, int l, const Matrix<T>& dx) {
  Layer& L = layers_[l];
  const GolfBlockTensors<T>& W = w_.blocks[static_cast<std::size_t>(l)];
  const GolfBlockTensors<T>& G = g_.blocks[static_cast<std::size_t>(l)];
  const std::size_t n = rows_, c = width_, kvd = static_cast<std::size_t>(kv_heads_) * head_dim_, f = hidden_;
  const std::size_t b = batch_, t = seq_, h = heads_, kv = kv_heads_, d = head_dim_;
  const Matrix<T> tmp = tmp_.mat(n, c);
  // x_out = x_attn + mlp_scale * mlp_out; dx continues as the gradient of x_attn.
  ops::scaled_add_backward<T>(exec, L.mlp_out.mat(n, c), W.mlp_scale, dx, d_mlp_out_.mat(n, c), G.mlp_scale);
  gemm(exec, Op::none, Op::none, T(1), d_mlp_out_.mat(n, c), W.mlp_proj, T(0), d_act_.mat(n, f), precision_);
  gemm(exec, Op::transpose, Op::none, T(1), d_mlp_out_.mat(n, c), L.act.mat(n, f), T(1), G.mlp_proj, precision_);
  ops::relu_squared_backward<T>(exec, L.fc.mat(n, f), d_act_.mat(n, f), d_fc_.mat(n, f));
  gemm(exec, Op::none, Op::none, T(1), d_fc_.mat(n, f), W.fc, T(0), d_h_.mat(n, c), precision_);
  gemm(exec, Op::transpose, Op::none, T(1), d_fc_.mat(n, f), L.h_mlp.mat(n, c), T(1), G.fc, precision_);
  ops::rmsnorm_backward<T>(exec, L.x_attn.mat(n, c), L.rstd_mlp.vec(n), d_h_.mat(n, c), tmp);
  ops::add_into<T>(exec, tmp, dx);
  // x_attn = x_mix + attn_scale * attn_out; dx continues as the gradient of x_mix.
  ops::scaled_add_backward<T>(exec, L.attn_out.mat(n, c), W.attn_scale, dx, d_attn_out_.mat(n, c), G.attn_scale);
  gemm(exec, Op::none, Op::none, T(1), d_attn_out_.mat(n, c), W.proj, T(0), d_o_flat_.mat(n, c), precision_);
  gemm(exec, Op::transpose, Op::none, T(1), d_attn_out_.mat(n, c), L.o_flat.mat(n, c), T(1), G.proj, precision_);
  ops::split_heads<T>(exec, d_o_flat_.mat(n, c), 0, d_o_.t4(b, h, t, d));
  attention_->backward(exec, l, L.q_final.t4(b, h, t, d), L.k_rope.t4(b, kv, t, d), L.v.t4(b, kv, t, d),
                      L.o.t4(b, h, t, d), d_o_.t4(b, h, t, d), d_q_.t4(b, h, t, d), d_k_.t4(b, kv, t, d),
                      d_v_.t4(b, kv, t, d));
  ops::head_gain_backward<T>(exec, L.q_rope.t4(b, h, t, d), W.q_gain, d_q_.t4(b, h, t, d), d_q2_.t4(b, h, t, d),
                             G.q_gain, d_gain_slices_.mat(h, b));
  ops::rope_backward<T>(exec, rope_cos_, rope_sin_, d_q2_.t4(b, h, t, d), d_q2_.t4(b, h, t, d));
  ops::rope_backward<T>(exec, rope_cos_, rope_sin_, d_k_.t4(b, kv, t, d), d_k_.t4(b, kv, t, d));
  ops::rmsnorm_backward<T>(exec, L.q_raw.mat(b * h * t, d), L.q_rstd.vec(b * h * t), d_q2_.mat(b * h * t, d),
                           d_q_.mat(b * h * t, d));
  ops::rmsnorm_backward<T>(exec, L.k_raw.mat(b * kv * t, d), L.k_rstd.vec(b * kv * t), d_k_.mat(b * kv * t, d),
                           d_k2_.mat(b * kv * t, d));
  ops::merge_heads<T>(exec, d_q_.t4(b, h, t, d), 0, d_q_lin_.mat(n, c));
  ops::merge_heads<T>(exec, d_k2_.t4(b, kv, t, d), 0, d_k_lin_.mat(n, kvd));
  ops::merge_heads<T>(exec, d_v_.t4(b, kv, t, d), 0, d_v_lin_.mat(n, kvd));
  const Matrix<T> d_h = d_h_.mat(n, c), h_attn = L.h_attn.mat(n, c);
  gemm(exec, Op::none, Op::none, T(1), d_q_lin_.mat(n, c), W.c_q, T(0), d_h, precision_);
  gemm(exec, Op::none, Op::none, T(1), d_k_lin_.mat(n, kvd), W.c_k, T(1), d_h, precision_);
  gemm(exec, Op::none, Op::none, T(1), d_v_lin_.mat(n, kvd), W.c_v, T(1), d_h, precision_);
  gemm(exec, Op::transpose, Op::none, T(1), d_q_lin_.mat(n, c), h_attn, T(1), G.c_q, precision_);
  gemm(exec, Op::transpose, Op::none, T(1), d_k_lin_.mat(n, kvd), h_attn, T(1), G.c_k, precision_);
  gemm(exec, Op::transpose, Op::none, T(1), d_v_lin_.mat(n, kvd), h_attn, T(1), G.c_v, precision_);
  ops::rmsnorm_backward<T>(exec, L.x_mix.mat(n, c), L.rstd_attn.vec(n), d_h, tmp);
  ops::add_into<T>(exec, tmp, dx);
  // x_mix = mix0 * x_in + mix1 * x0: dx becomes the gradient of x_in; x0's share accumulates.
  const Matrix<T> dx_in = dx_next_.mat(n, c);
  ops::residual_mix_backward<T>(exec, L.x_in.mat(n, c), x0_.mat(n, c), W.resid_mix, dx, dx_in, dx0_.mat(n, c), G.resid_mix);
  Kokkos::deep_copy(exec, dx, dx_in);
}

template class GolfModel<float>;
template class GolfModel<double>;

}  // namespace kgpt::model
