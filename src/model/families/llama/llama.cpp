#include "model/families/llama/llama.hpp"

#include "model/families/llama/kernels.hpp"
#include "model/ops/elementwise.hpp"
#include "model/ops/embedding.hpp"
#include "model/ops/qk_norm_rope.hpp"
#include "model/ops/rmsnorm.hpp"

namespace kgpt::model {

namespace {
constexpr double kRmsEps = 1e-5;  // Llama 2's rms_norm_eps
}  // namespace

template <class T, class A>
LlamaModel<T, A>::LlamaModel(const config::ModelConfig& config, int max_batch, int max_seq)
    : Base(config, max_batch, max_seq,
           layout_of<LlamaTensors>([&config](auto& tensors, auto& visit) { declare_llama(config, tensors, visit); }),
           [&config](auto& tensors, auto&& visit) { declare_llama(config, tensors, visit); }, "llama"),
      hidden_(config.d_model * config.mlp_mult) {
  declare_llama_activations(config, this->max_rows_, acts_, ActivationAllocator(this->prefix_, this->max_rows_));
  rotary_ = layers::RotaryTables<T>(this->prefix_, max_seq, this->heads_, config.rope_base);
  for (std::size_t l = 0; l < this->wa_.blocks.size(); ++l) {
    const auto& Wa = this->wa_.blocks[l];
    const auto& G = this->g_.blocks[l];
    attn_.push_back({layers::Projection<T, A>({&Wa.q_proj, &Wa.k_proj, &Wa.v_proj}, {&G.q_proj, &G.k_proj, &G.v_proj}),
                     ops::Linear<T, A>(Wa.o_proj, G.o_proj)});
    mlp_.emplace_back(layers::Projection<T, A>({&Wa.gate_proj, &Wa.up_proj}, {&G.gate_proj, &G.up_proj}),
                      ops::Linear<T, A>(Wa.down_proj, G.down_proj));
  }
  this->use_fp8(attn_);
  this->use_fp8(mlp_);
}

template <class T, class A>
Matrix<A> LlamaModel<T, A>::block_input(int l) const {
  const std::size_t n = this->rows_, c = this->config_.d_model;
  return l < this->layers() ? acts_.blocks.kept(l).x_in.mat(n, c) : acts_.x_last.mat(n, c);
}

template <class T, class A>
Matrix<A> LlamaModel<T, A>::final_input() const {
  return acts_.final.mat(this->rows_, static_cast<std::size_t>(this->config_.d_model));
}

template <class T, class A>
void LlamaModel<T, A>::embedding_forward(const ExecSpace& exec) {
  ops::embedding_forward<T>(exec, this->stage_.inputs(), this->w_.embed, block_input(0));
}

template <class T, class A>
Matrix<A> LlamaModel<T, A>::final_forward(const ExecSpace& exec) {
  const std::size_t n = this->rows_, c = this->config_.d_model;
  ops::weighted_rmsnorm_forward<T>(exec, acts_.x_last.mat(n, c), this->w_.norm, acts_.final.mat(n, c), acts_.rstd_final.vec(n),
                            T(kRmsEps));
  return acts_.final.mat(n, c);
}

template <class T, class A>
void LlamaModel<T, A>::block_forward(const ExecSpace& exec, int l) {
  const std::size_t n = this->rows_, c = this->config_.d_model, kvd = this->heads_.kv_width();
  const std::size_t f = hidden_, w = this->heads_.qkv_width();
  using CM = ConstMatrix<A>;
  const auto& L = acts_.blocks.working(l);
  // Activations are the layer's, parameters the block's (model/block_sequence.hpp).
  const std::size_t i = static_cast<std::size_t>(this->block_of(l));
  const LlamaBlockTensors<T>& W = this->w_.blocks[i];
  const Matrix<A> x_in = block_input(l), h1 = L.h1.mat(n, c), qkv = L.qkv.mat(n, w);
  const Matrix<A> q_rot = L.q_rot.mat(n, c), k_rot = L.k_rot.mat(n, kvd), o = L.o.mat(n, c);
  ops::weighted_rmsnorm_forward<T>(exec, x_in, W.input_norm, h1, L.rstd1.vec(n), T(kRmsEps));
  attn_[i].qkv.forward(exec, h1, qkv);
  llama::rope_forward<T>(exec, CM(qkv), rotary_.shape(this->seq_), rotary_.cos(), rotary_.sin(), q_rot, k_rot);
  this->attend(exec, l, this->qkv_heads(q_rot, k_rot, qkv), this->query_heads(o));
  const Matrix<A> x_attn = L.x_attn.mat(n, c), h2 = L.h2.mat(n, c), gu = L.gu.mat(n, 2 * f), act = L.act.mat(n, f);
  ops::linear_forward(exec, attn_[i].out, o, x_in, x_attn);  // x_attn = x_in + o W_o^T
  ops::weighted_rmsnorm_forward<T>(exec, x_attn, W.post_norm, h2, L.rstd2.vec(n), T(kRmsEps));
  mlp_[i].forward(exec, h2, gu, act, x_attn, block_input(l + 1));  // x_out = x_attn + MLP(h2)
}

template <class T, class A>
void LlamaModel<T, A>::final_backward(const ExecSpace& exec, const GradientsReady& ready) {
  const std::size_t n = this->rows_, c = this->config_.d_model;
  ops::weighted_rmsnorm_backward<T>(exec, acts_.x_last.mat(n, c), this->w_.norm, ConstVector<T>(acts_.rstd_final.vec(n)),
                             this->d_final(), acts_.dx.mat(n, c), this->g_.norm, partials(), false);
  this->report(ready, this->g_.norm);
}

template <class T, class A>
void LlamaModel<T, A>::block_backward(const ExecSpace& exec, int l, const GradientsReady&) {
  const std::size_t n = this->rows_, c = this->config_.d_model, kvd = this->heads_.kv_width();
  const std::size_t f = hidden_, w = this->heads_.qkv_width();
  using CM = ConstMatrix<A>;
  const Matrix<A> dx = acts_.dx.mat(n, c), d_o = acts_.d_o.mat(n, c), d_qr = acts_.d_qr.mat(n, c);
  const Matrix<A> d_kr = acts_.d_kr.mat(n, kvd), d_qkv = acts_.d_qkv.mat(n, w);
  const Matrix<A> d_act = acts_.d_act.mat(n, f), d_gu = acts_.d_gu.mat(n, 2 * f);
  const Matrix<A> d_h = this->d_final();  // scratch once the final norm's backward has read it
  const std::size_t i = static_cast<std::size_t>(this->block_of(l));
  const auto& L = acts_.blocks.working(l);
  const LlamaBlockTensors<T>& W = this->w_.blocks[i];
  const LlamaBlockTensors<T>& G = this->g_.blocks[i];
  // x_out = x_attn + mlp: dx flows to x_attn unchanged and into the MLP.
  mlp_[i].backward(exec, L.h2.mat(n, c), L.gu.mat(n, 2 * f), L.act.mat(n, f), dx, d_act, d_gu, d_h, false);
  ops::weighted_rmsnorm_backward<T>(exec, L.x_attn.mat(n, c), W.post_norm, ConstVector<T>(L.rstd2.vec(n)), d_h, dx, G.post_norm,
                             partials(), true);
  // x_attn = x_in + attention: dx flows to x_in unchanged and into attention.
  const Matrix<A> o = L.o.mat(n, c), qkv = L.qkv.mat(n, w);
  ops::linear_backward(exec, attn_[i].out, o, dx, d_o);
  this->attend_backward(exec, l, this->qkv_heads(L.q_rot.mat(n, c), L.k_rot.mat(n, kvd), qkv), this->query_heads(o),
                        this->query_heads(d_o), this->qkv_heads(d_qr, d_kr, d_qkv));
  llama::rope_backward<T>(exec, rotary_.shape(this->seq_), rotary_.cos(), rotary_.sin(), CM(d_qr), CM(d_kr), d_qkv);
  attn_[i].qkv.backward(exec, L.h1.mat(n, c), d_qkv, d_h);
  ops::weighted_rmsnorm_backward<T>(exec, block_input(l), W.input_norm, ConstVector<T>(L.rstd1.vec(n)), d_h, dx, G.input_norm,
                             partials(), true);
}

template <class T, class A>
void LlamaModel<T, A>::embedding_backward(const ExecSpace& exec, const GradientsReady&) {
  const Matrix<A> dx = acts_.dx.mat(this->rows_, static_cast<std::size_t>(this->config_.d_model));
  ops::embedding_backward<T>(exec, this->stage_.inputs(), dx, this->g_.embed, this->sort_space_);
}

template class LlamaModel<float, float>;
template class LlamaModel<double, double>;
template class LlamaModel<float, bf16>;

}  // namespace kgpt::model
