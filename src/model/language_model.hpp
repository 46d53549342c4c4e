#pragma once
// What training, evaluation and sampling need of a model, whatever its family: its parameters, the
// mean loss of a micro-batch, the backward of that loss, and the logits. make_model builds the
// deck's family, as the family registry (model/family.hpp) says.

#include <memory>

#include "config/config.hpp"
#include "core/views.hpp"
#include "model/parameters.hpp"

namespace kgpt::model {

template <class T>
class LanguageModel {
 public:
  LanguageModel() : loss_("kgpt::model::loss") {}
  virtual ~LanguageModel() = default;

  virtual Parameters<T>& parameters() = 0;
  virtual const Parameters<T>& parameters() const = 0;

  // Adds the mean cross-entropy of the micro-batch to loss_sum, a device scalar, without waiting for
  // the device, and keeps what the backward needs. inputs and targets are (B, T) token ids, B and T
  // at most the capacity the model was built for.
  virtual void forward(const ExecSpace& exec, const ConstTokenMatrix& inputs, const ConstTokenMatrix& targets,
                       const Kokkos::View<double, MemSpace>& loss_sum) = 0;
  // The same, returning the micro-batch's mean loss (this waits for the device).
  double forward(const ExecSpace& exec, const ConstTokenMatrix& inputs, const ConstTokenMatrix& targets) {
    Kokkos::deep_copy(exec, loss_, 0.0);
    forward(exec, inputs, targets, loss_);
    double loss = 0;
    Kokkos::deep_copy(exec, loss, loss_);
    exec.fence();
    return loss;
  }
  // Adds grad_scale * d(mean loss)/d(parameters) of the last forward to the gradient buffer.
  // `ready`, when given, hears each span of the gradient buffer as soon as its gradients are final.
  virtual void backward(const ExecSpace& exec, T grad_scale, const GradientsReady& ready) = 0;
  void backward(const ExecSpace& exec, T grad_scale) { backward(exec, grad_scale, GradientsReady{}); }
  // A bf16 model reads its weights through a rounded copy of the fp32 values, made by a pass at the
  // start of every forward. A caller that knows the values have not changed since the last forward
  // (the later micro-steps of an optimizer step, the later batches of an evaluation) calls this
  // first, and the next forward, that one only, reads the copy it has.
  void reuse_weight_shadow() { reuse_shadow_ = true; }
  // The cross-entropy of each of the B*T positions of the last forward, in T (the model's own array:
  // valid until the next forward).
  virtual ConstVector<T> token_losses() const = 0;
  // Logits (B*T, V) of the last forward, softcapped where the model caps them, in T (a new array; not
  // available after a backward).
  virtual Matrix<T> logits() const = 0;
  // The attention implementation in use ("gemm", "fused", "cudnn"), for logs and benchmarks.
  virtual const char* attention_name() const = 0;

 protected:
  // Whether this forward may read the weight copy as it is; true once after reuse_weight_shadow.
  bool take_shadow_reuse() {
    const bool reuse = reuse_shadow_;
    reuse_shadow_ = false;
    return reuse;
  }

 private:
  Kokkos::View<double, MemSpace> loss_;
  bool reuse_shadow_ = false;
};

// The deck's model family, with activations for micro-batches of up to max_batch sequences of up
// to max_seq tokens (gpt2 also learns max_seq positions), stored in the type train.precision names
// (float, or bf16 for T = float). Its weights are not initialised: call initialize, or load them.
template <class T>
std::unique_ptr<LanguageModel<T>> make_model(const config::ModelConfig& config, int max_batch, int max_seq);

}  // namespace kgpt::model
