#pragma once
// What every family's model shares, written once: the parameters and their typed views (values,
// gradients, and the bf16 shadow the products read), the staged micro-batch, the output head (the
// logits, the softcap, the cross-entropy and their backward, tied or untied), the attention, the
// embedding gradient's workspace, and the loop over blocks. The loop runs the layers forward (each
// a block; under depth recurrence some blocks twice, model/block_sequence.hpp), and backward in
// reverse, with recompute (a rebuilt block runs its forward again just before its
// backward; model/recompute.hpp) and the spans reported to gradient averaging as each block's
// gradients are final. A family derives from ModelBase with its tensor struct and supplies the
// pieces: the embedding (staged tokens to block 0's input), a block's forward and backward, and
// the final stage (the last block's output to the head's input), each forward and backward.
//
//   Tensors<X>: the family's struct of Views (its parameters), declared by `declare(config, max_seq,
//   tensors, visitor)`; T: parameters, gradients and statistics (float, or double in the finite-
//   difference tests); A: activations (T, or bf16).

#include <algorithm>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "config/config.hpp"
#include "core/backend.hpp"
#include "core/bf16.hpp"
#include "core/views.hpp"
#include "model/attention/attention.hpp"
#include "model/block_sequence.hpp"
#include "model/gemm/gemm.hpp"
#include "model/layers/attention.hpp"
#include "model/layers/mlp.hpp"
#include "model/layers/projection.hpp"
#include "model/language_model.hpp"
#include "model/ops/cross_entropy.hpp"
#include "model/ops/elementwise.hpp"
#include "model/ops/embedding.hpp"
#include "model/ops/fp8.hpp"
#include "model/ops/linear.hpp"
#include "model/parameters.hpp"
#include "model/recompute.hpp"
#include "model/storage.hpp"

namespace kgpt::model {

// The logits and the loss of a micro-batch, with what their backward needs.
template <class T, class A>
class OutputHead {
 public:
  OutputHead() = default;
  // padded: the logits and dx products run with the vocabulary padded to row_stride (padded_products).
  OutputHead(const std::string& prefix, std::size_t max_rows, std::size_t vocab, std::size_t width,
             bool padded = backend::Traits::padded_head_products)
      : logits_(prefix + "logits", max_rows * row_stride(vocab)),
        lse_(prefix + "lse", max_rows),
        losses_(prefix + "losses", max_rows),
        scratch_(prefix + "loss_scratch"),
        vocab_(vocab) {
    if (padded_products(vocab, padded)) {
      padded_weights_ = Matrix<A>(prefix + "head_weights_padded", row_stride(vocab), width);
      padded_grad_ = Matrix<T>(prefix + "head_grad_padded", row_stride(vocab), width);
    }
  }
  // What the constructor allocates.
  static std::size_t bytes(std::size_t max_rows, std::size_t vocab, std::size_t width,
                           bool padded = backend::Traits::padded_head_products) {
    return max_rows * row_stride(vocab) * sizeof(A) + 2 * max_rows * sizeof(T) + sizeof(double) +
           (padded_products(vocab, padded) ? row_stride(vocab) * width * (sizeof(A) + sizeof(T)) : 0);
  }
  // Elements from one row of logits to the next: the vocabulary rounded up to 64. The three
  // products of the head read or write the logits, and cuBLASLt's Hopper kernels need every row of
  // an operand to start on 16 bytes: with GPT-2's 50,257 columns a third of gpt2-124M's FLOPs
  // would go to its kernels for 2-byte-aligned rows. The model and its vocabulary stay as they
  // are; the softmax and the loss read the first `vocab` columns only.
  static constexpr std::size_t row_stride(std::size_t vocab) { return (vocab + 63) / 64 * 64; }
  // Whether the head's three products run row_stride wide: cuBLASLt picks no fast kernel for a side
  // of 50,257 even with aligned rows (95 and 131 TFLOP/s against 711 and 838 at 50,304 on an H100;
  // dW's 511 on an H200). The weights are copied, before each forward, into a matrix of row_stride
  // rows whose rows past the vocabulary stay zero: the padded logits come out exactly zero, so dx's
  // sum over them adds nothing and dW's padded rows are zero. dW is written row_stride wide into a
  // scratch of its own, whose vocabulary rows are then added to the gradient.
  static constexpr bool padded_products(std::size_t vocab, bool padded) { return padded && row_stride(vocab) != vocab; }

