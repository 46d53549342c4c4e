#pragma once
// Attention through cuDNN's fused flash attention (CUDA builds with cuDNN and cudnn-frontend):
// forward and backward on the tensor cores, bf16 q, k, v, o and gradients read and written in place
// through the strides of the token-major heads (no reordering kernel), causal, grouped-query
// attention, the softmax statistics in fp32 (one (B, H, T) array per layer, kept for the backward).
// The backward is cuDNN's deterministic algorithm unless model.attention_deterministic is false.
// cudnn-frontend builds one graph per shape and set of strides, the first time it is met (the first
// step, and an evaluation's last, shorter batch), with the workspace it needs.

#include <memory>
#include <string>
#include <vector>

#include "core/bf16.hpp"
#include "model/attention/attention.hpp"
#include "model/storage.hpp"

namespace kgpt::model {

class CudnnAttention final : public Attention<bf16> {
 public:
  CudnnAttention(const AttentionShape& shape, const std::string& prefix);
  ~CudnnAttention() override;
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  const char* name() const override { return "cudnn"; }
  void forward(const ExecSpace& exec, int layer, const Heads<const bf16>& q, const Heads<const bf16>& k,
               const Heads<const bf16>& v, const Heads<bf16>& o) override;
  void backward(const ExecSpace& exec, int layer, const Heads<const bf16>& q, const Heads<const bf16>& k,
                const Heads<const bf16>& v, const Heads<const bf16>& o, const Heads<const bf16>& d_o,
                const Heads<bf16>& dq, const Heads<bf16>& dk, const Heads<bf16>& dv) override;
  // The workspace the graphs built so far asked cuDNN for (the largest of them), in bytes.
  std::size_t workspace_bytes() const;

 private:
  struct Graphs;  // cudnn-frontend's graphs, by shape and strides
  std::unique_ptr<Graphs> graphs_;
  std::vector<Buffer<float>> stats_;  // (B, H, T) per layer: the softmax statistics
  bool deterministic_;                // the deterministic backward (model.attention_deterministic)
};

}  // namespace kgpt::model
