#pragma once
// The operands of a linear layer's FP8 products (model.fp8; ops/linear.hpp), as Hopper's FP8
// GEMMs with per-tensor scales read them (torchtitan's float8 "tensorwise" recipe): inputs and
// weights in e4m3, the output's gradient in e5m2, each at a scale of its own taken from the
// tensor's largest magnitude in the same step (core/fp8.hpp). The products:
//   forward   y  = q4(x) q4(W)^T
//   backward  dx = q5(dy) q4(W),   dW += q5(dy)^T q4(x)
// The bias, its gradient and the residual added in the product stay as they are.
// On a GPU (backend::Traits::fp8_products, bf16 models, every side a multiple of 16) each operand
// is written as 1-byte FP8 values at its scale, and cuBLASLt's FP8 products take them with the
// scale undone (2^-k) through their scale pointers. Hopper's FP8 products read both operands with
// K contiguous, so the pass that rounds W, dy and x for the backward also transposes them: dx = dy
// (W^T)^T, dW = (dy^T) (x^T)^T. The forward lets the tensor cores keep narrower partial sums, the
// backward not (torchao's float8 defaults). Elsewhere (the host; other shapes) each operand is
// rounded into a scratch matrix of the activations' type, unscaled: every value is an FP8 value
// times 2^-k, which bf16 holds exactly, so the bf16 products with fp32 accumulation compute what
// the FP8 products do, up to the order of the sums.

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "core/backend.hpp"
#include "core/fp8.hpp"
#include "core/kernel.hpp"
#include "core/views.hpp"
#include "model/gemm/gemm.hpp"
#include "model/ops/launch.hpp"
#include "model/storage.hpp"