  // Adds the mean loss of x (N, C) through the head's weights w (V, C) to loss_sum.
  template <class W>
  void forward(const ExecSpace& exec, const Matrix<A>& x, const W& w, const ConstTokenMatrix& targets, T softcap,
               const Kokkos::View<double, MemSpace>& loss_sum) {
    const std::size_t n = x.extent(0);
    rows_ = n;
    if (padded_weights_.extent(0) == 0) {
      ops::cross_entropy_forward<T>(exec, x, w, targets, softcap, logits(n), lse_.vec(n), losses_.vec(n), loss_sum,
                                    scratch_);
      return;
    }
    Kokkos::deep_copy(exec, Kokkos::subview(padded_weights_, std::make_pair(std::size_t(0), vocab_), Kokkos::ALL()), w);
    gemm(exec, Op::none, Op::transpose, T(1), x, padded_weights_, T(0), padded_logits(n));
    ops::cross_entropy_loss<T>(exec, targets, softcap, logits(n), lse_.vec(n), losses_.vec(n), loss_sum, scratch_);
  }
  // The gradient of grad_scale * mean loss: dW += into dw, and dx, the gradient reaching x.
  template <class W, class DW>
  void backward(const ExecSpace& exec, const Matrix<A>& x, const W& w, const DW& dw, const ConstTokenMatrix& targets,
                T softcap, T grad_scale, const Matrix<A>& dx) {
    const std::size_t n = x.extent(0);
    if (padded_weights_.extent(0) == 0) {
      ops::cross_entropy_backward<T>(exec, x, w, targets, softcap, logits(n), ConstVector<T>(lse_.vec(n)), grad_scale, dx,
                                     dw);
      return;
    }
    ops::cross_entropy_logit_gradients<T>(exec, targets, softcap, logits(n), ConstVector<T>(lse_.vec(n)), grad_scale,
                                          logits(n));
    using ConstZ = Kokkos::View<const A**, Layout, MemSpace>;
    gemm(exec, Op::none, Op::none, T(1), ConstZ(padded_logits(n)), ConstMatrix<A>(padded_weights_), T(0), dx);
    gemm(exec, Op::transpose, Op::none, T(1), ConstZ(padded_logits(n)), x, T(0), padded_grad_);
    ops::add_into<T>(exec, Kokkos::subview(padded_grad_, std::make_pair(std::size_t(0), vocab_), Kokkos::ALL()), dw);
  }
  // The loss of each row of the last forward.
  ConstVector<T> token_losses() const { return ConstVector<T>(losses_.vec(rows_)); }
  // The capped logits of the last forward, in T (the stored ones are overwritten by the backward).
  Matrix<T> capped_logits(const ExecSpace& exec, T softcap) const {
    return ops::capped_logits<T>(exec, logits(rows_), softcap);
  }

 private:
  Matrix<A> padded_logits(std::size_t n) const { return logits_.mat(n, row_stride(vocab_)); }
  Matrix<A> logits(std::size_t n) const {
    return Kokkos::subview(padded_logits(n), Kokkos::ALL(), std::make_pair(std::size_t(0), vocab_));
  }
  Buffer<A> logits_;
  Buffer<T> lse_, losses_;
  Kokkos::View<double, MemSpace> scratch_;
  Matrix<A> padded_weights_;  // (row_stride, C) when the products run padded, else empty
  Matrix<T> padded_grad_;     // dW of the padded product (row_stride, C), the same way
  std::size_t vocab_ = 0, rows_ = 0;
};

// The largest operands of any linear layer of kgpt's families, for the FP8 operands' scratch: an
// input of C or F features; an output of a stacked q, k and v (at most 3 C) or a stacked gate and
// up (2 F); a weight of such an output by C.
struct Fp8Sizes {
  std::size_t input, output, weight;
};
inline Fp8Sizes fp8_sizes(const config::ModelConfig& m) {
  const auto c = static_cast<std::size_t>(m.d_model), f = c * static_cast<std::size_t>(m.mlp_mult);
  const std::size_t output = std::max(3 * c, 2 * f);
  return {std::max(c, f), output, output * c};
}

// The largest table whose gradient the embedding's backward sorts rows for: the token embedding,
// or golf's BigramHash table (model.bigram_buckets rows of model.bigram_dim), one after the other.
struct SortedTables {
  std::size_t rows, width;
};
inline SortedTables sorted_tables(const config::ModelConfig& m) {
  if (m.bigram_buckets == 0 || !config::family_reads(m, "model.bigram_buckets")) {
    return {static_cast<std::size_t>(m.vocab_size), static_cast<std::size_t>(m.d_model)};
  }
  return {static_cast<std::size_t>(std::max(m.vocab_size, m.bigram_buckets)),
          static_cast<std::size_t>(std::max(m.d_model, m.bigram_dim))};
}

template <class T, class A, template <class> class Tensors>
class ModelBase : public LanguageModel<T> {
 public:
  Parameters<T>& parameters() override { return params_; }
  const Parameters<T>& parameters() const override { return params_; }
  ConstVector<T> token_losses() const override { return head_.token_losses(); }
  Matrix<T> logits() const override { return head_.capped_logits(ExecSpace(), T(config_.logit_softcap)); }
  const char* attention_name() const override { return attention_->name(); }

