#include "model/families/golf/golf.hpp"

#include <type_traits>

#include "model/ops/activations.hpp"
#include "model/ops/bigram.hpp"
#include "model/ops/elementwise.hpp"
#include "model/ops/qk_norm_rope.hpp"
#include "model/ops/rmsnorm.hpp"
#include "model/ops/smear.hpp"

namespace kgpt::model {

namespace {
// F.rms_norm without eps uses the machine epsilon of float32; both precisions use it so that the
// double build checks the float model.
constexpr double kRmsEps = 1.1920928955078125e-07;

}  // namespace

template <class T, class A>
GolfModel<T, A>::GolfModel(const config::ModelConfig& config, int max_batch, int max_seq)
    : Base(config, max_batch, max_seq,
           layout_of<GolfTensors>([&config](auto& tensors, auto& visit) { declare_golf(config, tensors, visit); }),
           [&config](auto& tensors, auto&& visit) { declare_golf(config, tensors, visit); }, "golf"),
      hidden_(config.d_model * config.mlp_mult),
      encoders_(golf_encoder_layers(run_layers(config))),
      skips_(golf_skip_count(run_layers(config))),
      gate_width_(golf::attn_gate_width(config)) {
  declare_golf_activations(config, this->max_rows_, acts_, ActivationAllocator(this->prefix_, this->max_rows_));
  rotary_ = layers::RotaryTables<T>(this->prefix_, max_seq, this->heads_, config.rope_base, golf::rope_dims(config));
  for (int l = 0; l < this->layers(); ++l) {
    ln_scale_.push_back(golf::ln_scale(config, l));
    exclusive_.push_back(golf::exclusive_attention(config, l) ? 1 : 0);
  }
  for (int l = 0; l < config.n_layer; ++l) {
    const auto& Wa = this->wa_.blocks[static_cast<std::size_t>(l)];
    const auto& G = this->g_.blocks[static_cast<std::size_t>(l)];
    attn_.push_back({layers::Projection<T, A>({&Wa.c_q, &Wa.c_k, &Wa.c_v}, {&G.c_q, &G.c_k, &G.c_v}),
                     ops::Linear<T, A>(Wa.proj, G.proj)});
    mlp_.emplace_back(layers::Projection<T, A>(ops::Linear<T, A>(Wa.fc, G.fc)),
                      ops::Linear<T, A>(Wa.mlp_proj, G.mlp_proj));
  }
  if (golf_bigram(config)) {
    bigram_ = layers::TableEmbedding<T, A>(this->w_.bigram_embed, this->g_.bigram_embed,
                                           golf_bigram_projects(config)
                                               ? ops::Linear<T, A>(this->wa_.bigram_proj, this->g_.bigram_proj)
                                               : ops::Linear<T, A>());
  }
  value_embed_slot_.assign(static_cast<std::size_t>(this->layers()), -1);
  if (golf_value_embeds(config)) {
    value_embed_ = layers::TableEmbedding<T, A>(this->w_.ve_embed, this->g_.ve_embed,
                                                golf_value_embeds_project(config)
                                                    ? ops::Linear<T, A>(this->wa_.ve_proj, this->g_.ve_proj)
                                                    : ops::Linear<T, A>());
    const std::vector<int> listed = golf::value_embed_layers(config);
    for (std::size_t j = 0; j < listed.size(); ++j) {
      if (listed[j] >= this->layers()) {
        throw InputError(std::string(golf::kValueEmbedLayersKey) + ": layer " + std::to_string(listed[j]) +
                         " is not run: the layers are 0 to " + std::to_string(this->layers() - 1));
      }
      value_embed_slot_[static_cast<std::size_t>(listed[j])] = static_cast<int>(j);
    }
  }
  this->use_fp8(attn_);
  this->use_fp8(mlp_);
}

template <class T, class A>
Matrix<A> GolfModel<T, A>::block_input(int l) const {
  const std::size_t n = this->rows_, c = this->config_.d_model;
  return l == 0 ? acts_.x0.mat(n, c) : acts_.blocks.kept(l - 1).x_out.mat(n, c);
}

template <class T, class A>
Matrix<A> GolfModel<T, A>::final_input() const {
  return acts_.final.mat(this->rows_, static_cast<std::size_t>(this->config_.d_model));
}

template <class T, class A>
void GolfModel<T, A>::embedding_forward(const ExecSpace& exec) {
  const std::size_t n = this->rows_, c = this->config_.d_model;
  const bool smear = this->config_.smear_gate;
  const Matrix<A> normed = smear ? acts_.x_embed.mat(n, c) : acts_.x0.mat(n, c);
  const ConstTokenMatrix tokens = this->stage_.inputs();
  if (golf_bigram(this->config_)) {
    // The embedding plus the scaled, projected bigram rows, then their RMSNorm.
    const std::size_t dim = this->config_.bigram_dim;
    const TokenMatrix rows = acts_.bigram_rows.mat(this->batch_, this->seq_);
    ops::bigram_rows(exec, tokens, this->config_.bigram_buckets, rows);
    const Matrix<A> read = acts_.bigram_read.mat(n, dim);
    const Matrix<A> projected = bigram_.projects() ? acts_.bigram_projected.mat(n, c) : read;
    bigram_.forward(exec, ConstTokenMatrix(rows), read, projected);
    const Matrix<A> sum = acts_.embed_sum.mat(n, c);
    ops::bigram_add_forward<T>(exec, tokens, this->w_.tok_emb, this->w_.bigram_scale, ConstMatrix<A>(projected), sum);
    ops::rmsnorm_forward<T>(exec, sum, normed, acts_.rstd0.vec(n), T(kRmsEps));
  } else {
    ops::embedding_rmsnorm_forward<T>(exec, tokens, this->w_.tok_emb, normed, acts_.rstd0.vec(n), T(kRmsEps));
  }
  if (smear) ops::smear_forward<T>(exec, ConstMatrix<A>(normed), this->w_.smear_gate, acts_.x0.mat(n, c), this->seq_);
  if (value_embeds()) {
    // The value embeddings' shared base, e = s * (table[tok] W^T), which the listed layers add to v.
    const std::size_t kvd = this->heads_.kv_width();
    const Matrix<A> read = acts_.ve_read.mat(n, value_embed_.width());
    const Matrix<A> projected = value_embed_.projects() ? acts_.ve_projected.mat(n, kvd) : read;
    value_embed_.forward(exec, tokens, read, projected);
    golf::scalar_scale<T>(exec, this->w_.ve_scale, projected, acts_.ve_base.mat(n, kvd), false);
  }
}

template <class T, class A>
Matrix<A> GolfModel<T, A>::final_forward(const ExecSpace& exec) {
  const std::size_t n = this->rows_, c = this->config_.d_model;
  ops::rmsnorm_forward<T>(exec, block_input(this->layers()), acts_.final.mat(n, c), acts_.rstd_final.vec(n),
                          T(kRmsEps));
  return acts_.final.mat(n, c);
}

template <class T, class A>
void GolfModel<T, A>::block_forward(const ExecSpace& exec, int l) {
  const auto& L = acts_.blocks.working(l);
  const std::size_t block = static_cast<std::size_t>(this->block_of(l));
  const GolfBlockTensors<T>& W = this->w_.blocks[block];
  const std::size_t n = this->rows_, c = this->config_.d_model, kvd = this->heads_.kv_width();
  const std::size_t f = hidden_, w = this->heads_.qkv_width();
  using CM = ConstMatrix<A>;
  const Matrix<A> x_prev = block_input(l);
  const Matrix<A> x_mix = L.x_mix.mat(n, c), h_attn = L.h_attn.mat(n, c), qkv = L.qkv.mat(n, w);
  const int decoder = l - encoders_;
  const T ln_scale = T(ln_scale_[static_cast<std::size_t>(l)]);
  if (decoder >= 0 && decoder < skips_) {
    const Matrix<A> skip = acts_.blocks.kept(encoders_ - 1 - decoder).x_out.mat(n, c);
    ops::mix_rmsnorm_forward<T>(exec, CM(x_prev), CM(skip),
                                Kokkos::subview(ConstMatrix<T>(this->w_.skip_weights), decoder, Kokkos::ALL()),
                                CM(acts_.x0.mat(n, c)), ConstMatrix<T>(W.resid_mix), L.x_in.mat(n, c), x_mix, h_attn,
                                L.rstd_attn.vec(n), T(kRmsEps), ln_scale);
  } else {
    ops::mix_rmsnorm_forward<T>(exec, CM(x_prev), CM(), ConstVector<T>(), CM(acts_.x0.mat(n, c)),
                                ConstMatrix<T>(W.resid_mix), Matrix<A>(), x_mix, h_attn, L.rstd_attn.vec(n), T(kRmsEps),
                                ln_scale);
  }
  attn_[block].qkv.forward(exec, h_attn, qkv);
  const int ve = value_embed_slot_[static_cast<std::size_t>(l)];
  if (ve >= 0) {  // v += g_j e: the layer's value embedding, before the attention reads v
    golf::scalar_scale<T>(exec, this->w_.ve_layer_scales[static_cast<std::size_t>(ve)], acts_.ve_base.mat(n, kvd),
                          value_columns(qkv), true);
  }
  const Matrix<A> q_final = L.q_final.mat(n, c), k_final = L.k_final.mat(n, kvd), o = L.o.mat(n, c);
  ops::qk_norm_rope_forward<T>(exec, CM(qkv), rotary_.shape(this->seq_), rotary_.cos(), rotary_.sin(), W.q_gain, q_final,
                               k_final, L.q_rstd.vec(n * this->heads_.heads), L.k_rstd.vec(n * this->heads_.kv_heads),
                               T(kRmsEps));
  this->attend(exec, l, this->qkv_heads(q_final, k_final, qkv), this->query_heads(o));
  const Matrix<A> attn_out = L.attn_out.mat(n, c), x_attn = L.x_attn.mat(n, c);
  const bool exclusive = exclusive_[static_cast<std::size_t>(l)] != 0;
  if (exclusive) golf::exclusive_attention_forward<T>(exec, this->heads_, CM(o), CM(qkv), L.o_exclusive.mat(n, c));
  Matrix<A> projected = exclusive ? L.o_exclusive.mat(n, c) : o;  // what the output projection reads
  if (gate_width_ > 0) {
    golf::attention_gate_forward<T>(exec, this->heads_, gate_width_, CM(h_attn), W.attn_gate, CM(projected),
                                    L.o_gated.mat(n, c));
    projected = L.o_gated.mat(n, c);
  }
  ops::linear_forward(exec, attn_[block].out, projected, attn_out);
  // In parallel the MLP reads the attention's input, h_attn; else the norm of the attention's residual.
  const bool parallel = runs_parallel(static_cast<int>(block));
  const Matrix<A> h_mlp = parallel ? h_attn : L.h_mlp.mat(n, c);
  if (parallel) {
    ops::scaled_add_forward<T>(exec, x_mix, W.attn_scale, attn_out, x_attn);
  } else {
    ops::residual_rmsnorm_forward<T>(exec, CM(x_mix), W.attn_scale, CM(attn_out), x_attn, h_mlp, L.rstd_mlp.vec(n),
                                     T(kRmsEps), ln_scale);
  }
  const Matrix<A> fc = L.fc.mat(n, f), act = L.act.mat(n, f), mlp_out = L.mlp_out.mat(n, c);
  mlp_[block].forward(exec, h_mlp, fc, act, Matrix<A>(), mlp_out);
  ops::scaled_add_forward<T>(exec, x_attn, W.mlp_scale, mlp_out, acts_.blocks.kept(l).x_out.mat(n, c));
}

template <class T, class A>
void GolfModel<T, A>::final_backward(const ExecSpace& exec, const GradientsReady&) {
  const std::size_t n = this->rows_, c = this->config_.d_model;
  ops::rmsnorm_backward<T>(exec, block_input(this->layers()), acts_.rstd_final.vec(n), this->d_final(),
                           acts_.dx.mat(n, c));
  Kokkos::deep_copy(exec, acts_.dx0.vec(n * c), store<A>(0.0f));
  if (value_embeds()) {
    Kokkos::deep_copy(exec, acts_.d_ve_base.vec(n * this->heads_.kv_width()), store<A>(0.0f));
  }
}

template <class T, class A>
void GolfModel<T, A>::embedding_backward(const ExecSpace& exec, const GradientsReady&) {
  const std::size_t n = this->rows_, c = this->config_.d_model;
  const Matrix<A> dx0 = acts_.dx0.mat(n, c), d_rows = this->d_final();
  ops::add_into<T>(exec, acts_.dx.mat(n, c), dx0);  // x0 is the first block's input and every block's mix input
  const ConstTokenMatrix tokens = this->stage_.inputs();
  // x0 = SmearGate(the embedding's RMSNorm): its gradient to the norm's output, in d_branch (free
  // once the blocks are done).
  Matrix<A> d_normed = dx0;
  if (this->config_.smear_gate) {
    d_normed = acts_.d_branch.mat(n, c);
    ops::smear_backward<T>(exec, ConstMatrix<A>(acts_.x_embed.mat(n, c)), this->w_.smear_gate, ConstMatrix<A>(dx0),
                           d_normed, this->g_.smear_gate, this->seq_, partials());
  }
  if (value_embeds()) {
    // e = s p: ds += sum de p, dp = s de (into d_ve_layer, free now), then the projection and the table.
    const std::size_t kvd = this->heads_.kv_width();
    const Matrix<A> read = acts_.ve_read.mat(n, value_embed_.width());
    const Matrix<A> projected = value_embed_.projects() ? acts_.ve_projected.mat(n, kvd) : read;
    const Matrix<A> d_projected = acts_.d_ve_layer.mat(n, kvd);
    ops::bigram_scale_backward<T>(exec, ConstMatrix<A>(projected), this->w_.ve_scale,
                                  ConstMatrix<A>(acts_.d_ve_base.mat(n, kvd)), d_projected, this->g_.ve_scale,
                                  acts_.ve_columns.vec(kvd), partials());
    const Matrix<A> d_read = value_embed_.projects() ? acts_.d_ve_read.mat(n, value_embed_.width()) : d_projected;
    value_embed_.backward(exec, tokens, read, d_projected, d_read, this->sort_space_);
  }
  // d_final is free now: the gradient reaching the gathered embedding rows.
  if (!golf_bigram(this->config_)) {
    ops::embedding_rmsnorm_backward<T>(exec, tokens, this->w_.tok_emb, acts_.rstd0.vec(n), d_normed, d_rows);
    ops::embedding_backward<T>(exec, tokens, d_rows, this->g_.tok_emb, this->sort_space_);
    return;
  }
  // With BigramHash the norm's input is the sum: its gradient reaches the token embedding's rows and,
  // scaled, the projected bigram rows (into dx, free once added to dx0).
  const std::size_t dim = this->config_.bigram_dim;
  const bool projects = golf_bigram_projects(this->config_);
  const Matrix<A> read = acts_.bigram_read.mat(n, dim);
  const Matrix<A> projected = projects ? acts_.bigram_projected.mat(n, c) : read;
  ops::rmsnorm_backward<T>(exec, acts_.embed_sum.mat(n, c), ConstVector<T>(acts_.rstd0.vec(n)), d_normed, d_rows);
  ops::embedding_backward<T>(exec, tokens, d_rows, this->g_.tok_emb, this->sort_space_);
  const Matrix<A> d_projected = acts_.dx.mat(n, c);
  ops::bigram_scale_backward<T>(exec, ConstMatrix<A>(projected), this->w_.bigram_scale, ConstMatrix<A>(d_rows), d_projected,
                                this->g_.bigram_scale, acts_.bigram_scale_columns.vec(c), partials());
  const Matrix<A> d_read = projects ? acts_.d_bigram_read.mat(n, dim) : d_projected;
  bigram_.backward(exec, acts_.bigram_rows.mat(this->batch_, this->seq_), read, d_projected, d_read, this->sort_space_);
}

template <class T, class A>
void GolfModel<T, A>::block_backward(const ExecSpace& exec, int l, const GradientsReady& ready) {
  const auto& L = acts_.blocks.working(l);
  const std::size_t block = static_cast<std::size_t>(this->block_of(l));
  const GolfBlockTensors<T>& W = this->w_.blocks[block];
  const GolfBlockTensors<T>& G = this->g_.blocks[block];
  const std::size_t n = this->rows_, c = this->config_.d_model, kvd = this->heads_.kv_width();
  const std::size_t f = hidden_, w = this->heads_.qkv_width();
  using CM = ConstMatrix<A>;
  const Matrix<A> dx = acts_.dx.mat(n, c);
  const Matrix<A> d_branch = acts_.d_branch.mat(n, c), d_hidden = acts_.d_hidden.mat(n, f);
  const Matrix<A> d_h = this->d_final();  // scratch once the head's gradient is consumed
  const T ln_scale = T(ln_scale_[static_cast<std::size_t>(l)]);
  const bool exclusive = exclusive_[static_cast<std::size_t>(l)] != 0;
  // An encoder's output also feeds a decoder through its skip.
  if (l < skips_) ops::add_into<T>(exec, acts_.d_skips[static_cast<std::size_t>(l)].mat(n, c), dx);
  // x_out = x_attn + mlp_scale * mlp_out; dx continues as the gradient of x_attn.
  ops::scaled_add_backward<T>(exec, L.mlp_out.mat(n, c), W.mlp_scale, dx, d_branch, G.mlp_scale, partials());
  const bool parallel = runs_parallel(static_cast<int>(block));
  // d_h: the gradient of the MLP's input; in parallel that is h_attn, whose gradient the attention's
  // products then add to.
  mlp_[block].backward(exec, parallel ? L.h_attn.mat(n, c) : L.h_mlp.mat(n, c), L.fc.mat(n, f), L.act.mat(n, f), d_branch,
                       d_hidden, d_hidden, d_h, false);
  if (parallel) {
    // x_attn = x_mix + attn_scale * attn_out: dx continues as the gradient of x_mix; d_branch
    // becomes the gradient of attn_out.
    ops::scaled_add_backward<T>(exec, L.attn_out.mat(n, c), W.attn_scale, dx, d_branch, G.attn_scale, partials());
  } else {
    // x_attn = x_mix + attn_scale * attn_out (residual_rmsnorm): dx += the norm's gradient, then
    // continues as the gradient of x_mix; d_branch becomes the gradient of attn_out.
    ops::residual_rmsnorm_backward<T>(exec, L.x_attn.mat(n, c), ConstVector<T>(L.rstd_mlp.vec(n)), d_h,
                                      L.attn_out.mat(n, c), W.attn_scale, dx, d_branch, G.attn_scale, partials(), ln_scale);
  }
  const Matrix<A> d_o = acts_.d_o.mat(n, c), o = L.o.mat(n, c), qkv = L.qkv.mat(n, w), d_qkv = acts_.d_qkv.mat(n, w);
  const Matrix<A> gated_in = exclusive ? L.o_exclusive.mat(n, c) : o;  // the gate's input
  ops::linear_backward(exec, attn_[block].out, gate_width_ > 0 ? L.o_gated.mat(n, c) : gated_in, d_branch, d_o);
  // The gate: d_o becomes its input's gradient; h's share waits in d_gate_h (gain_rows is free
  // until the q/k backward below).
  if (gate_width_ > 0) {
    golf::attention_gate_backward<T>(exec, this->heads_, gate_width_, CM(L.h_attn.mat(n, c)), W.attn_gate, CM(gated_in),
                                     d_o, acts_.gain_rows.mat(n, this->heads_.heads),
                                     acts_.d_gate_h.mat(n, static_cast<std::size_t>(gate_width_)), G.attn_gate, partials());
  }
  // XSA: d_o becomes the gradient of the attention's output; its share of v's waits in d_xsa_v.
  if (exclusive) golf::exclusive_attention_backward<T>(exec, this->heads_, CM(o), CM(qkv), d_o, acts_.d_xsa_v.mat(n, kvd));
  const Matrix<A> q_final = L.q_final.mat(n, c), k_final = L.k_final.mat(n, kvd);
  const Matrix<A> d_qf = acts_.d_qf.mat(n, c), d_kf = acts_.d_kf.mat(n, kvd);
  this->attend_backward(exec, l, this->qkv_heads(q_final, k_final, qkv), this->query_heads(o), this->query_heads(d_o),
                        this->qkv_heads(d_qf, d_kf, d_qkv));
  if (exclusive) ops::add_into<T>(exec, acts_.d_xsa_v.mat(n, kvd), value_columns(d_qkv));
  const int ve = value_embed_slot_[static_cast<std::size_t>(l)];
  if (ve >= 0) {
    // v_l += g_j e: dg_j += sum dv e, and g_j dv joins e's gradient.
    const auto j = static_cast<std::size_t>(ve);
    const Matrix<A> d_layer = acts_.d_ve_layer.mat(n, kvd);
    ops::bigram_scale_backward<T>(exec, ConstMatrix<A>(acts_.ve_base.mat(n, kvd)), this->w_.ve_layer_scales[j],
                                  value_columns(d_qkv), d_layer, this->g_.ve_layer_scales[j], acts_.ve_columns.vec(kvd),
                                  partials());
    ops::add_into<T>(exec, d_layer, acts_.d_ve_base.mat(n, kvd));
  }
  ops::qk_norm_rope_backward<T>(exec, CM(qkv), rotary_.shape(this->seq_), rotary_.cos(), rotary_.sin(), W.q_gain,
                                ConstVector<T>(L.q_rstd.vec(n * this->heads_.heads)),
                                ConstVector<T>(L.k_rstd.vec(n * this->heads_.kv_heads)), CM(d_qf), CM(d_kf), d_qkv, G.q_gain,
                                acts_.gain_rows.mat(n, this->heads_.heads), partials());
  attn_[block].qkv.backward(exec, L.h_attn.mat(n, c), d_qkv, d_h, parallel);
  if (gate_width_ > 0) {
    ops::add_into<T>(exec, acts_.d_gate_h.mat(n, static_cast<std::size_t>(gate_width_)),
                     Kokkos::subview(d_h, Kokkos::ALL(), std::make_pair(std::size_t{0}, static_cast<std::size_t>(gate_width_))));
  }
  // x_mix = mix0 * x_in + mix1 * x0, h_attn = rmsnorm(x_mix): dx becomes the gradient of x_in; x0's
  // share accumulates in dx0.
  const int decoder = l - encoders_;
  const bool adds_skip = decoder >= 0 && decoder < skips_;
  const Matrix<A> x_in = adds_skip ? L.x_in.mat(n, c) : block_input(l);
  ops::mix_rmsnorm_backward<T>(exec, L.x_mix.mat(n, c), ConstVector<T>(L.rstd_attn.vec(n)), d_h, x_in,
                               acts_.x0.mat(n, c), W.resid_mix, dx, acts_.dx0.mat(n, c), G.resid_mix, partials(), ln_scale);
  if (adds_skip) {
    // x_in = x_prev + skip_weight * (the source encoder's output): the source's share waits in its d_skip.
    const int source = encoders_ - 1 - decoder;
    ops::skip_backward<T>(exec, acts_.blocks.kept(source).x_out.mat(n, c),
                          Kokkos::subview(ConstMatrix<T>(this->w_.skip_weights), decoder, Kokkos::ALL()), dx,
                          acts_.d_skips[static_cast<std::size_t>(source)].mat(n, c),
                          Kokkos::subview(this->g_.skip_weights, decoder, Kokkos::ALL()), partials());
    if (decoder == 0) this->report(ready, this->g_.skip_weights);  // the last decoder the backward reaches
  }
}

template class GolfModel<float, float>;
template class GolfModel<double, double>;
template class GolfModel<float, bf16>;

}  // namespace kgpt::model
