#pragma once
// The golf family (parameter-golf's baseline): token embedding (+ BigramHash, with
// model.bigram_buckets) -> RMSNorm (-> SmearGate, with model.smear_gate) = x0; L blocks of
//   x = mix0*x + mix1*x0;  x += attn_scale * Attn(RMSNorm(x));  x += mlp_scale * MLP(RMSNorm(x))
// (from model.parallel_residual_start on: h = RMSNorm(x); x += attn_scale * Attn(h) + mlp_scale * MLP(h);
// with model.recur_start, some blocks run twice: L counts the layers run, model/block_sequence.hpp)
// with GQA attention (RMSNorm and RoPE on q and k, per-head q_gain) and a relu^2 MLP; U-Net skips
// (the first L/2 block outputs are added back, scaled by skip_weights, before the last blocks, in
// reverse order); partial RoPE, LN scale and XSA where the deck asks (golf/attention_options.hpp);
// final RMSNorm; logits through the tied embedding (or an untied head), softcapped;
// cross-entropy. Forward keeps every activation the hand-written backward needs, token-major and in
// the activation type A (T, or bf16 for train.precision: bf16); parameters, their gradients, norm
// statistics and the loss stay in T.

#include <cmath>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "model/attention/heads.hpp"
#include "model/families/golf/attention_options.hpp"
#include "model/families/golf/value_embeddings.hpp"
#include "model/block_sequence.hpp"
#include "model/layers/attention.hpp"
#include "model/layers/mlp.hpp"
#include "model/layers/rotary.hpp"
#include "model/layers/table.hpp"
#include "model/model_base.hpp"
#include "model/ops/linear.hpp"
#include "model/parameters.hpp"
#include "model/recompute.hpp"
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
  Matrix<T> attn_gate;              // attn.attn_gate_proj.weight (H, model.attn_gate_width), else empty
};

template <class T>
struct GolfTensors {
  Matrix<T> tok_emb;  // tok_emb.weight (V, C)
  std::vector<GolfBlockTensors<T>> blocks;
  Matrix<T> skip_weights;  // (min(encoders, decoders), C); empty without skips
  Matrix<T> lm_head;       // lm_head.weight (V, C); empty when the embedding is tied
  Vector<T> smear_gate;    // smear_gate (C) with model.smear_gate, else empty
  // With model.bigram_buckets B (else empty): bigram.embed.weight (B, Db), bigram.proj.weight (C, Db)
  // where Db = model.bigram_dim is not C, bigram.scale (1).
  Matrix<T> bigram_embed, bigram_proj;
  Vector<T> bigram_scale;
  // With model.value_embed_layers (else empty; golf/value_embeddings.hpp): ve_shared.embed.weight
  // (V, Dv), ve_shared.proj.weight (KV*D, Dv) where Dv = model.value_embed_dim is not KV*D,
  // ve_shared.scale (1), and ve_layer_scales.j (1) for the j-th listed layer.
  Matrix<T> ve_embed, ve_proj;
  Vector<T> ve_scale;
  std::vector<Vector<T>> ve_layer_scales;
};

inline bool golf_bigram(const config::ModelConfig& m) { return m.bigram_buckets > 0; }
inline bool golf_value_embeds(const config::ModelConfig& m) { return !golf::value_embed_layers(m).empty(); }
inline bool golf_value_embeds_project(const config::ModelConfig& m) {
  return golf_value_embeds(m) && static_cast<std::size_t>(golf::value_embed_dim(m)) != head_shape(m).kv_width();
}
inline bool golf_bigram_projects(const config::ModelConfig& m) { return golf_bigram(m) && m.bigram_dim != m.d_model; }

// U-Net split of golf over the layers it runs (run_layers): the first half are encoders, the rest
// decoders.
inline int golf_encoder_layers(int layers) { return layers / 2; }
inline int golf_skip_count(int layers) {
  const int encoders = golf_encoder_layers(layers);
  const int decoders = layers - encoders;
  return encoders < decoders ? encoders : decoders;
}

