#pragma once
// One optimizer step over every parameter tensor, by the group its declaration gives it
// (docs/design.md, "Optimizers"):
//   matrix:    Muon or AdamW (optim.matrix_optimizer; muon for golf, adamw for gpt2), matrix_lr
//   embedding: Adam(W), embed_lr;  head (untied): Adam(W), head_lr;  scalar: Adam, scalar_lr
// Decoupled weight decay (optim.weight_decay) acts on the matrices, embeddings and head, whatever
// their optimizer, never on vectors and scalars. Every learning rate is multiplied by the
// schedule's multiplier for the step. State (Adam moments, Muon momentum) lives in buffers with the
// parameter buffer's layout.

#include <string>
#include <utility>
#include <vector>

#include "config/config.hpp"
#include "core/views.hpp"
#include "model/parameters.hpp"
#include "optim/newton_schulz.hpp"

namespace kgpt::optim {

template <class T>
class Optimizer {
 public:
  Optimizer(const model::Parameters<T>& params, const config::Config& config);
  // `step` counts from 0.
  void step(const ExecSpace& exec, int step, double lr_multiplier);
  double group_lr(model::ParamGroup group) const;
  // The state a checkpoint must hold, by name, each a buffer with the parameter buffer's layout:
  // adam_m, adam_v, and with Muon muon_momentum.
  std::vector<std::pair<std::string, Vector<T>>> state_buffers() const;

 private:
  const model::Parameters<T>& params_;
  config::OptimConfig optim_;
  bool muon_;  // Muon for the matrices (else AdamW)
  model::GemmPrecision precision_;  // of Newton-Schulz's GEMMs: the model's
  Vector<T> m_, v_, momentum_, update_;
  NewtonSchulzWorkspace<T> work_;
};

// The global L2 norm of the gradient buffer; when max_norm > 0 and the norm exceeds it, the
// gradients are scaled down to max_norm. Returns the norm before clipping.
template <class T>
double clip_gradients(const ExecSpace& exec, const Vector<T>& grads, double max_norm);

}  // namespace kgpt::optim
