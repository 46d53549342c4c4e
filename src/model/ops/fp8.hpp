#pragma once
// The operands of a linear layer's FP8 products (model.fp8; ops/linear.hpp), as Hopper's FP8
// GEMMs with per-tensor scales read them (torchtitan's float8 "tensorwise" recipe): inputs and
// weights in e4m3, the output's gradient in e5m2, each at a scale of its own taken from the
// tensor's largest magnitude in the same step (core/fp8.hpp). Each operand is rounded into a
// scratch matrix of the activations' type, unscaled: every value is an FP8 value times 2^-k, which
// bf16 holds exactly, so the bf16 products with fp32 accumulation compute what FP8 products with
// those scales do, on the host and on a GPU alike. The products:
//   forward   y  = q4(x) q4(W)^T
//   backward  dx = q5(dy) q4(W),   dW += q5(dy)^T q4(x)
// The bias, its gradient and the residual added in the product stay as they are.

#include <string>
#include <type_traits>

#include "core/backend.hpp"
#include "core/fp8.hpp"
#include "core/kernel.hpp"
#include "core/views.hpp"
#include "model/ops/launch.hpp"
#include "model/storage.hpp"

namespace kgpt::model::ops {

namespace {  // kernels: internal linkage, see core/kernel.hpp

// amax = max |x| over a (rows, cols) view whose rows are contiguous, on the device. On a GPU a
// thread per element; on the host a loop per row, vectorised.
template <class X>
void fp8_amax(const ExecSpace& exec, const X& x, float* amax) {
  using V = std::remove_const_t<typename X::value_type>;
  const std::size_t rows = x.extent(0), cols = x.extent(1);
  const RowView<const V> v(x);
  if constexpr (backend::Traits::device_scalars) {
    Kokkos::parallel_reduce(
        "kgpt::fp8::amax", Kokkos::RangePolicy<ExecSpace>(exec, 0, rows * cols),
        KOKKOS_LAMBDA(const std::size_t e, float& m) {
          const float a = static_cast<float>(v(e / cols, e % cols));
          const float magnitude = a < 0.0f ? -a : a;
          if (magnitude > m) m = magnitude;
        },
        Kokkos::Max<float, MemSpace>(Kokkos::View<float, MemSpace>(amax)));
  } else {
    Kokkos::parallel_reduce(
        "kgpt::fp8::amax", Kokkos::RangePolicy<ExecSpace>(exec, 0, rows),
        [=](const std::size_t i, float& m) {
          const V* row = &v(i, 0);
          float row_max = 0.0f;
#if !KGPT_BACKEND_CUDA  // host builds compile with -fopenmp-simd; this branch runs on the host only
#pragma omp simd reduction(max : row_max)
#endif
          for (std::size_t j = 0; j < cols; ++j) {
            const float a = static_cast<float>(row[j]);
            const float magnitude = a < 0.0f ? -a : a;
            row_max = magnitude > row_max ? magnitude : row_max;
          }
          if (row_max > m) m = row_max;
        },
        Kokkos::Max<float, MemSpace>(Kokkos::View<float, MemSpace>(amax)));
  }
}

// out = fp8_round(x 2^k) 2^-k, k from the amax: read by each thread on a GPU (it stays on the
// device), once on the host, where the loop over a row then vectorises.
template <Fp8Format F, class X, class Out>
void fp8_round_scaled(const ExecSpace& exec, const X& x, const Out& out, const float* amax) {
  if constexpr (backend::Traits::device_scalars) {
    map_elements<float>(
        exec, "kgpt::fp8::round",
        KOKKOS_LAMBDA(std::size_t, const float v) {
          const int k = fp8_scale_exponent<F>(*amax);
          return fp8_round<F>(v * power_of_two(k)) * power_of_two(-k);
        },
        out, x);
  } else {
    using V = std::remove_const_t<typename X::value_type>;
    using A = typename Out::value_type;
    const RowView<const V> in(x);
    const RowView<A> o(out);
    const std::size_t cols = x.extent(1);
    exec.fence();
    const int k = fp8_scale_exponent<F>(*amax);
    const float up = power_of_two(k), down = power_of_two(-k);
    kgpt::parallel_for("kgpt::fp8::round", Kokkos::RangePolicy<ExecSpace>(exec, 0, x.extent(0)), [=](const std::size_t i) {
      const V* row = &in(i, 0);
      A* row_out = &o(i, 0);
#if !KGPT_BACKEND_CUDA
#pragma omp simd
#endif
      for (std::size_t j = 0; j < cols; ++j) row_out[j] = store<A>(fp8_round<F>(static_cast<float>(row[j]) * up) * down);
    });
  }
}

}  // namespace

// Which of a model's layers run FP8 products (model.fp8): an MLP's, or every block's linear layer.
enum class LayerKind { attention, mlp };

// The scratch of the rounded operands, shared by every layer of a model (each product rounds its
// operands just before it runs), sized for the widest layer.
template <class A>
class Fp8Operands {
 public:
  Fp8Operands() = default;
  // For micro-batches of up to max_rows tokens, layers of up to max_in inputs and max_out outputs,
  // weights of up to max_weight elements.
  Fp8Operands(const std::string& prefix, std::size_t max_rows, std::size_t max_in, std::size_t max_out,
              std::size_t max_weight)
      : inputs_(prefix + "fp8_inputs", max_rows * max_in),
        gradients_(prefix + "fp8_gradients", max_rows * max_out),
        weights_(prefix + "fp8_weights", max_weight),
        amax_(prefix + "fp8_amax", 3) {}
  static std::size_t bytes(std::size_t max_rows, std::size_t max_in, std::size_t max_out, std::size_t max_weight) {
    return (max_rows * (max_in + max_out) + max_weight) * sizeof(A) + 3 * sizeof(float);
  }

  template <class X>
  Matrix<A> input(const ExecSpace& exec, const X& x) const {
    return rounded<Fp8Format::e4m3>(exec, x, inputs_, 0);
  }
  template <class W>
  Matrix<A> weight(const ExecSpace& exec, const W& w) const {
    return rounded<Fp8Format::e4m3>(exec, w, weights_, 1);
  }
  template <class DY>
  Matrix<A> gradient(const ExecSpace& exec, const DY& dy) const {
    return rounded<Fp8Format::e5m2>(exec, dy, gradients_, 2);
  }

 private:
  template <Fp8Format F, class X>
  Matrix<A> rounded(const ExecSpace& exec, const X& x, const Buffer<A>& into, int slot) const {
    const Matrix<A> out = into.mat(x.extent(0), x.extent(1));
    float* amax = amax_.data() + slot;
    fp8_amax(exec, x, amax);
    fp8_round_scaled<F>(exec, x, out, amax);
    return out;
  }
  Buffer<A> inputs_, gradients_, weights_;
  Buffer<float> amax_;
};

}  // namespace kgpt::model::ops