// The one declaration of golf's parameters, with parameter-golf's names: the tied embedding
// N(0, tied_embed_init_std) (untied: N(0, 1), nn.Embedding's default); per block c_q, c_k, c_v as
// nn.Linear, U(-1/sqrt(C), 1/sqrt(C)), proj zero, q_gain qk_gain_init, mlp.fc as nn.Linear, mlp.proj
// zero, attn_scale and mlp_scale 1, resid_mix rows (1, 0); skip_weights 1; an untied head zero.
// c_q, c_k and c_v lie back to back: the model reads them as one (C + 2 KV D, C) matrix.
template <class Tensors, class Declare>
void declare_golf(const config::ModelConfig& m, Tensors& t, Declare&& declare) {
  const std::size_t c = m.d_model, v = m.vocab_size, h = m.n_head;
  const std::size_t kv_dim = head_shape(m).kv_width(), hidden = c * m.mlp_mult;
  const double linear_bound = 1.0 / std::sqrt(static_cast<double>(c));  // every Linear here reads C features
  declare(t.tok_emb, TensorSpec{"tok_emb.weight", {v, c}, Role::embedding, Init::normal,
                                m.tie_embeddings ? m.tied_embed_init_std : 1.0});
  t.blocks.resize(static_cast<std::size_t>(m.n_layer));
  for (int i = 0; i < m.n_layer; ++i) {
    auto& b = t.blocks[static_cast<std::size_t>(i)];
    const std::string p = "blocks." + std::to_string(i) + ".";
    auto spec = [i](TensorSpec s) { return in_block(std::move(s), i); };
    declare(b.c_q, spec({p + "attn.c_q.weight", {c, c}, Role::attention, Init::uniform, linear_bound}));
    declare(b.c_k, spec({p + "attn.c_k.weight", {kv_dim, c}, Role::attention, Init::uniform, linear_bound}));
    declare(b.c_v, spec({p + "attn.c_v.weight", {kv_dim, c}, Role::attention, Init::uniform, linear_bound}));
    declare(b.proj, spec({p + "attn.proj.weight", {c, c}, Role::attention, Init::zeros}));
    declare(b.q_gain, spec({p + "attn.q_gain", {h}, Role::control, Init::constant, m.qk_gain_init}));
    declare(b.fc, spec({p + "mlp.fc.weight", {hidden, c}, Role::mlp, Init::uniform, linear_bound}));
    declare(b.mlp_proj, spec({p + "mlp.proj.weight", {c, hidden}, Role::mlp, Init::zeros}));
    declare(b.attn_scale, spec({p + "attn_scale", {c}, Role::control, Init::constant, 1.0}));
    declare(b.mlp_scale, spec({p + "mlp_scale", {c}, Role::control, Init::constant, 1.0}));
    declare(b.resid_mix, spec({p + "resid_mix", {2, c}, Role::control, Init::first_row, 1.0}));
    // The attention output gate as the records declare it: from zero (every gate 1), a control.
    const int gate_width = golf::attn_gate_width(m);
    if (gate_width > 0) {
      declare(b.attn_gate, spec({p + "attn.attn_gate_proj.weight", {h, static_cast<std::size_t>(gate_width)},
                                 Role::control, Init::zeros}));
    }
  }
  const int skips = golf_skip_count(run_layers(m));
  if (skips > 0) {
    declare(t.skip_weights, TensorSpec{"skip_weights", {static_cast<std::size_t>(skips), c}, Role::control,
                                       Init::constant, 1.0});
  }
  if (!m.tie_embeddings) declare(t.lm_head, TensorSpec{"lm_head.weight", {v, c}, Role::head, Init::zeros});
  if (m.smear_gate) declare(t.smear_gate, TensorSpec{"smear_gate", {c}, Role::control, Init::zeros});
  // BigramHash as the records declare it: the table from zero with the embedding's rate; the
  // projection as an nn.Linear, trained by the matrices' optimizer; the scale from 0.05.
  if (golf_bigram(m)) {
    const std::size_t buckets = m.bigram_buckets, dim = m.bigram_dim;
    declare(t.bigram_embed, TensorSpec{"bigram.embed.weight", {buckets, dim}, Role::embedding, Init::zeros});
    if (golf_bigram_projects(m)) {
      declare(t.bigram_proj, TensorSpec{"bigram.proj.weight", {c, dim}, Role::projection, Init::uniform,
                                        1.0 / std::sqrt(static_cast<double>(dim))});
    }
    declare(t.bigram_scale, TensorSpec{"bigram.scale", {1}, Role::control, Init::constant, 0.05});
  }
  // Value embeddings as the record declares them: the table N(0, 0.01) with the embedding's rate;
  // the projection from zero, a matrix (as BigramHash's; the record trains both with the scalars'
  // Adam); the shared scale from 0.1 and each layer's from 1.
  const std::vector<int> ve_layers = golf::value_embed_layers(m);
  if (!ve_layers.empty()) {
    const std::size_t dim = golf::value_embed_dim(m);
    declare(t.ve_embed, TensorSpec{"ve_shared.embed.weight", {v, dim}, Role::embedding, Init::normal, 0.01});
    if (golf_value_embeds_project(m)) {
      declare(t.ve_proj, TensorSpec{"ve_shared.proj.weight", {kv_dim, dim}, Role::projection, Init::zeros});
    }
    declare(t.ve_scale, TensorSpec{"ve_shared.scale", {1}, Role::control, Init::constant, 0.1});
    t.ve_layer_scales.resize(ve_layers.size());
    for (std::size_t j = 0; j < ve_layers.size(); ++j) {
      declare(t.ve_layer_scales[j],
              TensorSpec{"ve_layer_scales." + std::to_string(j), {1}, Role::control, Init::constant, 1.0});
    }
  }
}

