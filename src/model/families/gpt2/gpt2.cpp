#include "model/families/gpt2/gpt2.hpp"

#include <type_traits>

#include "core/error.hpp"
#include "model/gemm/gemm.hpp"
#include "model/layouts.hpp"
#include "model/ops/activations.hpp"
#include "model/ops/cross_entropy.hpp"
#include "model/ops/elementwise.hpp"
#include "model/ops/layernorm.hpp"

namespace kgpt::model {

namespace {
constexpr double kLayerNormEps = 1e-5;  // nn.LayerNorm's default
}

template <class T, class A>
struct Gpt2Model<T, A>::Layer {
  Buffer<A> x_in, h1, qkv, o, x_attn, h2, fc, act;
  Buffer<T> mean1, rstd1, mean2, rstd2;
};

template <class T, class A>
Gpt2Model<T, A>::Gpt2Model(const config::ModelConfig& config, int max_batch, int max_seq)
    : config_(config),
      max_batch_(max_batch),
      max_seq_(max_seq),
      vocab_(config.vocab_size),
      width_(config.d_model),
      heads_(config.n_head),
      head_dim_(config.d_model / config.n_head),
      hidden_(config.d_model * config.mlp_mult),
      params_(gpt2_layout(config, max_seq)),
      stage_(max_batch, max_seq),
      loss_scratch_("kgpt::gpt2::loss_scratch") {
  declare_gpt2(config, max_seq, w_, ViewBinder<T>(params_.layout(), params_.values()));
  declare_gpt2(config, max_seq, g_, ViewBinder<T>(params_.layout(), params_.grads()));
  if constexpr (std::is_same<A, T>::value) {
    declare_gpt2(config, max_seq, wa_, ViewBinder<A>(params_.layout(), params_.values()));
  } else {
    shadow_ = Vector<A>("kgpt::gpt2::weights_shadow", params_.layout().buffer_size());
    declare_gpt2(config, max_seq, wa_, ViewBinder<A>(params_.layout(), shadow_));
  }
  for (int l = 0; l < config.n_layer; ++l) {
    block_spans_.push_back(params_.layout().span("transformer.h." + std::to_string(l) + "."));
  }
  ln_f_span_ = params_.layout().span("transformer.ln_f.");
  if (!config.tie_embeddings) head_span_ = params_.layout().span("lm_head.weight");
  const std::size_t n = static_cast<std::size_t>(max_batch) * max_seq, c = width_, f = hidden_;
  auto buffer = [](const std::string& name, std::size_t size) { return Buffer<A>("kgpt::gpt2::" + name, size); };
  auto stats = [](const std::string& name, std::size_t size) { return Buffer<T>("kgpt::gpt2::" + name, size); };
  layers_.resize(config.n_layer);
  for (int l = 0; l < config.n_layer; ++l) {
    Layer& L = layers_[l];
    L.x_in = buffer("x_in", n * c);
    L.h1 = buffer("h1", n * c);
    L.mean1 = stats("mean1", n);
    L.rstd1 = stats("rstd1", n);
    L.qkv = buffer("qkv", n * 3 * c);
    L.o = buffer("o", n * c);
    L.x_attn = buffer("x_attn", n * c);
    L.h2 = buffer("h2", n * c);
    L.mean2 = stats("mean2", n);
    L.rstd2 = stats("rstd2", n);
    L.fc = buffer("fc", n * f);
    L.act = buffer("act", n * f);
  }
  x_last_ = buffer("x_out", n * c);
  final_ = buffer("final", n * c);
  mean_final_ = stats("mean_final", n);
  rstd_final_ = stats("rstd_final", n);
  logits_ = stats("logits", n * vocab_);
  if (!std::is_same<A, T>::value) d_logits_ = buffer("d_logits", n * vocab_);
  lse_ = stats("lse", n);
  losses_ = stats("losses", n);
  for (Buffer<A>* b : {&dx_, &d_h_, &d_o_}) *b = buffer("backward", n * c);
  d_hidden_ = buffer("backward_mlp", n * f);
  d_qkv_ = buffer("backward_qkv", n * 3 * c);
  partials_ = stats("column_partials", ops::ColumnSums<T, 2>::workspace(n, std::max<std::size_t>(3 * c, f)));
  attention_ = make_attention<A>(resolve_attention(config), attention_shape(config, max_batch, max_seq), "kgpt::gpt2::");
  if (backend::on_gpu) sort_space_ = ops::EmbeddingSortSpace<T>(n, static_cast<std::size_t>(vocab_), c);
  prepare_gemm();
  initialize(params_, 0);
}

template <class T, class A>
Gpt2Model<T, A>::~Gpt2Model() = default;

template <class T, class A>
Matrix<A> Gpt2Model<T, A>::block_input(int l) const {
  const std::size_t n = rows_, c = width_;
  return l < static_cast<int>(layers_.size()) ? layers_[l].x_in.mat(n, c) : x_last_.mat(n, c);
}

template <class T, class A>
void Gpt2Model<T, A>::forward(const ExecSpace& exec, const ConstTokenMatrix& inputs, const ConstTokenMatrix& targets,
                              const Kokkos::View<double, MemSpace>& loss_sum) {
  stage_.stage(exec, inputs, targets, "gpt2 model");
  batch_ = stage_.batch();
  seq_ = stage_.seq();
  rows_ = batch_ * seq_;
  const std::size_t n = rows_, c = width_, f = hidden_;
  const int b = batch_;
  using CM = ConstMatrix<A>;
  const bool reuse_shadow = this->take_shadow_reuse();
  if constexpr (!std::is_same<A, T>::value) {
    if (!reuse_shadow) refresh_shadow(exec, params_.values(), shadow_);
  }
  ops::embedding_forward<T>(exec, stage_.inputs(), w_.wte, w_.wpe, block_input(0));
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    Layer& L = layers_[l];
    const Gpt2BlockTensors<T>& W = w_.blocks[l];
    const Gpt2BlockTensors<A>& Wa = wa_.blocks[l];
    const Matrix<A> x_in = L.x_in.mat(n, c), h1 = L.h1.mat(n, c), qkv = L.qkv.mat(n, 3 * c), o = L.o.mat(n, c);
    ops::layernorm_forward<T>(exec, x_in, W.ln_1_w, W.ln_1_b, h1, L.mean1.vec(n), L.rstd1.vec(n), T(kLayerNormEps));
    gemm_ex(exec, Op::none, Op::transpose, T(1), h1, Wa.c_attn, T(0), qkv, qkv, Wa.c_attn_b);
    attention_->forward(exec, static_cast<int>(l), heads_of(CM(qkv), 0, b, heads_, head_dim_),
                        heads_of(CM(qkv), static_cast<int>(c), b, heads_, head_dim_),
                        heads_of(CM(qkv), static_cast<int>(2 * c), b, heads_, head_dim_), heads_of(o, 0, b, heads_, head_dim_));
    const Matrix<A> x_attn = L.x_attn.mat(n, c), h2 = L.h2.mat(n, c), fc = L.fc.mat(n, f), act = L.act.mat(n, f);
    // x_attn = x_in + o W^T + b: the residual add and the bias ride in the product.
    gemm_ex(exec, Op::none, Op::transpose, T(1), o, Wa.c_proj, T(1), x_in, x_attn, Wa.c_proj_b);
    ops::layernorm_forward<T>(exec, x_attn, W.ln_2_w, W.ln_2_b, h2, L.mean2.vec(n), L.rstd2.vec(n), T(kLayerNormEps));
    gemm_ex(exec, Op::none, Op::transpose, T(1), h2, Wa.c_fc, T(0), fc, fc, Wa.c_fc_b);
    ops::gelu_tanh_forward<T>(exec, fc, act);
    gemm_ex(exec, Op::none, Op::transpose, T(1), act, Wa.mlp_proj, T(1), x_attn, block_input(static_cast<int>(l) + 1),
            Wa.mlp_proj_b);
  }
  ops::layernorm_forward<T>(exec, x_last_.mat(n, c), w_.ln_f_w, w_.ln_f_b, final_.mat(n, c), mean_final_.vec(n),
                            rstd_final_.vec(n), T(kLayerNormEps));
  ops::cross_entropy_forward<T>(exec, final_.mat(n, c), head(), stage_.targets(), T(config_.logit_softcap),
                                logits_.mat(n, vocab_), lse_.vec(n), losses_.vec(n), loss_sum, loss_scratch_);
}

