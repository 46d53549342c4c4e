#pragma once
// The golf family (parameter-golf's baseline): token embedding -> RMSNorm = x0; L blocks of
//   x = mix0*x + mix1*x0;  x += attn_scale * Attn(RMSNorm(x));  x += mlp_scale * MLP(RMSNorm(x))
// with GQA attention (RMSNorm and RoPE on q and k, per-head q_gain) and a relu^2 MLP; U-Net skips
// (the first L/2 block outputs are added back, scaled by skip_weights, before the last blocks, in
// reverse order); final RMSNorm; logits through the tied embedding, softcapped; cross-entropy.
// Forward keeps every activation the hand-written backward needs.

#include <memory>
#include <vector>

#include "config/config.hpp"
#include "core/views.hpp"
#include "model/causal_attention.hpp"
#include "model/parameters.hpp"
#include "model/workspace.hpp"

namespace kgpt::model {

template <class T>
class GolfModel {
 public:
  // Activations are sized for micro-batches of up to max_batch sequences of up to max_seq tokens.
  GolfModel(const config::ModelConfig& config, int max_batch, int max_seq);
  ~GolfModel();
  GolfModel(const GolfModel&) = delete;
  GolfModel& operator=(const GolfModel&) = delete;

  Parameters<T>& parameters() { return params_; }
  const Parameters<T>& parameters() const { return params_; }

  // Mean cross-entropy of the micro-batch; inputs and targets are (B, T) token ids.
  double forward(const ExecSpace& exec, const ConstTokenMatrix& inputs, const ConstTokenMatrix& targets);
  // Adds grad_scale * d(mean loss)/d(parameters) of the last forward to the gradient buffer.
  // `ready`, when given, hears each block's gradient span as soon as the block's backward is done.
  void backward(const ExecSpace& exec, T grad_scale, const GradientsReady& ready = {});
  // Softcapped logits (B*T, V) of the last forward; overwritten by backward.
  Matrix<T> logits() const { return logits_.mat(rows_, vocab_); }

 private:
  struct Layer;
  void block_forward(const ExecSpace& exec, int l);
  void block_backward(const ExecSpace& exec, int l, const Matrix<T>& dx);

  config::ModelConfig config_;
  int max_batch_, max_seq_, vocab_, width_, heads_, kv_heads_, head_dim_, hidden_, encoders_, skips_;
  int batch_ = 0, seq_ = 0, rows_ = 0;
  Parameters<T> params_;
  Matrix<T> rope_cos_, rope_sin_;
  TokenStage stage_;
  std::vector<Layer> layers_;
  Buffer<T> embedded_, x0_, rstd0_, final_, rstd_final_, logits_, lse_, losses_;
  // Backward scratch, shared by all layers.
  Buffer<T> dx_, dx_next_, dx0_, tmp_, d_mlp_out_, d_act_, d_fc_, d_attn_out_, d_o_flat_, d_o_, d_q_, d_q2_, d_k_,
      d_k2_, d_v_, d_q_lin_, d_k_lin_, d_v_lin_, d_h_, d_gain_slices_;
  CausalAttention<T> attention_;
  std::vector<Buffer<T>> d_skips_;
};

}  // namespace kgpt::model