// golf's activations and workspaces, kept from the forward for the backward or shared scratch.
template <class T, class A>
struct GolfActivations {
  struct Kept {
    Buffer<A> x_out;  // the block's output: the next block's input, a skip's source
  };
  // What a block's backward reads, its own or (rebuilt blocks, model/recompute.hpp) shared. x_in
  // only where a user is a decoder block that adds a skip; o_exclusive (XSA's output) only where a
  // user runs XSA; o_gated (the output gate's, which the projection then reads) with the gate.
  struct Working {
    Buffer<A> x_in, x_mix, h_attn, qkv, q_final, k_final, o, o_exclusive, o_gated, attn_out, x_attn, h_mlp, fc, act,
        mlp_out;
    Buffer<T> rstd_attn, q_rstd, k_rstd, rstd_mlp;
  };
  BlockActivations<Kept, Working> blocks;
  Buffer<A> x0, final;
  Buffer<A> x_embed;  // with model.smear_gate: the embedding's RMSNorm, which SmearGate turns into x0
  // With model.bigram_buckets: the rows each position reads, the rows read, their projection (where
  // there is one) and the sum the RMSNorm reads; the projection's input gradient, and the scale's
  // column sums.
  Buffer<int> bigram_rows;
  Buffer<A> bigram_read, bigram_projected, embed_sum, d_bigram_read;
  Buffer<T> bigram_scale_columns;
  // With model.value_embed_layers: the rows read, their projection (where there is one), the shared
  // base e; e's gradient (summed over the listed layers), a layer's share of it, the projection's
  // input gradient, and the scalars' column sums.
  Buffer<A> ve_read, ve_projected, ve_base, d_ve_base, d_ve_layer, d_ve_read;
  Buffer<T> ve_columns;
  Buffer<T> rstd0, rstd_final;
  // Backward scratch, shared by all layers, and the gradients the U-Net skips carry.
  Buffer<A> dx, dx0, d_branch, d_hidden, d_o, d_qf, d_kf, d_qkv;
  Buffer<A> d_xsa_v;   // with model.xsa_last_n: XSA's share of v's gradient
  Buffer<A> d_gate_h;  // with model.attn_gate_width: the gate's share of the first features of h's
  std::vector<Buffer<A>> d_skips;
  Buffer<T> gain_rows, partials;
};

// Whether golf's layer l is a decoder that adds an encoder's output through a U-Net skip.
inline bool golf_adds_skip(const config::ModelConfig& m, int l) {
  const int decoder = l - golf_encoder_layers(run_layers(m));
  return decoder >= 0 && decoder < golf_skip_count(run_layers(m));
}

