#include "model/families/golf/golf.hpp"

#include <type_traits>

#include "model/gemm/gemm.hpp"
#include "model/layouts.hpp"
#include "model/ops/activations.hpp"
#include "model/ops/cross_entropy.hpp"
#include "model/ops/elementwise.hpp"
#include "model/ops/qk_norm_rope.hpp"
#include "model/ops/rmsnorm.hpp"

namespace kgpt::model {

namespace {
// F.rms_norm without eps uses the machine epsilon of float32; both precisions use it so that the
// double build checks the float model.
constexpr double kRmsEps = 1.1920928955078125e-07;

// Columns [begin, end) of a matrix, as a LayoutRight View with the matrix's leading dimension.
template <class View>
auto columns(const View& m, std::size_t begin, std::size_t end) {
  return Kokkos::subview(m, Kokkos::ALL(), std::make_pair(begin, end));
}
}  // namespace

template <class T, class A>
struct GolfModel<T, A>::Layer {
  // Activations kept for the backward; x_in only in decoder blocks that add a skip.
  Buffer<A> x_in, x_mix, h_attn, qkv, q_final, k_final, o, attn_out, x_attn, h_mlp, fc, act, mlp_out, x_out;
  Buffer<T> rstd_attn, q_rstd, k_rstd, rstd_mlp;
};

template <class T, class A>
GolfModel<T, A>::GolfModel(const config::ModelConfig& config, int max_batch, int max_seq)
    : config_(config),
      max_batch_(max_batch),
      max_seq_(max_seq),
      vocab_(config.vocab_size),
      width_(config.d_model),
      heads_(config.n_head),
      kv_heads_(config.n_kv_head),
      head_dim_(config.d_model / config.n_head),
      hidden_(config.d_model * config.mlp_mult),
      qkv_width_(config.d_model + 2 * config.n_kv_head * (config.d_model / config.n_head)),
      encoders_(golf_encoder_layers(config.n_layer)),
      skips_(golf_skip_count(config.n_layer)),
      params_(golf_layout(config)),
      rope_cos_("kgpt::golf::rope_cos", max_seq, head_dim_ / 2),
      rope_sin_("kgpt::golf::rope_sin", max_seq, head_dim_ / 2),
      stage_(max_batch, max_seq),
      loss_scratch_("kgpt::golf::loss_scratch") {
  declare_golf(config, w_, ViewBinder<T>(params_.layout(), params_.values()));
  declare_golf(config, g_, ViewBinder<T>(params_.layout(), params_.grads()));
  if constexpr (std::is_same<A, T>::value) {
    declare_golf(config, wa_, ViewBinder<A>(params_.layout(), params_.values()));
  } else {
    shadow_ = Vector<A>("kgpt::golf::weights_shadow", params_.layout().buffer_size());
    declare_golf(config, wa_, ViewBinder<A>(params_.layout(), shadow_));
  }
  const std::size_t c = width_, kvd = static_cast<std::size_t>(kv_heads_) * head_dim_;
  const auto& first = w_.blocks.front();
  fused_qkv_ = first.c_k.data() == first.c_q.data() + c * c && first.c_v.data() == first.c_k.data() + kvd * c;
  for (int l = 0; l < config.n_layer; ++l) block_spans_.push_back(params_.layout().span("blocks." + std::to_string(l) + "."));
  if (skips_ > 0) skip_span_ = params_.layout().span("skip_weights");
  if (!config.tie_embeddings) head_span_ = params_.layout().span("lm_head.weight");
  ops::rope_tables(rope_cos_, rope_sin_, config.rope_base);

  const std::size_t n = static_cast<std::size_t>(max_batch) * max_seq, f = hidden_, w = qkv_width_;
  auto buffer = [](const std::string& name, std::size_t size) { return Buffer<A>("kgpt::golf::" + name, size); };
  auto stats = [](const std::string& name, std::size_t size) { return Buffer<T>("kgpt::golf::" + name, size); };
  layers_.resize(config.n_layer);
  for (int l = 0; l < config.n_layer; ++l) {
    Layer& L = layers_[l];
    const int decoder = l - encoders_;
    if (decoder >= 0 && decoder < skips_) L.x_in = buffer("x_in", n * c);
    L.x_mix = buffer("x_mix", n * c);
    L.h_attn = buffer("h_attn", n * c);
    L.rstd_attn = stats("rstd_attn", n);
    L.qkv = buffer("qkv", n * w);
    L.q_final = buffer("q_final", n * c);
    L.k_final = buffer("k_final", n * kvd);
    L.q_rstd = stats("q_rstd", n * heads_);
    L.k_rstd = stats("k_rstd", n * kv_heads_);
    L.o = buffer("o", n * c);
    L.attn_out = buffer("attn_out", n * c);
    L.x_attn = buffer("x_attn", n * c);
    L.h_mlp = buffer("h_mlp", n * c);
    L.rstd_mlp = stats("rstd_mlp", n);
    L.fc = buffer("fc", n * f);
    L.act = buffer("act", n * f);
    L.mlp_out = buffer("mlp_out", n * c);
    L.x_out = buffer("x_out", n * c);
  }
  x0_ = buffer("x0", n * c);
  rstd0_ = stats("rstd0", n);
  final_ = buffer("final", n * c);
  rstd_final_ = stats("rstd_final", n);
  logits_ = stats("logits", n * vocab_);
  if (!std::is_same<A, T>::value) d_logits_ = buffer("d_logits", n * vocab_);
  lse_ = stats("lse", n);
  losses_ = stats("losses", n);
  for (Buffer<A>* b : {&dx_, &dx0_, &d_branch_, &d_h_, &d_o_, &d_qf_}) *b = buffer("backward", n * c);
  d_kf_ = buffer("backward_kv", n * kvd);
  d_hidden_ = buffer("backward_hidden", n * f);
  d_qkv_ = buffer("backward_qkv", n * w);
  gain_rows_ = stats("gain_rows", n * heads_);
  partials_ = stats("column_partials", ops::ColumnSums<T, 2>::workspace(n, std::max<std::size_t>(c, heads_)));
  attention_ = make_attention<A>(resolve_attention(config), attention_shape(config, max_batch, max_seq), "kgpt::golf::");
  for (int s = 0; s < skips_; ++s) d_skips_.push_back(buffer("d_skip", n * c));
  if (backend::on_gpu) sort_space_ = ops::EmbeddingSortSpace<T>(n, static_cast<std::size_t>(vocab_), c);
  prepare_gemm();
  initialize(params_, 0);
}

template <class T, class A>
GolfModel<T, A>::~GolfModel() = default;

template <class T, class A>
void GolfModel<T, A>::forward(const ExecSpace& exec, const ConstTokenMatrix& inputs, const ConstTokenMatrix& targets,
                              const Kokkos::View<double, MemSpace>& loss_sum) {
  stage_.stage(exec, inputs, targets, "golf model");
  batch_ = stage_.batch();
  seq_ = stage_.seq();
  rows_ = batch_ * seq_;
  const std::size_t n = rows_, c = width_;
  const bool reuse_shadow = this->take_shadow_reuse();
  if constexpr (!std::is_same<A, T>::value) {
    if (!reuse_shadow) refresh_shadow(exec, params_.values(), shadow_);
  }
  ops::embedding_rmsnorm_forward<T>(exec, stage_.inputs(), w_.tok_emb, x0_.mat(n, c), rstd0_.vec(n), T(kRmsEps));
  for (int l = 0; l < config_.n_layer; ++l) block_forward(exec, l, l == 0 ? x0_.mat(n, c) : layers_[l - 1].x_out.mat(n, c));
  ops::rmsnorm_forward<T>(exec, layers_.back().x_out.mat(n, c), final_.mat(n, c), rstd_final_.vec(n), T(kRmsEps));
  ops::cross_entropy_forward<T>(exec, final_.mat(n, c), head(), stage_.targets(), T(config_.logit_softcap),
                                logits_.mat(n, vocab_), lse_.vec(n), losses_.vec(n), loss_sum, loss_scratch_);
}

template <class T, class A>
void GolfModel<T, A>::block_forward(const ExecSpace& exec, int l, const Matrix<A>& x_prev) {
  Layer& L = layers_[l];
  const GolfBlockTensors<T>& W = w_.blocks[static_cast<std::size_t>(l)];
  const GolfBlockTensors<A>& Wa = wa_.blocks[static_cast<std::size_t>(l)];
  const std::size_t n = rows_, c = width_, kvd = static_cast<std::size_t>(kv_heads_) * head_dim_, f = hidden_;
  const std::size_t w = qkv_width_;
  const int b = batch_;
  using CM = ConstMatrix<A>;
  const Matrix<A> x_mix = L.x_mix.mat(n, c), h_attn = L.h_attn.mat(n, c), qkv = L.qkv.mat(n, w);
  const int decoder = l - encoders_;
  if (decoder >= 0 && decoder < skips_) {
    const Matrix<A> skip = layers_[encoders_ - 1 - decoder].x_out.mat(n, c);
    ops::mix_rmsnorm_forward<T>(exec, CM(x_prev), CM(skip), Kokkos::subview(ConstMatrix<T>(w_.skip_weights), decoder, Kokkos::ALL()),
                                CM(x0_.mat(n, c)), ConstMatrix<T>(W.resid_mix), L.x_in.mat(n, c), x_mix, h_attn,
                                L.rstd_attn.vec(n), T(kRmsEps));
  } else {
    ops::mix_rmsnorm_forward<T>(exec, CM(x_prev), CM(), ConstVector<T>(), CM(x0_.mat(n, c)), ConstMatrix<T>(W.resid_mix),
                                Matrix<A>(), x_mix, h_attn, L.rstd_attn.vec(n), T(kRmsEps));
  }
  if (fused_qkv_) {
    gemm(exec, Op::none, Op::transpose, T(1), h_attn, ConstMatrix<A>(Wa.c_q.data(), w, c), T(0), qkv);
  } else {
    gemm(exec, Op::none, Op::transpose, T(1), h_attn, Wa.c_q, T(0), columns(qkv, 0, c));
    gemm(exec, Op::none, Op::transpose, T(1), h_attn, Wa.c_k, T(0), columns(qkv, c, c + kvd));
    gemm(exec, Op::none, Op::transpose, T(1), h_attn, Wa.c_v, T(0), columns(qkv, c + kvd, w));
  }
  ops::QkShape shape{heads_, kv_heads_, head_dim_, seq_, 0, static_cast<int>(c)};
  const Matrix<A> q_final = L.q_final.mat(n, c), k_final = L.k_final.mat(n, kvd), o = L.o.mat(n, c);
  ops::qk_norm_rope_forward<T>(exec, CM(qkv), shape, ConstMatrix<T>(rope_cos_), ConstMatrix<T>(rope_sin_), W.q_gain,
                               q_final, k_final, L.q_rstd.vec(n * heads_), L.k_rstd.vec(n * kv_heads_), T(kRmsEps));
  attention_->forward(exec, l, heads_of(CM(q_final), 0, b, heads_, head_dim_), heads_of(CM(k_final), 0, b, kv_heads_, head_dim_),
                      heads_of(CM(qkv), static_cast<int>(c + kvd), b, kv_heads_, head_dim_), heads_of(o, 0, b, heads_, head_dim_));
  const Matrix<A> attn_out = L.attn_out.mat(n, c), x_attn = L.x_attn.mat(n, c), h_mlp = L.h_mlp.mat(n, c);
  gemm(exec, Op::none, Op::transpose, T(1), o, Wa.proj, T(0), attn_out);
  ops::residual_rmsnorm_forward<T>(exec, CM(x_mix), W.attn_scale, CM(attn_out), x_attn, h_mlp, L.rstd_mlp.vec(n),
                                   T(kRmsEps));
  const Matrix<A> fc = L.fc.mat(n, f), act = L.act.mat(n, f), mlp_out = L.mlp_out.mat(n, c);
  gemm(exec, Op::none, Op::transpose, T(1), h_mlp, Wa.fc, T(0), fc);
  ops::relu_squared_forward<T>(exec, fc, act);
  gemm(exec, Op::none, Op::transpose, T(1), act, Wa.mlp_proj, T(0), mlp_out);
  ops::scaled_add_forward<T>(exec, x_attn, W.mlp_scale, mlp_out, L.x_out.mat(n, c));
}

template <class T, class A>
void GolfModel<T, A>::backward(const ExecSpace& exec, T grad_scale, const GradientsReady& ready) {
  const std::size_t n = rows_, c = width_;
  const Matrix<A> dx = dx_.mat(n, c), dx0 = dx0_.mat(n, c), d_h = d_h_.mat(n, c);
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
  ops::rmsnorm_backward<T>(exec, layers_.back().x_out.mat(n, c), rstd_final_.vec(n), d_h, dx);
  Kokkos::deep_copy(exec, dx0_.vec(n * c), store<A>(0.0f));
  for (int l = config_.n_layer - 1; l >= 0; --l) {
    // An encoder's output also feeds a decoder through its skip.
    if (l < skips_) ops::add_into<T>(exec, d_skips_[l].mat(n, c), dx);
    block_backward(exec, l, dx);
    if (ready) ready(block_spans_[l].first, block_spans_[l].second);
    const int decoder = l - encoders_;
    if (decoder >= 0 && decoder < skips_) {
      const int source = encoders_ - 1 - decoder;
      ops::skip_backward<T>(exec, layers_[source].x_out.mat(n, c),
                            Kokkos::subview(ConstMatrix<T>(w_.skip_weights), decoder, Kokkos::ALL()), dx,
                            d_skips_[source].mat(n, c), Kokkos::subview(g_.skip_weights, decoder, Kokkos::ALL()),
                            partials_.vec(partials_.capacity()).data());
    }
  }
  if (ready && skips_ > 0) ready(skip_span_.first, skip_span_.second);
  ops::add_into<T>(exec, dx, dx0);  // x0 is the first block's input and every block's mix input
  ops::embedding_rmsnorm_backward<T>(exec, tokens, w_.tok_emb, rstd0_.vec(n), dx0, d_h);
  ops::embedding_backward<T>(exec, tokens, d_h, g_.tok_emb, sort_space_);
}

template <class T, class A>
void GolfModel<T, A>::block_backward(const ExecSpace& exec, int l, const Matrix<A>& dx) {
  Layer& L = layers_[l];
  const GolfBlockTensors<T>& W = w_.blocks[static_cast<std::size_t>(l)];
  const GolfBlockTensors<A>& Wa = wa_.blocks[static_cast<std::size_t>(l)];
  const GolfBlockTensors<T>& G = g_.blocks[static_cast<std::size_t>(l)];
  const std::size_t n = rows_, c = width_, kvd = static_cast<std::size_t>(kv_heads_) * head_dim_, f = hidden_;
  const std::size_t w = qkv_width_;
  const int b = batch_;
  using CM = ConstMatrix<A>;
  T* partials = partials_.vec(partials_.capacity()).data();
  const Matrix<A> d_branch = d_branch_.mat(n, c), d_hidden = d_hidden_.mat(n, f), d_h = d_h_.mat(n, c);
  // x_out = x_attn + mlp_scale * mlp_out; dx continues as the gradient of x_attn.
  ops::scaled_add_backward<T>(exec, L.mlp_out.mat(n, c), W.mlp_scale, dx, d_branch, G.mlp_scale, partials);
  const Matrix<A> fc = L.fc.mat(n, f), act = L.act.mat(n, f);
  gemm(exec, Op::none, Op::none, T(1), d_branch, Wa.mlp_proj, T(0), d_hidden);
  gemm(exec, Op::transpose, Op::none, T(1), d_branch, act, T(1), G.mlp_proj);
  ops::relu_squared_backward<T>(exec, fc, d_hidden, d_hidden);
  gemm(exec, Op::none, Op::none, T(1), d_hidden, Wa.fc, T(0), d_h);
  gemm(exec, Op::transpose, Op::none, T(1), d_hidden, L.h_mlp.mat(n, c), T(1), G.fc);
  ops::rmsnorm_backward<T>(exec, L.x_attn.mat(n, c), L.rstd_mlp.vec(n), d_h, dx, true);
  // x_attn = x_mix + attn_scale * attn_out; dx continues as the gradient of x_mix.
  ops::scaled_add_backward<T>(exec, L.attn_out.mat(n, c), W.attn_scale, dx, d_branch, G.attn_scale, partials);
  const Matrix<A> d_o = d_o_.mat(n, c), o = L.o.mat(n, c), qkv = L.qkv.mat(n, w), d_qkv = d_qkv_.mat(n, w);
  gemm(exec, Op::none, Op::none, T(1), d_branch, Wa.proj, T(0), d_o);
  gemm(exec, Op::transpose, Op::none, T(1), d_branch, o, T(1), G.proj);
  const Matrix<A> q_final = L.q_final.mat(n, c), k_final = L.k_final.mat(n, kvd);
  const Matrix<A> d_qf = d_qf_.mat(n, c), d_kf = d_kf_.mat(n, kvd);
  attention_->backward(exec, l, heads_of(CM(q_final), 0, b, heads_, head_dim_), heads_of(CM(k_final), 0, b, kv_heads_, head_dim_),
                       heads_of(CM(qkv), static_cast<int>(c + kvd), b, kv_heads_, head_dim_), heads_of(CM(o), 0, b, heads_, head_dim_),
                       heads_of(CM(d_o), 0, b, heads_, head_dim_), heads_of(d_qf, 0, b, heads_, head_dim_),
                       heads_of(d_kf, 0, b, kv_heads_, head_dim_), heads_of(d_qkv, static_cast<int>(c + kvd), b, kv_heads_, head_dim_));
  ops::QkShape shape{heads_, kv_heads_, head_dim_, seq_, 0, static_cast<int>(c)};
  ops::qk_norm_rope_backward<T>(exec, CM(qkv), shape, ConstMatrix<T>(rope_cos_), ConstMatrix<T>(rope_sin_), W.q_gain,
                                ConstVector<T>(L.q_rstd.vec(n * heads_)), ConstVector<T>(L.k_rstd.vec(n * kv_heads_)),
                                CM(d_qf), CM(d_kf), d_qkv, G.q_gain, gain_rows_.mat(n, heads_), partials);
  const Matrix<A> h_attn = L.h_attn.mat(n, c);
  if (fused_qkv_) {
    gemm(exec, Op::none, Op::none, T(1), d_qkv, ConstMatrix<A>(Wa.c_q.data(), w, c), T(0), d_h);
    gemm(exec, Op::transpose, Op::none, T(1), d_qkv, h_attn, T(1), Matrix<T>(G.c_q.data(), w, c));
  } else {
    gemm(exec, Op::none, Op::none, T(1), columns(d_qkv, 0, c), Wa.c_q, T(0), d_h);
    gemm(exec, Op::none, Op::none, T(1), columns(d_qkv, c, c + kvd), Wa.c_k, T(1), d_h);
    gemm(exec, Op::none, Op::none, T(1), columns(d_qkv, c + kvd, w), Wa.c_v, T(1), d_h);
    gemm(exec, Op::transpose, Op::none, T(1), columns(d_qkv, 0, c), h_attn, T(1), G.c_q);
    gemm(exec, Op::transpose, Op::none, T(1), columns(d_qkv, c, c + kvd), h_attn, T(1), G.c_k);
    gemm(exec, Op::transpose, Op::none, T(1), columns(d_qkv, c + kvd, w), h_attn, T(1), G.c_v);
  }
  ops::rmsnorm_backward<T>(exec, L.x_mix.mat(n, c), L.rstd_attn.vec(n), d_h, dx, true);
  // x_mix = mix0 * x_in + mix1 * x0: dx becomes the gradient of x_in; x0's share accumulates.
  const int decoder = l - encoders_;
  const bool own_input = decoder >= 0 && decoder < skips_;
  const Matrix<A> x_in = own_input ? L.x_in.mat(n, c) : l == 0 ? x0_.mat(n, c) : layers_[l - 1].x_out.mat(n, c);
  ops::mix_backward<T>(exec, CM(x_in), CM(x0_.mat(n, c)), W.resid_mix, dx, dx0_.mat(n, c), G.resid_mix, partials);
}

template class GolfModel<float, float>;
template class GolfModel<double, double>;
template class GolfModel<float, bf16>;

}  // namespace kgpt::model
