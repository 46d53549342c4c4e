#pragma once
// GEMMs on the host, and double GEMMs anywhere: Kokkos Kernels' BLAS, which reaches OpenBLAS
// sgemm/dgemm on the host (cuBLAS dgemm in CUDA builds). Keeping every operand LayoutRight avoids
// Kokkos Kernels' slow native fallback. bf16 operands (train.precision: bf16 on the host, a path for
// tests rather than speed) are widened to float in scratch matrices that are kept between calls;
// the result is rounded to bf16 where D is bf16. A batch is a loop of GEMMs: on the host one GEMM
// per item measured far faster than batched team GEMMs.

#include <string>
#include <type_traits>
#include <vector>

#include "core/error.hpp"
#include "core/kokkos_compat.hpp"
#include "model/gemm/types.hpp"
#include "core/kernel.hpp"

namespace kgpt::model {

namespace host_gemm {

template <class T>
using HostMatrix = Kokkos::View<T**, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// A float matrix of rows x cols in memory kept for the next call of the same slot.
inline HostMatrix<float> scratch(int slot, std::size_t rows, std::size_t cols) {
  static thread_local std::vector<float> slots[3];
  std::vector<float>& memory = slots[slot];
  if (memory.size() < rows * cols) memory.resize(rows * cols);
  return HostMatrix<float>(memory.data(), rows, cols);
}

namespace {  // kernels: internal linkage, see core/kernel.hpp

// dst = float(src), elementwise, same shape.
template <class Dst, class Src>
void widen(const ExecSpace& exec, const Dst& dst, const Src& src) {
  const std::size_t rows = src.extent(0), cols = src.extent(1);
  kgpt::parallel_for(
      "kgpt::gemm::widen", Kokkos::RangePolicy<ExecSpace>(exec, 0, rows), KOKKOS_LAMBDA(const std::size_t i) {
        for (std::size_t j = 0; j < cols; ++j) dst(i, j) = static_cast<typename Dst::value_type>(src(i, j));
      });
}

// d = c (when they differ) so that a product can add to d with beta.
template <class D, class C>
void copy_if_apart(const ExecSpace& exec, const D& d, const C& c) {
  if (static_cast<const void*>(d.data()) == static_cast<const void*>(c.data())) return;
  widen(exec, d, c);
}

template <class D, class Bias>
void add_bias(const ExecSpace& exec, const D& d, const Bias& bias) {
  if (bias.extent(0) == 0) return;
  const std::size_t rows = d.extent(0), cols = d.extent(1);
  kgpt::parallel_for(
      "kgpt::gemm::bias", Kokkos::RangePolicy<ExecSpace>(exec, 0, rows), KOKKOS_LAMBDA(const std::size_t i) {
        for (std::size_t j = 0; j < cols; ++j) d(i, j) += static_cast<typename D::value_type>(bias(j));
      });
}

// Item i of a strided batch as a LayoutRight (sub)view with its leading dimension.
template <class T>
auto item(const Strided<T>& x, std::size_t i) {
  const Kokkos::View<T**, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> whole(
      x.data + i * x.stride, x.rows, x.ld);
  return Kokkos::subview(whole, Kokkos::ALL(), std::make_pair(std::size_t(0), x.cols));
}

// D *= beta (BLAS leaves C untouched when K = 0 only if beta = 1).
template <class D>
void scale(const ExecSpace& exec, const D& d, GemmScalar<typename D::value_type> beta) {
  const std::size_t rows = d.extent(0), cols = d.extent(1);
  using V = typename D::value_type;
  kgpt::parallel_for(
      "kgpt::gemm::scale", Kokkos::RangePolicy<ExecSpace>(exec, 0, rows), KOKKOS_LAMBDA(const std::size_t i) {
        for (std::size_t j = 0; j < cols; ++j) d(i, j) = static_cast<V>(beta == 0 ? decltype(beta)(0) : beta * d(i, j));
      });
}

}  // namespace

}  // namespace host_gemm

template <>
struct GemmBackend<backend::Host> {
  static void prepare() {}
  static std::vector<std::string> choices() { return {}; }  // BLAS chooses for itself

