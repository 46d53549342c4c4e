#pragma once
// The MLP sublayer every family composes: an up projection (one layer, or gate and up side by side),
// an activation, and a down projection back to the model's width.
//   forward:  up = h W_up^T (+ b);  act = f(up);  out = act W_down^T (+ b) (+ residual)
//   backward: d_act = dy W_down, dW_down += dy^T act;  d_up = f'(up) d_act;  dh = d_up W_up (+=)
// The activation is the family's: a struct with forward(exec, up, act) and backward(exec, up, d_act,
// d_up) (d_up may be d_act's buffer), or GELU, which can ride in the products themselves
// (GeluActivation: ops/linear.hpp, model.gelu_epilogue).

#include <type_traits>
#include <utility>

#include "core/views.hpp"
#include "model/layers/projection.hpp"
#include "model/ops/activations.hpp"
#include "model/ops/linear.hpp"

namespace kgpt::model::layers {

// relu(x)^2 (parameter-golf's MLP).
template <class T>
struct ReluSquared {
  template <class X, class Y>
  void forward(const ExecSpace& exec, const X& up, const Y& act) const {
    ops::relu_squared_forward<T>(exec, up, act);
  }
  template <class X, class DY, class DX>
  void backward(const ExecSpace& exec, const X& up, const DY& d_act, const DX& d_up) const {
    ops::relu_squared_backward<T>(exec, up, d_act, d_up);
  }
};

// GELU (tanh form, GPT-2's), in the up product's epilogue and the down product's backward where the
// backend can.
struct GeluActivation {
  bool epilogue = false;  // model.gelu_epilogue
};

template <class T, class A, class Activation>
class Mlp {
 public:
  Mlp() = default;
  Mlp(Projection<T, A> up, ops::Linear<T, A> down, Activation activation = {})
      : up_(std::move(up)), down_(std::move(down)), activation_(activation) {}

  // out = f(h W_up^T) W_down^T (+ residual, when it is not empty), keeping up and act for the backward.
  template <class H, class Up, class Act, class R, class Out>
  void forward(const ExecSpace& exec, const H& h, const Up& up, const Act& act, const R& residual,
               const Out& out) const {
    if constexpr (std::is_same<Activation, GeluActivation>::value) {
      ops::linear_gelu_forward(exec, up_.only(), h, up, act, activation_.epilogue);
    } else {
      up_.forward(exec, h, up);
      activation_.forward(exec, up, act);
    }
    if (residual.extent(0) == 0) {
      ops::linear_forward(exec, down_, act, out);
    } else {
      ops::linear_forward(exec, down_, act, residual, out);
    }
  }
  // From dy, the gradient of out, to dh (overwritten, or added with accumulate_dh); d_act and d_up
  // are scratch (they may be one buffer), up and act what the forward kept.
  template <class H, class Up, class Act, class DY, class DAct, class DUp, class DH>
  void backward(const ExecSpace& exec, const H& h, const Up& up, const Act& act, const DY& dy, const DAct& d_act,
                const DUp& d_up, const DH& dh, bool accumulate_dh, const Workspace<T>& partials = {}) const {
    if constexpr (std::is_same<Activation, GeluActivation>::value) {
      ops::linear_backward_into_gelu(exec, down_, act, up, dy, d_up, activation_.epilogue, partials);
    } else {
      ops::linear_backward(exec, down_, act, dy, d_act, false, partials);
      activation_.backward(exec, up, d_act, d_up);
    }
    up_.backward(exec, h, d_up, dh, accumulate_dh, partials);
  }

  // Its layers, for the model's FP8 operands (ModelBase::use_fp8).
  Projection<T, A>& up() { return up_; }
  ops::Linear<T, A>& down() { return down_; }

 private:
  Projection<T, A> up_;
  ops::Linear<T, A> down_;
  Activation activation_;
};

}  // namespace kgpt::model::layers
