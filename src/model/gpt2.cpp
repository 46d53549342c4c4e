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
  Vector<T> ln1_w, ln1_b, ln2_w, ln2_b, b_attn, b_proj, b_fc, b_mproj;
  Matrix<T> w_attn, w_proj, w_fc, w_mproj;
  Vector<T> g_ln1_w, g_ln1_b, g_ln2_w, g_ln2_b, g_b_attn, g_b_proj, g_b_fc, g_b_mproj;
  Matrix<T> g_attn, g_proj, g_fc, g_mproj;
  Buffer<T> x_in, h1, mean1, rstd1, qkv, q, k, v, probs, o, o_flat, x_attn, h2, mean2, rstd2, fc, act;
};

template <class T>
Gpt2Model<T>::Gpt2Model(const config::ModelConfig& config, int max_batch, int max_seq)
    : config_(config),
      max_batch_(max_batch),
      max_seq_(max_seq),
      vocab_(config.vocab_size),
      width_(config.d_model),
      heads_(config.n_head),
      head_dim_(config.d_model / config.n_head),
      params_(gpt2_layout(config, max_seq)),
      stage_(max_batch, max_seq) {
  const std::size_t n = static_cast<std::size_t>(max_batch) * max_seq, c = width_;
  const std::size_t probs = static_cast<std::size_t>(max_batch) * heads_ * max_seq * max_seq;
  auto buffer = [](const std::string& name, std::size_t size) { return Buffer<T>("kgpt::gpt2::" + name, size); };
  layers_.resize(config.n_layer);
  for (int l = 0; l < config.n_layer; ++l) {
    Layer& L = layers_[l];
    const std::string b = "transformer.h." + std::to_string(l) + ".";
    L.ln1_w = params_.vector(b + "ln_1.weight");
    L.ln1_b = params_.vector(b + "ln_1.bias");
    L.ln2_w = params_.vector(b + "ln_2.weight");
    L.ln2_b = params_.vector(b + "ln_2.bias");
    L.w_attn = params_.matrix(b + "attn.c_attn.weight");
    L.b_attn = params_.vector(b + "attn.c_attn.bias");
    L.w_proj = params_.matrix(b + "attn.c_proj.weight");
    L.b_proj = params_.vector(b + "attn.c_proj.bias");
    L.w_fc = params_.matrix(b + "mlp.c_fc.weight");
    L.b_fc = params_.vector(b + "mlp.c_fc.bias");
    L.w_mproj = params_.matrix(b + "mlp.c_proj.weight");
    L.b_mproj = params_.vector(b + "mlp.c_proj.bias");
    L.g_ln1_w = params_.grad_vector(b + "ln_1.weight");
    L.g_ln1_b = params_.grad_vector(b + "ln_1.bias");
    L.g_ln2_w = params_.grad_vector(b + "ln_2.weight");
    L.g_ln2_b = params_.grad_vector(b + "ln_2.bias");
    L.g_attn = params_.grad_matrix(b + "attn.c_attn.weight");
    L.g_b_attn = params_.grad_vector(b + "attn.c_attn.bias");
    L.g_proj = params_.grad_matrix(b + "attn.c_proj.weight");
    L.g_b_proj = params_.grad_vector(b + "attn.c_proj.bias");
    L.g_fc = params_.grad_matrix(b + "mlp.c_fc.weight");
    L.g_b_fc = params_.grad_vector(b + "mlp.c_fc.bias");
    L.g_mproj = params_.grad_matrix(b + "mlp.c_proj.weight");
    L.g_b_mproj = params_.grad_vector(b + "mlp.c_proj.bias");
    L.x_in = buffer("x_in", n * c);
    L.h1 = buffer("h1", n * c);
    L.mean1 = buffer("mean1", n);
    L.rstd1 = buffer("rstd1", n);
    L.qkv = buffer("qkv", n * 3 * c);
    L.q = buffer("q", n * c);
    L.k = buffer("k", n * c);
    L.v = buffer("v", n * c);
    L.probs = buffer("probs", probs);
    L.o = buffer("o", n * c);
    L.o_flat = buffer("o_flat", n * c);
    L.x_attn = buffer("x_attn", n * c);
    L.h2 = buffer("h2", n * c);
    L.mean2 = buffer("mean2", n);
    L.rstd2 = buffer("rstd2", n);
    L.fc = buffer("fc", n * 4 * c);
    L.act = buffer("act", n * 4 * c);
  }
  x_last_ = buffer("x_out", n * c);
  final_ = buffer("final", n * c);
  mean_final_ = buffer("mean_final", n);
  rstd_final_ = buffer("rstd_final", n);
  logits_ = buffer("logits", n * vocab_);
  lse_ = buffer("lse", n);
  losses_ = buffer("losses", n);
  for (Buffer<T>* b : {&dx_, &tmp_, &d_q_, &d_k_, &d_v_, &d_o_}) *b = buffer("backward", n * c);
  d_big_ = buffer("backward_mlp", n * 4 * c);
  d_big2_ = buffer("backward_mlp", n * 4 * c);
  d_qkv_ = buffer("backward_qkv", n * 3 * c);
  scratch_ = buffer("attention_scratch", static_cast<std::size_t>(max_batch) * heads_ * max_seq * max_seq);
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
  ops::embedding_forward<T>(exec, tokens, params_.matrix("transformer.wte.weight"), x);
  ops::position_embedding_forward<T>(exec, seq_, params_.matrix("transformer.wpe.weight"), x);
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    Layer& L = layers_[l];
    const Matrix<T> x_in = L.x_in.mat(n, c), h1 = L.h1.mat(n, c), qkv = L.qkv.mat(n, 3 * c);
    ops::layernorm_forward<T>(exec, x_in, L.ln1_w, L.ln1_b, h1, L.mean1.vec(n), L.rstd1.vec(n), T(kLayerNormEps));
    gemm(exec, Op::none, Op::transpose, T(1), h1, L.w_attn, T(0), qkv);
    ops::bias_forward<T>(exec, L.b_attn, qkv);
    ops::split_heads<T>(exec, qkv, 0, L.q.t4(b, h, t, d));
    ops::split_heads<T>(exec, qkv, static_cast<int>(c), L.k.t4(b, h, t, d));
    ops::split_heads<T>(exec, qkv, static_cast<int>(2 * c), L.v.t4(b, h, t, d));
    ops::attention_forward<T>(exec, L.q.t4(b, h, t, d), L.k.t4(b, h, t, d), L.v.t4(b, h, t, d), L.probs.t4(b, h, t, t),
                              L.o.t4(b, h, t, d));
    ops::merge_heads<T>(exec, L.o.t4(b, h, t, d), 0, L.o_flat.mat(n, c));
    const Matrix<T> x_attn = L.x_attn.mat(n, c);
    Kokkos::deep_copy(exec, x_attn, x_in);
    gemm(exec, Op::none, Op::transpose, T(1), L.o_flat.mat(n, c), L.w_proj, T(1), x_attn);  // residual add
    ops::bias_forward<T>(exec, L.b_proj, x_attn);
    ops::layernorm_forward<T>(exec, x_attn, L.ln2_w, L.ln2_b, L.h2.mat(n, c), L.mean2.vec(n), L.rstd2.vec(n),
                              T(kLayerNormEps));
    gemm(exec, Op::none, Op::transpose, T(1), L.h2.mat(n, c), L.w_fc, T(0), L.fc.mat(n, 4 * c));
    ops::bias_forward<T>(exec, L.b_fc, L.fc.mat(n, 4 * c));
    ops::gelu_tanh_forward<T>(exec, L.fc.mat(n, 4 * c), L.act.mat(n, 4 * c));
    const Matrix<T> x_out = l + 1 < layers_.size() ? layers_[l + 1].x_in.mat(n, c) : x_last_.mat(n, c);
    Kokkos::deep_copy(exec, x_out, x_attn);
    gemm(exec, Op::none, Op::transpose, T(1), L.act.mat(n, 4 * c), L.w_mproj, T(1), x_out);  // residual add
    ops::bias_forward<T>(exec, L.b_mproj, x_out);
  }
  ops::layernorm_forward<T>(exec, x_last_.mat(n, c), params_.vector("transformer.ln_f.weight"),
                            params_.vector("transformer.ln_f.bias"), final_.mat(n, c), mean_final_.vec(n),
                            rstd_final_.vec(n), T(kLayerNormEps));
  return ops::cross_entropy_forward<T>(exec, final_.mat(n, c), params_.matrix("transformer.wte.weight"), target_view,
                                       T(config_.logit_softcap), logits_.mat(n, vocab_), lse_.vec(n), losses_.vec(n));
}