  using LanguageModel<T>::forward;
  void forward(const ExecSpace& exec, const ConstTokenMatrix& inputs, const ConstTokenMatrix& targets,
               const Kokkos::View<double, MemSpace>& loss_sum) override {
    stage_.stage(exec, inputs, targets, who_.c_str());
    batch_ = stage_.batch();
    seq_ = stage_.seq();
    rows_ = static_cast<std::size_t>(batch_) * seq_;
    const bool reuse_shadow = this->take_shadow_reuse();
    if constexpr (!std::is_same<A, T>::value) {
      if (!reuse_shadow) refresh_shadow(exec, params_.values(), shadow_);
    }
    embedding_forward(exec);
    for (int l = 0; l < layers(); ++l) block_forward(exec, l);
    const Matrix<A> final = final_forward(exec);
    head_.forward(exec, final, head_weights(), stage_.targets(), T(config_.logit_softcap), loss_sum);
  }

  using LanguageModel<T>::backward;
  void backward(const ExecSpace& exec, T grad_scale, const GradientsReady& ready) override {
    head_.backward(exec, final_input(), head_weights(), head_grad(), stage_.targets(), T(config_.logit_softcap), grad_scale,
                   d_final());
    if (!config_.tie_embeddings) report(ready, head_grad());
    final_backward(exec, ready);
    for (int l = layers() - 1; l >= 0; --l) {
      // The rebuilt block writes its output again too: the same kernels on the same input give the
      // same values, and its readers (the blocks above, the final stage) are done with it.
      if (recompute_.rebuilt(l)) block_forward(exec, l);
      block_backward(exec, l, ready);
      // A block that runs in two layers has its whole gradient once the backward passes the first.
      if (first_layer_[static_cast<std::size_t>(block_of(l))] == l) report_block(ready, block_of(l));
    }
    embedding_backward(exec, ready);
  }

