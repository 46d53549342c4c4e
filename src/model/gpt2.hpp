#pragma once
// The gpt2 family (nanoGPT / GPT-2): x = wte[tokens] + wpe[positions]; L blocks of
//   x += c_proj(Attn(c_attn(LN1(x))));  x += mlp.c_proj(GELU(mlp.c_fc(LN2(x))))
// with multi-head causal attention and biases on every linear; final LN; logits through the tied
// embedding (softcapped when model.logit_softcap > 0); cross-entropy.

#include <vector>

#include "config/config.hpp"
#include "core/views.hpp"
#include "model/causal_attention.hpp"
#include "model/parameters.hpp"
#include "model/workspace.hpp"

namespace kgpt::model {

template <class T>
class Gpt2Model {
 public:
  // max_seq is also the number of learned positions (wpe rows).
  Gpt2Model(const config::ModelConfig& config, int max_batch, int max_seq);
  ~Gpt2Model();
  Gpt2Model(const Gpt2Model&) = delete;
  Gpt2Model& operator=(const Gpt2Model&) = delete;

  Parameters<T>& parameters() { return params_; }
  const Parameters<T>& parameters() const { return params_; }
  double forward(const ExecSpace& exec, const ConstTokenMatrix& inputs, const ConstTokenMatrix& targets);
  // `ready`, when given, hears each block's gradient span as soon as the block's backward is done.
  void backward(const ExecSpace& exec, T grad_scale, const GradientsReady& ready = {});
  Matrix<T> logits() const { return logits_.mat(rows_, vocab_); }

 private:
  struct Layer;
  config::ModelConfig config_;
  int max_batch_, max_seq_, vocab_, width_, heads_, head_dim_;
  int batch_ = 0, seq_ = 0, rows_ = 0;
  Parameters<T> params_;
  TokenStage stage_;
  std::vector<Layer> layers_;
  Buffer<T> x_last_, final_, mean_final_, rstd_final_, logits_, lse_, losses_;
  Buffer<T> dx_, tmp_, d_big_, d_big2_, d_qkv_, d_q_, d_k_, d_v_, d_o_;
  CausalAttention<T> attention_;
};

}  // namespace kgpt::model