template <class T, class A>
void Gpt2Model<T, A>::backward(const ExecSpace& exec, T grad_scale, const GradientsReady& ready) {
  const std::size_t n = rows_, c = width_, f = hidden_;
  const int b = batch_;
  using CM = ConstMatrix<A>;
  const Matrix<A> dx = dx_.mat(n, c), d_h = d_h_.mat(n, c), d_o = d_o_.mat(n, c);
  const Matrix<A> d_hidden = d_hidden_.mat(n, f), d_qkv = d_qkv_.mat(n, 3 * c);
  T* partials = partials_.vec(partials_.capacity()).data();
  const ConstTokenMatrix targets = stage_.targets(), tokens = stage_.inputs();
  const Matrix<T> logits = logits_.mat(n, vocab_);
  if constexpr (std::is_same<A, T>::value) {
    ops::cross_entropy_backward<T>(exec, final_.mat(n, c), head(), targets, T(config_.logit_softcap), logits, lse_.vec(n),
                                   grad_scale, logits, d_h, head_grad());
  } else {
    ops::cross_entropy_backward<T>(exec, final_.mat(n, c), head(), targets, T(config_.logit_softcap), logits, lse_.vec(n),
                                   grad_scale, d_logits_.mat(n, vocab_), d_h, head_grad());
  }
  if (ready && !config_.tie_embeddings) ready(head_span_.first, head_span_.second);
  ops::layernorm_backward<T>(exec, x_last_.mat(n, c), w_.ln_f_w, mean_final_.vec(n), rstd_final_.vec(n), d_h, dx,
                             g_.ln_f_w, g_.ln_f_b, partials);
  if (ready) ready(ln_f_span_.first, ln_f_span_.second);
  for (int l = static_cast<int>(layers_.size()) - 1; l >= 0; --l) {
    Layer& L = layers_[l];
    const Gpt2BlockTensors<T>& W = w_.blocks[static_cast<std::size_t>(l)];
    const Gpt2BlockTensors<A>& Wa = wa_.blocks[static_cast<std::size_t>(l)];
    const Gpt2BlockTensors<T>& G = g_.blocks[static_cast<std::size_t>(l)];
    const Matrix<A> fc = L.fc.mat(n, f), act = L.act.mat(n, f);
    // x_out = x_attn + mlp: dx flows to x_attn unchanged and into the MLP.
    ops::bias_backward<T>(exec, dx, G.mlp_proj_b, partials);
    gemm(exec, Op::none, Op::none, T(1), dx, Wa.mlp_proj, T(0), d_hidden);
    gemm(exec, Op::transpose, Op::none, T(1), dx, act, T(1), G.mlp_proj);
    ops::gelu_tanh_backward<T>(exec, fc, d_hidden, d_hidden);
    ops::bias_backward<T>(exec, d_hidden, G.c_fc_b, partials);
    gemm(exec, Op::none, Op::none, T(1), d_hidden, Wa.c_fc, T(0), d_h);
    gemm(exec, Op::transpose, Op::none, T(1), d_hidden, L.h2.mat(n, c), T(1), G.c_fc);
    ops::layernorm_backward<T>(exec, L.x_attn.mat(n, c), W.ln_2_w, L.mean2.vec(n), L.rstd2.vec(n), d_h, dx, G.ln_2_w,
                               G.ln_2_b, partials, true);
    // x_attn = x_in + attention: dx flows to x_in unchanged and into attention.
    ops::bias_backward<T>(exec, dx, G.c_proj_b, partials);
    const Matrix<A> o = L.o.mat(n, c), qkv = L.qkv.mat(n, 3 * c);
    gemm(exec, Op::none, Op::none, T(1), dx, Wa.c_proj, T(0), d_o);
    gemm(exec, Op::transpose, Op::none, T(1), dx, o, T(1), G.c_proj);
    const int ci = static_cast<int>(c);
    attention_->backward(exec, l, heads_of(CM(qkv), 0, b, heads_, head_dim_), heads_of(CM(qkv), ci, b, heads_, head_dim_),
                         heads_of(CM(qkv), 2 * ci, b, heads_, head_dim_), heads_of(CM(o), 0, b, heads_, head_dim_),
                         heads_of(CM(d_o), 0, b, heads_, head_dim_), heads_of(d_qkv, 0, b, heads_, head_dim_),
                         heads_of(d_qkv, ci, b, heads_, head_dim_), heads_of(d_qkv, 2 * ci, b, heads_, head_dim_));
    ops::bias_backward<T>(exec, d_qkv, G.c_attn_b, partials);
    gemm(exec, Op::none, Op::none, T(1), d_qkv, Wa.c_attn, T(0), d_h);
    gemm(exec, Op::transpose, Op::none, T(1), d_qkv, L.h1.mat(n, c), T(1), G.c_attn);
    ops::layernorm_backward<T>(exec, L.x_in.mat(n, c), W.ln_1_w, L.mean1.vec(n), L.rstd1.vec(n), d_h, dx, G.ln_1_w,
                               G.ln_1_b, partials, true);
    if (ready) ready(block_spans_[l].first, block_spans_[l].second);
  }
  ops::position_embedding_backward<T>(exec, seq_, dx, g_.wpe);
  ops::embedding_backward<T>(exec, tokens, dx, g_.wte, sort_space_);
}

template class Gpt2Model<float, float>;
template class Gpt2Model<double, double>;
template class Gpt2Model<float, bf16>;

}  // namespace kgpt::model