 protected:
  template <class Declare>
  ModelBase(const config::ModelConfig& config, int max_batch, int max_seq, ParameterLayout layout, const Declare& declare,
            const std::string& family)
      : config_(config),
        prefix_("kgpt::" + family + "::"),
        who_(family + " model"),
        max_batch_(max_batch),
        max_seq_(max_seq),
        max_rows_(static_cast<std::size_t>(max_batch) * max_seq),
        heads_(head_shape(config)),
        params_(std::move(layout)),
        blocks_(block_sequence(config)),
        first_layer_(static_cast<std::size_t>(config.n_layer), -1),
        recompute_(config),
        stage_(max_batch, max_seq),
        head_(prefix_, max_rows_, static_cast<std::size_t>(config.vocab_size), static_cast<std::size_t>(config.d_model)),
        d_final_(prefix_ + "d_final", max_rows_ * static_cast<std::size_t>(config.d_model)) {
    for (int l = layers() - 1; l >= 0; --l) first_layer_[static_cast<std::size_t>(block_of(l))] = l;
    declare(w_, ViewBinder<T>(params_.layout(), params_.values()));
    declare(g_, ViewBinder<T>(params_.layout(), params_.grads()));
    if constexpr (std::is_same<A, T>::value) {
      declare(wa_, ViewBinder<A>(params_.layout(), params_.values()));
    } else {
      shadow_ = Vector<A>(prefix_ + "weights_shadow", params_.layout().buffer_size());
      declare(wa_, ViewBinder<A>(params_.layout(), shadow_));
    }
    if (config.fp8 != config::Fp8::none) {
      const Fp8Sizes fp8 = fp8_sizes(config);
      fp8_ = std::make_unique<ops::Fp8Operands<A>>(prefix_, max_rows_, fp8.input, fp8.output, fp8.weight);
    }
    attention_ = make_attention<A>(resolve_attention(config), attention_shape(config, max_batch, max_seq), prefix_);
    // The table gradients' workspace, where this backend sorts the rows by token.
    if (backend::Traits::sorted_embedding_gradient) {
      const SortedTables tables = sorted_tables(config);
      sort_space_ = ops::EmbeddingSortSpace<T>(max_rows_, tables.rows, tables.width);
    }
    prepare_gemm();
  }

  // The FP8 operands' scratch for a layer whose weight has this role (model.fp8, model::runs_fp8),
  // or none: what a family's Linear takes in with_fp8.
  const ops::Fp8Operands<A>* fp8_for(Role role) const {
    const bool on = config_.fp8 != config::Fp8::none && runs_fp8(role, config_.fp8 == config::Fp8::mlp);
    return on ? fp8_.get() : nullptr;
  }

  // Gives a family's linear layers their FP8 operands where model.fp8 asks for them, by the role of
  // the tensor each weight's gradient lies in (a stacked layer's: its first tensor's): one layer, a
  // projection's, an MLP's, or a vector of any of them.
  void use_fp8(ops::Linear<T, A>& layer) const {
    const auto offset = static_cast<std::size_t>(layer.grad.data() - params_.grads().data());
    layer.with_fp8(fp8_for(params_.layout().holding(offset).spec.role));
  }
  void use_fp8(layers::Projection<T, A>& projection) const {
    for (auto& layer : projection.pieces()) use_fp8(layer);
  }
  void use_fp8(layers::AttentionProjections<T, A>& attention) const {
    use_fp8(attention.qkv);
    use_fp8(attention.out);
  }
  template <class Activation>
  void use_fp8(layers::Mlp<T, A, Activation>& mlp) const {
    use_fp8(mlp.up());
    use_fp8(mlp.down());
  }
  template <class Layer>
  void use_fp8(std::vector<Layer>& layers) const {
    for (auto& layer : layers) use_fp8(layer);
  }

  // A layer's attention heads in a token-major activation of the micro-batch at hand, from column
  // `column` on (attention/heads.hpp): query heads, and key or value heads.
  template <class View>
  auto query_heads(const View& m, std::size_t column = 0) const {
    return heads_of(m, static_cast<int>(column), batch_, heads_.heads, heads_.dim);
  }
  template <class View>
  auto kv_heads(const View& m, std::size_t column = 0) const {
    return heads_of(m, static_cast<int>(column), batch_, heads_.kv_heads, heads_.dim);
  }
  // The q, k and v heads an attention reads (or their gradients): all three in one QKV matrix, or
  // q and k in matrices of their own (rotated copies) and v in the QKV matrix's columns.
  struct QkvHeads {
    Heads<A> q, k, v;
  };
  QkvHeads qkv_heads(const Matrix<A>& qkv) const {
    return {query_heads(qkv), kv_heads(qkv, heads_.k_column()), kv_heads(qkv, heads_.v_column())};
  }
  QkvHeads qkv_heads(const Matrix<A>& q, const Matrix<A>& k, const Matrix<A>& qkv) const {
    return {query_heads(q), kv_heads(k), kv_heads(qkv, heads_.v_column())};
  }
  // Layer l's attention, o = Attn(q, k, v), and its backward (the gradients of q, k and v into d).
  void attend(const ExecSpace& exec, int l, const QkvHeads& in, const Heads<A>& o) const {
    attention_->forward(exec, attention_layer(config_, l), in.q, in.k, in.v, o);
  }
  void attend_backward(const ExecSpace& exec, int l, const QkvHeads& in, const Heads<A>& o, const Heads<A>& d_o,
                       const QkvHeads& d) const {
    attention_->backward(exec, attention_layer(config_, l), in.q, in.k, in.v, o, d_o, d.q, d.k, d.v);
  }