namespace kgpt::model::ops {

namespace {  // kernels: internal linkage, see core/kernel.hpp

// amax = max |x| over a (rows, cols) view whose rows are contiguous, on the device. On a GPU a
// thread per 16 bytes where the rows' packs start on 16 bytes (the rows back to back: one flat
// range, no index division), else a thread per element; on the host a loop per row, vectorised.
template <class X>
void fp8_amax(const ExecSpace& exec, const X& x, float* amax) {
  using V = std::remove_const_t<typename X::value_type>;
  const std::size_t rows = x.extent(0), cols = x.extent(1);
  const RowView<const V> v(x);
  if constexpr (backend::Traits::device_scalars) {
    constexpr int W = 16 / static_cast<int>(sizeof(V));
    if (cols % W == 0 && detail::packs_aligned<W>(v)) {
      const std::size_t packs_per_row = cols / W, ld = v.ld;
      const bool flat = ld == cols;
      Kokkos::parallel_reduce(
          "kgpt::fp8::amax_packed", Kokkos::RangePolicy<ExecSpace>(exec, 0, rows * packs_per_row),
          KOKKOS_LAMBDA(const std::size_t e, float& m) {
            const std::size_t at = flat ? e * W : e / packs_per_row * ld + e % packs_per_row * W;
            float values[W];
            detail::load_pack<W>(v.data + at, values);
            for (int k = 0; k < W; ++k) {
              const float magnitude = values[k] < 0.0f ? -values[k] : values[k];
              if (magnitude > m) m = magnitude;
            }
          },
          Kokkos::Max<float, MemSpace>(Kokkos::View<float, MemSpace>(amax)));
      return;
    }
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

// Sixteen FP8 values, stored at once; and eight.
struct alignas(16) Fp8Sixteen {
  std::uint32_t words[4];
};
struct alignas(8) Fp8Eight {
  std::uint32_t words[2];
};

// The 1-byte FP8 values of x (rows, cols) at x's own scale (what fp8_round_scaled's values are at
// that scale): `as_is` (rows, cols) and/or `transposed` (cols, rows), each row-major and packed, or
// null; 2^-k, the scale undone, into *scale. rows must be a multiple of 16, and `transposed` 16-byte
// aligned: each thread takes one column of 16 rows, so that a warp reads 32 neighbouring columns of
// a row at once and writes 16 bytes of a transposed row with one store.
// Where only the copy as it is is asked for and x's packs start on 16 bytes (on a GPU), each thread
// takes 16 bytes of a row and stores their FP8 bytes at once.
template <Fp8Format F, class X>
void fp8_encode_scaled(const ExecSpace& exec, const X& x, std::uint8_t* as_is, std::uint8_t* transposed,
                       const float* amax, float* scale) {
  using V = std::remove_const_t<typename X::value_type>;
  const RowView<const V> in(x);
  const std::size_t rows = x.extent(0), cols = x.extent(1);
  constexpr int W = 16 / static_cast<int>(sizeof(V));
  if constexpr (backend::Traits::device_scalars && W == 8) {
    if (transposed == nullptr && cols % W == 0 && detail::packs_aligned<W>(in)) {
      const std::size_t packs_per_row = cols / W, ld = in.ld;
      kgpt::parallel_for(
          "kgpt::fp8::encode_packed", Kokkos::RangePolicy<ExecSpace>(exec, 0, rows * packs_per_row),
          KOKKOS_LAMBDA(const std::size_t e) {
            const std::size_t i = e / packs_per_row, j = e % packs_per_row * W;
            const int k = fp8_scale_exponent<F>(*amax);
            const float up = power_of_two(k);
            if (e == 0) *scale = power_of_two(-k);
            float values[W];
            detail::load_pack<W>(in.data + i * ld + j, values);
            Fp8Eight eight{{0u, 0u}};
            for (int t = 0; t < W; ++t) {
              eight.words[t / 4] |= static_cast<std::uint32_t>(fp8_bits<F>(fp8_round<F>(values[t] * up))) << (8 * (t % 4));
            }
            // At i * cols + j, a multiple of 8.
            *reinterpret_cast<Fp8Eight*>(as_is + i * cols + j) = eight;
          });
      return;
    }
  }
  kgpt::parallel_for(
      "kgpt::fp8::encode", Kokkos::RangePolicy<ExecSpace>(exec, 0, rows / 16 * cols), KOKKOS_LAMBDA(const std::size_t e) {
        const std::size_t j = e % cols, first = e / cols * 16;
        const int k = fp8_scale_exponent<F>(*amax);
        const float up = power_of_two(k);
        if (e == 0) *scale = power_of_two(-k);
        Fp8Sixteen sixteen{{0u, 0u, 0u, 0u}};
        for (int t = 0; t < 16; ++t) {
          const std::uint8_t byte = fp8_bits<F>(fp8_round<F>(static_cast<float>(in(first + t, j)) * up));
          if (as_is != nullptr) as_is[(first + t) * cols + j] = byte;
          sixteen.words[t / 4] |= static_cast<std::uint32_t>(byte) << (8 * (t % 4));
        }
        if (transposed != nullptr) *reinterpret_cast<Fp8Sixteen*>(transposed + j * rows + first) = sixteen;
      });
}

}  // namespace

// The scratch of the rounded operands, shared by every layer of a model (each product rounds its
// operands just before it runs), sized for the widest layer. The FP8 bytes of the GPU's products
// take the same memory: x or x^T, dy and dy^T, W or W^T, one byte each where a bf16 copy takes two.
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
        scalars_(prefix + "fp8_amax", kScalars) {}
  static std::size_t bytes(std::size_t max_rows, std::size_t max_in, std::size_t max_out, std::size_t max_weight) {
    return (max_rows * (max_in + max_out) + max_weight) * sizeof(A) + kScalars * sizeof(float);
  }

  // Whether a layer of `in` inputs and `out` outputs over `rows` tokens runs its products on FP8
  // bytes in the tensor cores here, rather than as bf16 products of rounded operands.
  static bool native(std::size_t rows, std::size_t in, std::size_t out) {
    return kNative && rows > 0 && rows % 16 == 0 && in % 16 == 0 && out % 16 == 0;
  }

  // The rounded operands as matrices of A (the products where they are not native).
  template <class X>
  Matrix<A> input(const ExecSpace& exec, const X& x) const {
    return rounded<Fp8Format::e4m3>(exec, x, inputs_, kInput);
  }
  template <class W>
  Matrix<A> weight(const ExecSpace& exec, const W& w) const {
    return rounded<Fp8Format::e4m3>(exec, w, weights_, kWeight);
  }
  template <class DY>
  Matrix<A> gradient(const ExecSpace& exec, const DY& dy) const {
    return rounded<Fp8Format::e5m2>(exec, dy, gradients_, kGradient);
  }

  // y = q4(x) q4(W)^T + beta c + bias.
  template <class X, class W, class C, class Y, class Bias>
  void forward(const ExecSpace& exec, const X& x, const W& w, GemmScalar<typename Y::value_type> beta, const C& c,
               const Y& y, const Bias& bias) const {
    if constexpr (kNative) {
      if (native(x.extent(0), x.extent(1), w.extent(0))) {
        gemm_fp8(exec, bytes_of<Fp8Format::e4m3>(exec, x, inputs_, kInput, Copy::as_is).first,
                 bytes_of<Fp8Format::e4m3>(exec, w, weights_, kWeight, Copy::as_is).first, beta, c, y, bias, true);
        return;
      }
    }
    gemm_ex(exec, Op::none, Op::transpose, GemmScalar<typename Y::value_type>(1), input(exec, x), weight(exec, w), beta,
            c, y, bias);
  }

  // act = GELU(q4(x) q4(W)^T + bias), pre the product kept: in the product where the backend can
  // (with `epilogue`), else the product into pre and then gelu_apart().
  template <class X, class W, class Bias, class Pre, class Act, class GeluApart>
  void forward_gelu(const ExecSpace& exec, const X& x, const W& w, const Bias& bias, const Pre& pre, const Act& act,
                    bool epilogue, GeluApart&& gelu_apart) const {
    using S = GemmScalar<typename Pre::value_type>;
    if constexpr (kNative) {
      if (native(x.extent(0), x.extent(1), w.extent(0))) {
        const Fp8Matrix xq = bytes_of<Fp8Format::e4m3>(exec, x, inputs_, kInput, Copy::as_is).first;
        const Fp8Matrix wq = bytes_of<Fp8Format::e4m3>(exec, w, weights_, kWeight, Copy::as_is).first;
        if (!epilogue || !gemm_fp8_gelu(exec, GeluEpilogue::forward, xq, wq, bias, pre, act, true)) {
          gemm_fp8(exec, xq, wq, S(0), pre, pre, bias, true);
          gelu_apart();
        }
        return;
      }
    }
    const Matrix<A> xq = input(exec, x), wq = weight(exec, w);
    if (!epilogue || !gemm_gelu(exec, GeluEpilogue::forward, Op::none, Op::transpose, xq, wq, bias, pre, act)) {
      gemm_ex(exec, Op::none, Op::transpose, S(1), xq, wq, S(0), pre, pre, bias);
      gelu_apart();
    }
  }

  // dx = q5(dy) q4(W) (added to dx with accumulate_dx; none for an empty dx), dW += q5(dy)^T q4(x).
  template <class X, class W, class DY, class DX, class G>
  void backward(const ExecSpace& exec, const X& x, const W& w, const DY& dy, const DX& dx, bool accumulate_dx,
                const G& grad) const {
    using S = GemmScalar<typename G::value_type>;
    if constexpr (kNative) {
      if (native(x.extent(0), x.extent(1), w.extent(0))) {
        const auto dyq = bytes_of<Fp8Format::e5m2>(exec, dy, gradients_, kGradient, Copy::both);
        if (dx.extent(0) != 0) {
          gemm_fp8(exec, dyq.first, bytes_of<Fp8Format::e4m3>(exec, w, weights_, kWeight, Copy::transposed).second,
                   GemmScalar<typename DX::value_type>(accumulate_dx ? 1 : 0), dx, dx, no_bias<DX>(), false);
        }
        gemm_fp8(exec, dyq.second, bytes_of<Fp8Format::e4m3>(exec, x, inputs_, kInput, Copy::transposed).second, S(1), grad,
                 grad, no_bias<G>(), false);
        return;
      }
    }
    const Matrix<A> dyq = gradient(exec, dy);
    if (dx.extent(0) != 0) gemm(exec, Op::none, Op::none, S(1), dyq, weight(exec, w), S(accumulate_dx ? 1 : 0), dx);
    gemm(exec, Op::transpose, Op::none, S(1), dyq, input(exec, x), S(1), grad);
  }

  // d_pre = GELU'(pre) * (q5(dy) q4(W)), dW += q5(dy)^T q4(act): GELU's derivative in the product
  // where the backend can (with `epilogue`), else the product into d_pre and then gelu_apart().
  template <class Act, class W, class Pre, class DY, class DPre, class G, class GeluApart>
  void backward_into_gelu(const ExecSpace& exec, const Act& act, const W& w, const Pre& pre, const DY& dy,
                          const DPre& d_pre, bool epilogue, const G& grad, GeluApart&& gelu_apart) const {
    using S = GemmScalar<typename G::value_type>;
    using SD = GemmScalar<typename DPre::value_type>;
    if constexpr (kNative) {
      if (native(act.extent(0), act.extent(1), w.extent(0))) {
        const auto dyq = bytes_of<Fp8Format::e5m2>(exec, dy, gradients_, kGradient, Copy::both);
        const Fp8Matrix wt = bytes_of<Fp8Format::e4m3>(exec, w, weights_, kWeight, Copy::transposed).second;
        if (!epilogue ||
            !gemm_fp8_gelu(exec, GeluEpilogue::backward, dyq.first, wt, no_bias<DPre>(), pre, d_pre, false)) {
          gemm_fp8(exec, dyq.first, wt, SD(0), d_pre, d_pre, no_bias<DPre>(), false);
          gelu_apart();
        }
        gemm_fp8(exec, dyq.second, bytes_of<Fp8Format::e4m3>(exec, act, inputs_, kInput, Copy::transposed).second, S(1),
                 grad, grad, no_bias<G>(), false);
        return;
      }
    }
    const Matrix<A> dyq = gradient(exec, dy), wq = weight(exec, w);
    if (!epilogue || !gemm_gelu(exec, GeluEpilogue::backward, Op::none, Op::none, dyq, wq, ConstVector<A>(), pre, d_pre)) {
      gemm(exec, Op::none, Op::none, SD(1), dyq, wq, SD(0), d_pre);
      gelu_apart();
    }
    gemm(exec, Op::transpose, Op::none, S(1), dyq, input(exec, act), S(1), grad);
  }

 private:
  static constexpr bool kNative = backend::Traits::fp8_products && std::is_same<A, bf16>::value;
  // Where a tensor's amax and its products' scale live: scalars_(slot), scalars_(4 (slot + 1)).
  // cuBLASLt refuses a scale pointer that is not 16-byte aligned (status 15 at the product, after
  // its heuristic took it), so each scale has 16 bytes of its own.
  static constexpr int kInput = 0, kWeight = 1, kGradient = 2, kScalars = 16;
  enum class Copy { as_is, transposed, both };

  template <class D>
  static Kokkos::View<const typename D::value_type*, MemSpace> no_bias() {
    return {};
  }

  template <Fp8Format F, class X>
  Matrix<A> rounded(const ExecSpace& exec, const X& x, const Buffer<A>& into, int slot) const {
    const Matrix<A> out = into.mat(x.extent(0), x.extent(1));
    float* amax = scalars_.data() + slot;
    fp8_amax(exec, x, amax);
    fp8_round_scaled<F>(exec, x, out, amax);
    return out;
  }

  // x's FP8 bytes in `into`: as it is (first), transposed (second), or both, the transposed copy
  // after the other.
  template <Fp8Format F, class X>
  std::pair<Fp8Matrix, Fp8Matrix> bytes_of(const ExecSpace& exec, const X& x, const Buffer<A>& into, int slot,
                                           Copy copy) const {
    const std::size_t rows = x.extent(0), cols = x.extent(1), copies = copy == Copy::both ? 2 : 1;
    // Bytes in a buffer of A: half as many elements of a bf16 buffer per copy (checked against its size).
    std::uint8_t* base = reinterpret_cast<std::uint8_t*>(into.vec((copies * rows * cols + sizeof(A) - 1) / sizeof(A)).data());
    float* amax = scalars_.data() + slot;
    float* scale = scalars_.data() + 4 * (slot + 1);
    std::uint8_t* as_is = copy == Copy::transposed ? nullptr : base;
    std::uint8_t* transposed = copy == Copy::as_is ? nullptr : copy == Copy::both ? base + rows * cols : base;
    fp8_amax(exec, x, amax);
    fp8_encode_scaled<F>(exec, x, as_is, transposed, amax, scale);
    return {Fp8Matrix{as_is, rows, cols, F, scale}, Fp8Matrix{transposed, cols, rows, F, scale}};
  }

  Buffer<A> inputs_, gradients_, weights_;
  Buffer<float> scalars_;
};

}  // namespace kgpt::model::ops