template <class T>
void Gpt2Model<T>::backward(const ExecSpace& exec, T grad_scale, const GradientsReady& ready) {
  const std::size_t n = rows_, c = width_, b = batch_, t = seq_, h = heads_, d = head_dim_;
  const Matrix<T> dx = dx_.mat(n, c), tmp = tmp_.mat(n, c);
  const ConstTokenMatrix targets = stage_.targets(), tokens = stage_.inputs();
  ops::cross_entropy_backward<T>(exec, final_.mat(n, c), params_.matrix("transformer.wte.weight"), targets,
                                 T(config_.logit_softcap), logits_.mat(n, vocab_), lse_.vec(n), grad_scale, tmp,
                                 params_.grad_matrix("transformer.wte.weight"));
  ops::layernorm_backward<T>(exec, x_last_.mat(n, c), params_.vector("transformer.ln_f.weight"), mean_final_.vec(n),
                             rstd_final_.vec(n), tmp, dx, params_.grad_vector("transformer.ln_f.weight"),
                             params_.grad_vector("transformer.ln_f.bias"));
  if (ready) report_ready(ready, params_.layout(), "transformer.ln_f.");
  for (int l = static_cast<int>(layers_.size()) - 1; l >= 0; --l) {
    Layer& L = layers_[l];
    // x_out = x_attn + mlp: dx flows to x_attn unchanged and into the MLP.
    ops::bias_backward<T>(exec, dx, L.g_b_mproj);
    gemm(exec, Op::none, Op::none, T(1), dx, L.w_mproj, T(0), d_big_.mat(n, 4 * c));
    gemm(exec, Op::transpose, Op::none, T(1), dx, L.act.mat(n, 4 * c), T(1), L.g_mproj);
    ops::gelu_tanh_backward<T>(exec, L.fc.mat(n, 4 * c), d_big_.mat(n, 4 * c), d_big2_.mat(n, 4 * c));
    ops::bias_backward<T>(exec, d_big2_.mat(n, 4 * c), L.g_b_fc);
    gemm(exec, Op::none, Op::none, T(1), d_big2_.mat(n, 4 * c), L.w_fc, T(0), tmp);
    gemm(exec, Op::transpose, Op::none, T(1), d_big2_.mat(n, 4 * c), L.h2.mat(n, c), T(1), L.g_fc);
    ops::layernorm_backward<T>(exec, L.x_attn.mat(n, c), L.ln2_w, L.mean2.vec(n), L.rstd2.vec(n), tmp, d_q_.mat(n, c),
                               L.g_ln2_w, L.g_ln2_b);
    ops::add_into<T>(exec, d_q_.mat(n, c), dx);
    // x_attn = x_in + attention: dx flows to x_in unchanged and into attention.
    ops::bias_backward<T>(exec, dx, L.g_b_proj);
    gemm(exec, Op::none, Op::none, T(1), dx, L.w_proj, T(0), tmp);
    gemm(exec, Op::transpose, Op::none, T(1), dx, L.o_flat.mat(n, c), T(1), L.g_proj);
    ops::split_heads<T>(exec, tmp, 0, d_o_.t4(b, h, t, d));
    ops::attention_backward<T>(exec, L.q.t4(b, h, t, d), L.k.t4(b, h, t, d), L.v.t4(b, h, t, d), L.probs.t4(b, h, t, t),
                               d_o_.t4(b, h, t, d), d_q_.t4(b, h, t, d), d_k_.t4(b, h, t, d), d_v_.t4(b, h, t, d),
                               scratch_.t4(b, h, t, t));
    const Matrix<T> d_qkv = d_qkv_.mat(n, 3 * c);
    ops::merge_heads<T>(exec, d_q_.t4(b, h, t, d), 0, d_qkv);
    ops::merge_heads<T>(exec, d_k_.t4(b, h, t, d), static_cast<int>(c), d_qkv);
    ops::merge_heads<T>(exec, d_v_.t4(b, h, t, d), static_cast<int>(2 * c), d_qkv);
    ops::bias_backward<T>(exec, d_qkv, L.g_b_attn);
    gemm(exec, Op::none, Op::none, T(1), d_qkv, L.w_attn, T(0), tmp);
    gemm(exec, Op::transpose, Op::none, T(1), d_qkv, L.h1.mat(n, c), T(1), L.g_attn);
    ops::layernorm_backward<T>(exec, L.x_in.mat(n, c), L.ln1_w, L.mean1.vec(n), L.rstd1.vec(n), tmp, d_q_.mat(n, c),
                               L.g_ln1_w, L.g_ln1_b);
    ops::add_into<T>(exec, d_q_.mat(n, c), dx);
    if (ready) report_ready(ready, params_.layout(), "transformer.h." + std::to_string(l) + ".");
  }
  ops::position_embedding_backward<T>(exec, seq_, dx, params_.grad_matrix("transformer.wpe.weight"));
  ops::embedding_backward<T>(exec, tokens, dx, params_.grad_matrix("transformer.wte.weight"));
}

template class Gpt2Model<float>;
template class Gpt2Model<double>;

}  // namespace kgpt::model
