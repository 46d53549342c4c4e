#include "model/families/gpt2/gpt2.hpp"

#include <type_traits>

#include "model/ops/elementwise.hpp"
#include "model/ops/layernorm.hpp"

namespace kgpt::model {

namespace {
constexpr double kLayerNormEps = 1e-5;  // nn.LayerNorm's default
}

template <class T, class A>
Gpt2Model<T, A>::Gpt2Model(const config::ModelConfig& config, int max_batch, int max_seq)
    : Base(config, max_batch, max_seq,
           layout_of<Gpt2Tensors>([&](auto& tensors, auto& visit) { declare_gpt2(config, max_seq, tensors, visit); }),
           [&](auto& tensors, auto&& visit) { declare_gpt2(config, max_seq, tensors, visit); }, "gpt2"),
      hidden_(config.d_model * config.mlp_mult) {
  declare_gpt2_activations(config, this->max_rows_, acts_, ActivationAllocator(this->prefix_, this->max_rows_));
  for (std::size_t l = 0; l < this->wa_.blocks.size(); ++l) {
    const auto& Wa = this->wa_.blocks[l];
    const auto& G = this->g_.blocks[l];
    attn_.push_back({layers::Projection<T, A>(ops::Linear<T, A>(Wa.c_attn, G.c_attn, Wa.c_attn_b, G.c_attn_b)),
                          ops::Linear<T, A>(Wa.c_proj, G.c_proj, Wa.c_proj_b, G.c_proj_b)});
    mlp_.emplace_back(layers::Projection<T, A>(ops::Linear<T, A>(Wa.c_fc, G.c_fc, Wa.c_fc_b, G.c_fc_b)),
                      ops::Linear<T, A>(Wa.mlp_proj, G.mlp_proj, Wa.mlp_proj_b, G.mlp_proj_b),
                      layers::GeluActivation{config.gelu_epilogue});
  }
  this->use_fp8(attn_);
  this->use_fp8(mlp_);
}

template <class T, class A>
Matrix<A> Gpt2Model<T, A>::block_input(int l) const {
  const std::size_t n = this->rows_, c = this->config_.d_model;
  return l < this->layers() ? acts_.blocks.kept(l).x_in.mat(n, c) : acts_.x_last.mat(n, c);
}

template <class T, class A>
Matrix<A> Gpt2Model<T, A>::final_input() const {
  return acts_.final.mat(this->rows_, static_cast<std::size_t>(this->config_.d_model));
}

template <class T, class A>
void Gpt2Model<T, A>::embedding_forward(const ExecSpace& exec) {
  ops::embedding_forward<T>(exec, this->stage_.inputs(), this->w_.wte, this->w_.wpe, block_input(0));
}

template <class T, class A>
Matrix<A> Gpt2Model<T, A>::final_forward(const ExecSpace& exec) {
  const std::size_t n = this->rows_, c = this->config_.d_model;
  ops::layernorm_forward<T>(exec, acts_.x_last.mat(n, c), this->w_.ln_f_w, this->w_.ln_f_b, acts_.final.mat(n, c),
                            acts_.mean_final.vec(n), acts_.rstd_final.vec(n), T(kLayerNormEps));
  return acts_.final.mat(n, c);
}

template <class T, class A>
void Gpt2Model<T, A>::block_forward(const ExecSpace& exec, int l) {
  const std::size_t n = this->rows_, c = this->config_.d_model, f = hidden_;
  const auto& L = acts_.blocks.working(l);
  // Activations are the layer's, parameters the block's (model/block_sequence.hpp).
  const std::size_t i = static_cast<std::size_t>(this->block_of(l));
  const Gpt2BlockTensors<T>& W = this->w_.blocks[i];
  const Matrix<A> x_in = block_input(l), h1 = L.h1.mat(n, c), qkv = L.qkv.mat(n, 3 * c), o = L.o.mat(n, c);
  ops::layernorm_forward<T>(exec, x_in, W.ln_1_w, W.ln_1_b, h1, L.mean1.vec(n), L.rstd1.vec(n), T(kLayerNormEps));
  attn_[i].qkv.forward(exec, h1, qkv);
  this->attend(exec, l, this->qkv_heads(qkv), this->query_heads(o));
  const Matrix<A> x_attn = L.x_attn.mat(n, c), h2 = L.h2.mat(n, c), fc = L.fc.mat(n, f), act = L.act.mat(n, f);
  // x_attn = x_in + o W^T + b: the residual add and the bias ride in the product.
  ops::linear_forward(exec, attn_[i].out, o, x_in, x_attn);
  ops::layernorm_forward<T>(exec, x_attn, W.ln_2_w, W.ln_2_b, h2, L.mean2.vec(n), L.rstd2.vec(n), T(kLayerNormEps));
  mlp_[i].forward(exec, h2, fc, act, x_attn, block_input(l + 1));  // x_out = x_attn + MLP(h2)
}

template <class T, class A>
void Gpt2Model<T, A>::final_backward(const ExecSpace& exec, const GradientsReady& ready) {
  const std::size_t n = this->rows_, c = this->config_.d_model;
  ops::layernorm_backward<T>(exec, acts_.x_last.mat(n, c), this->w_.ln_f_w, acts_.mean_final.vec(n),
                             acts_.rstd_final.vec(n), this->d_final(), acts_.dx.mat(n, c), this->g_.ln_f_w,
                             this->g_.ln_f_b, partials());
  this->report(ready, this->g_.ln_f_w);
  this->report(ready, this->g_.ln_f_b);
}

template <class T, class A>
void Gpt2Model<T, A>::block_backward(const ExecSpace& exec, int l, const GradientsReady&) {
  const std::size_t n = this->rows_, c = this->config_.d_model, f = hidden_;
  const Matrix<A> dx = acts_.dx.mat(n, c), d_o = acts_.d_o.mat(n, c);
  const Matrix<A> d_hidden = acts_.d_hidden.mat(n, f), d_qkv = acts_.d_qkv.mat(n, 3 * c);
  const Matrix<A> d_h = this->d_final();  // scratch once the final norm's backward has read it
  const auto& L = acts_.blocks.working(l);
  const std::size_t i = static_cast<std::size_t>(this->block_of(l));
  const Gpt2BlockTensors<T>& W = this->w_.blocks[i];
  const Gpt2BlockTensors<T>& G = this->g_.blocks[i];
  // x_out = x_attn + mlp: dx flows to x_attn unchanged and into the MLP.
  mlp_[i].backward(exec, L.h2.mat(n, c), L.fc.mat(n, f), L.act.mat(n, f), dx, d_hidden, d_hidden, d_h, false,
                   partials());
  ops::layernorm_backward<T>(exec, L.x_attn.mat(n, c), W.ln_2_w, L.mean2.vec(n), L.rstd2.vec(n), d_h, dx, G.ln_2_w,
                             G.ln_2_b, partials(), true);
  // x_attn = x_in + attention: dx flows to x_in unchanged and into attention.
  const Matrix<A> o = L.o.mat(n, c), qkv = L.qkv.mat(n, 3 * c);
  ops::linear_backward(exec, attn_[i].out, o, dx, d_o, false, partials());
  this->attend_backward(exec, l, this->qkv_heads(qkv), this->query_heads(o), this->query_heads(d_o),
                        this->qkv_heads(d_qkv));
  attn_[i].qkv.backward(exec, L.h1.mat(n, c), d_qkv, d_h, false, partials());
  ops::layernorm_backward<T>(exec, block_input(l), W.ln_1_w, L.mean1.vec(n), L.rstd1.vec(n), d_h, dx, G.ln_1_w, G.ln_1_b,
                             partials(), true);
}

template <class T, class A>
void Gpt2Model<T, A>::embedding_backward(const ExecSpace& exec, const GradientsReady&) {
  const Matrix<A> dx = acts_.dx.mat(this->rows_, static_cast<std::size_t>(this->config_.d_model));
  ops::position_embedding_backward<T>(exec, this->seq_, dx, this->g_.wpe);
  ops::embedding_backward<T>(exec, this->stage_.inputs(), dx, this->g_.wte, this->sort_space_);
}

template class Gpt2Model<float, float>;
template class Gpt2Model<double, double>;
template class Gpt2Model<float, bf16>;

}  // namespace kgpt::model