  // The layers the loop runs, and the block whose parameters layer l runs (model/block_sequence.hpp):
  // a family's activations are per layer, its parameters per block.
  int layers() const { return static_cast<int>(blocks_.size()); }
  int block_of(int layer) const { return blocks_[static_cast<std::size_t>(layer)]; }

  // The family's pieces, which the loop above runs in order. Each reads and writes the family's own
  // activations, with the shapes of the staged micro-batch (rows(), batch_, seq_).
  // The staged tokens to block 0's input.
  virtual void embedding_forward(const ExecSpace& exec) = 0;
  // Layer l (block block_of(l)): its input to its output, keeping what its backward reads. Under
  // recompute the loop runs it again, unchanged, just before the layer's backward.
  virtual void block_forward(const ExecSpace& exec, int l) = 0;
  // The last block's output to the head's input (N, C), returned.
  virtual Matrix<A> final_forward(const ExecSpace& exec) = 0;
  // What final_forward returned, as it stands (the head's backward reads it).
  virtual Matrix<A> final_input() const = 0;
  // From d_final() to the gradient of the last block's output; d_final() is the family's scratch
  // from then on. Reports the gradients of the final stage's own parameters.
  virtual void final_backward(const ExecSpace& exec, const GradientsReady& ready) = 0;
  // Layer l: the gradient of its output to that of its input, and its parameters' gradients added
  // to its block's (the loop reports the block's span). Reports any tensor outside the blocks it
  // finishes.
  virtual void block_backward(const ExecSpace& exec, int l, const GradientsReady& ready) = 0;
  // The gradient of block 0's input to the embedding's gradients, reported.
  virtual void embedding_backward(const ExecSpace& exec, const GradientsReady& ready) = 0;
  // The matrix the logits are made with (the token embedding when tied, else the head), and its gradient.
  virtual const Matrix<A>& head_weights() const = 0;
  virtual const Matrix<T>& head_grad() const = 0;

  // The gradient reaching the head's input (N, C); after final_backward, the family's scratch.
  Matrix<A> d_final() const { return d_final_.mat(rows_, static_cast<std::size_t>(config_.d_model)); }

  // Tells gradient averaging that the gradients of a block (its index in the declaration), or of the
  // tensor whose gradient view this is, are final for this micro-step.
  void report_block(const GradientsReady& ready, int block) const {
    if (!ready) return;
    const BufferSpan span = params_.layout().block_span(block);
    ready(span.first, span.second);
  }
  template <class View>
  void report(const GradientsReady& ready, const View& gradient) const {
    if (!ready) return;
    const BufferSpan span = params_.layout().span_at(static_cast<std::size_t>(gradient.data() - params_.grads().data()));
    ready(span.first, span.second);
  }

  // Views of a buffer with the shapes of the micro-batch at hand.
  std::size_t rows() const { return rows_; }

  config::ModelConfig config_;
  std::string prefix_, who_;
  int max_batch_, max_seq_;
  std::size_t max_rows_;
  HeadShape heads_;  // the query and key/value heads every layer's attention has
  int batch_ = 0, seq_ = 0;
  std::size_t rows_ = 0;
  Parameters<T> params_;
  std::vector<int> blocks_;       // the block each layer runs
  std::vector<int> first_layer_;  // the first layer that runs each block
  Tensors<T> w_, g_;   // views into the values and the gradients
  Vector<A> shadow_;   // the values rounded to A, when A is not T
  Tensors<A> wa_;      // the weights the products read: the values, or their shadow
  RecomputePlan recompute_;
  TokenStage stage_;
  OutputHead<T, A> head_;
  Buffer<A> d_final_;  // (N, C): the gradient reaching the head's input
  std::unique_ptr<Attention<A>> attention_;
  ops::EmbeddingSortSpace<T> sort_space_;
  std::unique_ptr<ops::Fp8Operands<A>> fp8_;  // with model.fp8, else none
};

}  // namespace kgpt::model