// The one declaration of golf's activations: per token of the micro-batch, or fixed.
template <class T, class A, class Declare>
void declare_golf_activations(const config::ModelConfig& m, std::size_t max_tokens, GolfActivations<T, A>& a,
                              Declare&& declare) {
  const HeadShape shape = head_shape(m);
  const std::size_t c = m.d_model, heads = shape.heads, kv_heads = shape.kv_heads;
  const std::size_t kvd = shape.kv_width(), f = c * m.mlp_mult, w = shape.qkv_width();
  const int skips = golf_skip_count(run_layers(m));
  using Acts = GolfActivations<T, A>;
  a.blocks.declare(
      m, [&](typename Acts::Kept& k) { declare(k.x_out, ActivationSpec{"x_out", c}); },
      [&](typename Acts::Working& L, const std::vector<int>& users) {
        bool skip = false, exclusive = false;
        for (int l : users) {
          skip = skip || golf_adds_skip(m, l);
          exclusive = exclusive || golf::exclusive_attention(m, l);
        }
        if (skip) declare(L.x_in, ActivationSpec{"x_in", c});
        declare(L.x_mix, ActivationSpec{"x_mix", c});
        declare(L.h_attn, ActivationSpec{"h_attn", c});
        declare(L.rstd_attn, ActivationSpec{"rstd_attn", 1});
        declare(L.qkv, ActivationSpec{"qkv", w});
        declare(L.q_final, ActivationSpec{"q_final", c});
        declare(L.k_final, ActivationSpec{"k_final", kvd});
        declare(L.q_rstd, ActivationSpec{"q_rstd", heads});
        declare(L.k_rstd, ActivationSpec{"k_rstd", kv_heads});
        declare(L.o, ActivationSpec{"o", c});
        if (exclusive) declare(L.o_exclusive, ActivationSpec{"o_exclusive", c});
        if (golf::attn_gate_width(m) > 0) declare(L.o_gated, ActivationSpec{"o_gated", c});
        declare(L.attn_out, ActivationSpec{"attn_out", c});
        declare(L.x_attn, ActivationSpec{"x_attn", c});
        declare(L.h_mlp, ActivationSpec{"h_mlp", c});
        declare(L.rstd_mlp, ActivationSpec{"rstd_mlp", 1});
        declare(L.fc, ActivationSpec{"fc", f});
        declare(L.act, ActivationSpec{"act", f});
        declare(L.mlp_out, ActivationSpec{"mlp_out", c});
      });
  declare(a.x0, ActivationSpec{"x0", c});
  if (m.smear_gate) declare(a.x_embed, ActivationSpec{"x_embed", c});
  if (golf_bigram(m)) {
    const std::size_t dim = m.bigram_dim;
    declare(a.bigram_rows, ActivationSpec{"bigram_rows", 1});
    declare(a.bigram_read, ActivationSpec{"bigram_read", dim});
    if (golf_bigram_projects(m)) {
      declare(a.bigram_projected, ActivationSpec{"bigram_projected", c});
      declare(a.d_bigram_read, ActivationSpec{"backward_bigram", dim});
    }
    declare(a.embed_sum, ActivationSpec{"embed_sum", c});
    declare(a.bigram_scale_columns, ActivationSpec::elements("bigram_scale_columns", c));
  }
  if (golf_value_embeds(m)) {
    const std::size_t dim = golf::value_embed_dim(m);
    declare(a.ve_read, ActivationSpec{"ve_read", dim});
    if (golf_value_embeds_project(m)) {
      declare(a.ve_projected, ActivationSpec{"ve_projected", kvd});
      declare(a.d_ve_read, ActivationSpec{"backward_ve_read", dim});
    }
    declare(a.ve_base, ActivationSpec{"ve_base", kvd});
    declare(a.d_ve_base, ActivationSpec{"backward_ve_base", kvd});
    declare(a.d_ve_layer, ActivationSpec{"backward_ve_layer", kvd});
    declare(a.ve_columns, ActivationSpec::elements("ve_scale_columns", kvd));
  }
  declare(a.rstd0, ActivationSpec{"rstd0", 1});
  declare(a.final, ActivationSpec{"final", c});
  declare(a.rstd_final, ActivationSpec{"rstd_final", 1});
  for (Buffer<A>* b : {&a.dx, &a.dx0, &a.d_branch, &a.d_o, &a.d_qf}) declare(*b, ActivationSpec{"backward", c});
  declare(a.d_kf, ActivationSpec{"backward_kv", kvd});
  if (golf::any_exclusive_attention(m)) declare(a.d_xsa_v, ActivationSpec{"backward_xsa_v", kvd});
  if (golf::attn_gate_width(m) > 0) {
    declare(a.d_gate_h, ActivationSpec{"backward_gate_h", static_cast<std::size_t>(golf::attn_gate_width(m))});
  }
  declare(a.d_hidden, ActivationSpec{"backward_hidden", f});
  declare(a.d_qkv, ActivationSpec{"backward_qkv", w});
  a.d_skips.resize(static_cast<std::size_t>(skips));
  for (auto& b : a.d_skips) declare(b, ActivationSpec{"d_skip", c});
  declare(a.gain_rows, ActivationSpec{"gain_rows", heads});
  declare(a.partials, ActivationSpec::elements("column_partials", ops::ColumnSums<T, 2>::workspace(max_tokens, std::max(c, heads))));
}

