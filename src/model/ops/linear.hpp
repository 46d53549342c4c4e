#pragma once
// A linear layer, as every family uses it: token-major x (N, in) and y (N, out) of activations A,
// weight W (out, in) and optional bias b (out).
//   forward:  y = x W^T (+ b) (+ r)      r: a residual added in the same product (C of the GEMM)
//   backward: dx = dy W (overwritten, or added);  dW += dy^T x;  db += sum_n dy
// The product reads W and b as the model's products do: the fp32 values, or their bf16 shadow in a
// bf16 model; the gradients are the parameters' (fp32), accumulated over micro-steps. The bias and
// the residual ride in the forward GEMM (cuBLASLt's epilogue and C); the bias gradient is a column
// sum (ops/launch.hpp). A layer whose output goes through GELU (gpt2's MLP) can have it in its
// products (linear_gelu_forward, linear_backward_into_gelu; model.gelu_epilogue). Several layers whose
// weights lie back to back and read the same x (q, k and v; an MLP's gate and up) are one Linear
// over the stacked weights: one product instead of several. A layer given FP8 operands (model.fp8)
// runs its three products on them (ops/fp8.hpp: FP8 tensor-core products on a GPU).

#include "core/views.hpp"
#include "model/gemm/gemm.hpp"
#include "model/ops/activations.hpp"
#include "model/ops/elementwise.hpp"
#include "model/ops/fp8.hpp"
#include "model/storage.hpp"

namespace kgpt::model::ops {

template <class T, class A>
struct Linear {
  Matrix<A> weight;     // (out, in), what the products read
  Matrix<T> grad;       // (out, in), the parameters' gradient
  Vector<A> bias;       // (out), or empty
  Vector<T> bias_grad;  // (out), or empty
  const Fp8Operands<A>* fp8 = nullptr;  // where the products' FP8 operands go, or none

  Linear() = default;
  Linear(const Matrix<A>& w, const Matrix<T>& g) : weight(w), grad(g) {}
  Linear(const Matrix<A>& w, const Matrix<T>& g, const Vector<A>& b, const Vector<T>& gb)
      : weight(w), grad(g), bias(b), bias_grad(gb) {}
  // Layers whose weights (and biases) lie back to back in the buffers, as one: the first layer's
  // matrices viewed with `out` rows.
  static Linear stacked(const Matrix<A>& first_w, const Matrix<T>& first_g, std::size_t out) {
    return Linear(Matrix<A>(first_w.data(), out, first_w.extent(1)), Matrix<T>(first_g.data(), out, first_g.extent(1)));
  }
  Linear& with_fp8(const Fp8Operands<A>* operands) {
    fp8 = operands;
    return *this;
  }
  std::size_t out() const { return weight.extent(0); }
  std::size_t in() const { return weight.extent(1); }
};

// y = x W^T (+ b).
template <class T, class A, class X, class Y>
void linear_forward(const ExecSpace& exec, const Linear<T, A>& layer, const X& x, const Y& y) {
  if (layer.fp8 != nullptr) {
    layer.fp8->forward(exec, x, layer.weight, T(0), y, y, ConstVector<A>(layer.bias));
    return;
  }
  gemm_ex(exec, Op::none, Op::transpose, T(1), x, layer.weight, T(0), y, y, ConstVector<A>(layer.bias));
}

// y = r + x W^T (+ b): the residual add rides in the product.
template <class T, class A, class X, class R, class Y>
void linear_forward(const ExecSpace& exec, const Linear<T, A>& layer, const X& x, const R& residual, const Y& y) {
  if (layer.fp8 != nullptr) {
    layer.fp8->forward(exec, x, layer.weight, T(1), residual, y, ConstVector<A>(layer.bias));
    return;
  }
  gemm_ex(exec, Op::none, Op::transpose, T(1), x, layer.weight, T(1), residual, y, ConstVector<A>(layer.bias));
}

// act = GELU(x W^T + b), keeping pre = x W^T + b for the backward: with `epilogue`, in the product
// where the backend can (cuBLASLt's GELU_AUX epilogue writes both and saves reading pre again),
// otherwise the product and the activation's kernel.
template <class T, class A, class X, class Pre, class Act>
void linear_gelu_forward(const ExecSpace& exec, const Linear<T, A>& layer, const X& x, const Pre& pre, const Act& act,
                         bool epilogue) {
  if (layer.fp8 != nullptr) {
    layer.fp8->forward_gelu(exec, x, layer.weight, ConstVector<A>(layer.bias), pre, act, epilogue,
                            [&] { gelu_tanh_forward<T>(exec, pre, act); });
    return;
  }
  if (epilogue && gemm_gelu(exec, GeluEpilogue::forward, Op::none, Op::transpose, x, layer.weight,
                            ConstVector<A>(layer.bias), pre, act)) {
    return;
  }
  linear_forward(exec, layer, x, pre);
  gelu_tanh_forward<T>(exec, pre, act);
}

// dW += dy^T x, db += sum_n dy, and dx = dy W (with accumulate_dx, dx += dy W); an empty dx skips
// the input gradient (the first layer of a network).
template <class T, class A, class X, class DY, class DX>
void linear_backward(const ExecSpace& exec, const Linear<T, A>& layer, const X& x, const DY& dy, const DX& dx,
                     bool accumulate_dx = false, const Workspace<T>& partials = {}) {
  if (layer.bias_grad.extent(0) != 0) bias_backward<T>(exec, dy, layer.bias_grad, partials);
  if (layer.fp8 != nullptr) {
    layer.fp8->backward(exec, x, layer.weight, dy, dx, accumulate_dx, layer.grad);
    return;
  }
  if (dx.extent(0) != 0) gemm(exec, Op::none, Op::none, T(1), dy, layer.weight, T(accumulate_dx ? 1 : 0), dx);
  gemm(exec, Op::transpose, Op::none, T(1), dy, x, T(1), layer.grad);
}

// The backward of a layer whose input is act = GELU(pre), through the GELU: dW += dy^T act,
// db += sum_n dy, and d_pre = GELU'(pre) * (dy W), overwritten; with `epilogue`, in the product
// where the backend can (cuBLASLt's DGELU epilogue, which saves writing dy W and reading it back),
// otherwise the product and the activation's kernel.
template <class T, class A, class Act, class Pre, class DY, class DPre>
void linear_backward_into_gelu(const ExecSpace& exec, const Linear<T, A>& layer, const Act& act, const Pre& pre,
                               const DY& dy, const DPre& d_pre, bool epilogue, const Workspace<T>& partials = {}) {
  if (layer.bias_grad.extent(0) != 0) bias_backward<T>(exec, dy, layer.bias_grad, partials);
  if (layer.fp8 != nullptr) {
    layer.fp8->backward_into_gelu(exec, act, layer.weight, pre, dy, d_pre, epilogue, layer.grad,
                                  [&] { gelu_tanh_backward<T>(exec, pre, d_pre, d_pre); });
    return;
  }
  if (!epilogue ||
      !gemm_gelu(exec, GeluEpilogue::backward, Op::none, Op::none, dy, layer.weight, ConstVector<A>(), pre, d_pre)) {
    gemm(exec, Op::none, Op::none, T(1), dy, layer.weight, T(0), d_pre);
    gelu_tanh_backward<T>(exec, pre, d_pre, d_pre);
  }
  gemm(exec, Op::transpose, Op::none, T(1), dy, act, T(1), layer.grad);
}

}  // namespace kgpt::model::ops