  template <class AView, class BView, class CView, class DView, class BiasView>
  static void gemm(const ExecSpace& exec, Op op_a, Op op_b, GemmScalar<typename DView::value_type> alpha,
                   const AView& a, const BView& b, GemmScalar<typename DView::value_type> beta, const CView& c,
                   const DView& d, const BiasView& bias, std::size_t k) {
    using TA = std::remove_const_t<typename AView::value_type>;
    const char* ta = op_a == Op::none ? "N" : "T";
    const char* tb = op_b == Op::none ? "N" : "T";
    if constexpr (!std::is_same<TA, bf16>::value) {
      if (beta != 0) host_gemm::copy_if_apart(exec, d, c);
      if (k == 0) {
        host_gemm::scale(exec, d, beta);
      } else {
        compat::blas_gemm(exec, ta, tb, alpha, a, b, beta, d);
      }
      host_gemm::add_bias(exec, d, bias);
    } else {
      const auto a32 = host_gemm::scratch(0, a.extent(0), a.extent(1));
      const auto b32 = host_gemm::scratch(1, b.extent(0), b.extent(1));
      host_gemm::widen(exec, a32, a);
      host_gemm::widen(exec, b32, b);
      const auto d32 = host_gemm::scratch(2, d.extent(0), d.extent(1));
      if (beta != 0) host_gemm::widen(exec, d32, c);
      if (k == 0) {
        host_gemm::scale(exec, d32, beta);
      } else {
        compat::blas_gemm(exec, ta, tb, alpha, a32, b32, beta, d32);
      }
      host_gemm::add_bias(exec, d32, bias);
      host_gemm::widen(exec, d, d32);  // rounds to bf16 where D is bf16
    }
  }

  template <class TA, class TC>
  static void gemm_batched(const ExecSpace& exec, Op op_a, Op op_b, GemmScalar<TC> alpha, const Strided<const TA>& a,
                           const Strided<const TA>& b, GemmScalar<TC> beta, const Strided<const TC>& c,
                           const Strided<TC>& d, std::size_t count) {
    for (std::size_t i = 0; i < count; ++i) {
      const auto ai = host_gemm::item(a, i), bi = host_gemm::item(b, i);
      const auto ci = host_gemm::item(c, i);
      const auto di = host_gemm::item(d, i);
      model::gemm_ex(exec, op_a, op_b, alpha, ai, bi, beta, ci, di, Kokkos::View<const TC*, MemSpace>());
    }
  }

  // No FP8 products on the host (backend::Traits::fp8_products): ops/fp8.hpp runs bf16 products of
  // operands rounded to FP8 values instead, and never calls these.
  template <class CView, class DView, class BiasView>
  static void gemm_fp8(const ExecSpace&, const Fp8Matrix&, const Fp8Matrix&, float, const CView&, const DView&,
                       const BiasView&, bool, const std::string&, double) {
    throw Error(ExitCode::failure, "kgpt::model::gemm_fp8: the host has no FP8 products");
  }
  template <class BiasView, class PreView, class DView>
  static bool gemm_fp8_gelu(const ExecSpace&, GeluEpilogue, const Fp8Matrix&, const Fp8Matrix&, const BiasView&,
                            const PreView&, const DView&, bool, const std::string&, double) {
    return false;
  }

  // BLAS has no epilogues: the caller runs the product and the activation's kernel.
  template <class AView, class BView, class BiasView, class PreView, class DView>
  static bool gemm_gelu(const ExecSpace&, GeluEpilogue, Op, Op, const AView&, const BView&, const BiasView&,
                        const PreView&, const DView&, std::size_t, const std::string&, double) {
    return false;
  }
};

}  // namespace kgpt::model