// T: parameters, gradients and statistics (float, or double for the finite-difference tests);
// A: activations (T, or bf16).
template <class T, class A = T>
class GolfModel final : public ModelBase<T, A, GolfTensors> {
  using Base = ModelBase<T, A, GolfTensors>;

 public:
  // Activations are sized for micro-batches of up to max_batch sequences of up to max_seq tokens.
  GolfModel(const config::ModelConfig& config, int max_batch, int max_seq);

 protected:
  void embedding_forward(const ExecSpace& exec) override;
  void block_forward(const ExecSpace& exec, int l) override;
  Matrix<A> final_forward(const ExecSpace& exec) override;
  Matrix<A> final_input() const override;
  void final_backward(const ExecSpace& exec, const GradientsReady& ready) override;
  void block_backward(const ExecSpace& exec, int l, const GradientsReady& ready) override;
  void embedding_backward(const ExecSpace& exec, const GradientsReady& ready) override;
  const Matrix<A>& head_weights() const override { return this->config_.tie_embeddings ? this->wa_.tok_emb : this->wa_.lm_head; }
  const Matrix<T>& head_grad() const override { return this->config_.tie_embeddings ? this->g_.tok_emb : this->g_.lm_head; }

 private:
  Matrix<A> block_input(int l) const;  // x0 for layer 0, else layer l - 1's output
  // Whether block b runs its attention and MLP side by side (model.parallel_residual_start counts
  // blocks, as the record does: both layers of a repeated block run alike).
  bool runs_parallel(int b) const {
    return this->config_.parallel_residual_start >= 0 && b >= this->config_.parallel_residual_start;
  }
  Workspace<T> partials() const { return Workspace<T>(acts_.partials); }
  bool value_embeds() const { return !this->w_.ve_layer_scales.empty(); }  // model.value_embed_layers lists any
  // The v columns of a QKV matrix (or of its gradient).
  auto value_columns(const Matrix<A>& qkv) const {
    return Kokkos::subview(qkv, Kokkos::ALL(), std::make_pair(this->heads_.v_column(), this->heads_.qkv_width()));
  }

  int hidden_, encoders_, skips_;
  int gate_width_;                 // model.attn_gate_width: 0 without the output gate
  std::vector<double> ln_scale_;   // per layer as run: its norms' factor (model.ln_scale), else 1
  std::vector<char> exclusive_;    // per layer as run: whether it runs XSA (model.xsa_last_n)
  std::vector<layers::AttentionProjections<T, A>> attn_;           // per block: q, k, v (stacked, or three), proj
  std::vector<layers::Mlp<T, A, layers::ReluSquared<T>>> mlp_;   // per block: fc, relu^2, proj
  layers::TableEmbedding<T, A> bigram_;                          // with model.bigram_buckets
  layers::TableEmbedding<T, A> value_embed_;                     // with model.value_embed_layers
  std::vector<int> value_embed_slot_;                            // per layer: its value embedding's j, or -1
  layers::RotaryTables<T> rotary_;
  GolfActivations<T, A> acts_;
};

}  // namespace kgpt::model
