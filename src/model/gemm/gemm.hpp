#pragma once
// The one GEMM interface of kgpt (declarations and operand types in gemm/types.hpp): shapes and
// types are checked here; the products run in the backend's implementation (core/backend.hpp):
// gemm/host.hpp (Kokkos Kernels, OpenBLAS on the host) or gemm/cuda.hpp (cuBLASLt with a
// workspace; bf16 inputs with fp32 accumulation on the tensor cores). Every operand is a LayoutRight
// 2-D View (subviews with a leading dimension larger than their width included).

#include <string>
#include <type_traits>
#include <vector>

#include "core/error.hpp"
#include "core/profile.hpp"
#include "model/gemm/types.hpp"
#include "model/gemm/host.hpp"
#if KGPT_BACKEND_CUDA
#include "model/gemm/cuda.hpp"
#endif

namespace kgpt::model {

// The multiplications and additions of an M x N x K product, as the profile and the bench count them.
inline double product_flops(std::size_t m, std::size_t n, std::size_t k) {
  return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
}

namespace detail {

[[noreturn]] inline void shape_mismatch(const char* who, std::size_t m, std::size_t k, std::size_t kb, std::size_t n,
                                        std::size_t c_rows, std::size_t c_cols) {
  throw Error(ExitCode::failure, std::string(who) + ": shapes do not match: op(A) " + std::to_string(m) + "x" +
                                     std::to_string(k) + ", op(B) " + std::to_string(kb) + "x" + std::to_string(n) +
                                     ", C " + std::to_string(c_rows) + "x" + std::to_string(c_cols));
}

template <class T>
const char* type_name() {
  return std::is_same<T, bf16>::value ? "bf16" : std::is_same<T, float>::value ? "fp32" : "fp64";
}

// "gemm 65536x1536x512 NT bf16->bf16": the profile's name for one product.
template <class TA, class TD>
std::string gemm_label(const char* what, std::size_t m, std::size_t n, std::size_t k, Op op_a, Op op_b) {
  return std::string(what) + " " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + " " +
         (op_a == Op::none ? "N" : "T") + (op_b == Op::none ? "N" : "T") + " " + type_name<TA>() + "->" + type_name<TD>();
}

// M, K and N of D = op(A) op(B), D's shape checked against them (`who` names the caller).
struct ProductShape {
  std::size_t m, k, n;
};

template <class AView, class BView, class DView>
ProductShape product_shape(const char* who, Op op_a, Op op_b, const AView& a, const BView& b, const DView& d) {
  const std::size_t m = op_a == Op::none ? a.extent(0) : a.extent(1);
  const std::size_t k = op_a == Op::none ? a.extent(1) : a.extent(0);
  const std::size_t kb = op_b == Op::none ? b.extent(0) : b.extent(1);
  const std::size_t n = op_b == Op::none ? b.extent(1) : b.extent(0);
  if (k != kb || d.extent(0) != m || d.extent(1) != n) shape_mismatch(who, m, k, kb, n, d.extent(0), d.extent(1));
  return {m, k, n};
}

template <class... Views>
constexpr bool layout_right() {
  return (std::is_same<typename Views::array_layout, Kokkos::LayoutRight>::value && ...);
}

template <class TA, class TD>
constexpr bool supported_types() {
  return std::is_same<TA, TD>::value || (std::is_same<TA, bf16>::value && std::is_same<TD, float>::value);
}

}  // namespace detail

// Makes what the backend's products need (the cuBLASLt handle and workspace) now rather than in the
// first training step.
inline void prepare_gemm() { GemmBackend<backend::Current>::prepare(); }

// What the backend found where it chose a product's algorithm by timing (cuBLASLt), one line each.
inline std::vector<std::string> gemm_choices() { return GemmBackend<backend::Current>::choices(); }

template <class AView, class BView, class CView, class DView, class BiasView>
void gemm_ex(const ExecSpace& exec, Op op_a, Op op_b, GemmScalar<typename DView::value_type> alpha, const AView& a,
             const BView& b, GemmScalar<typename DView::value_type> beta, const CView& c, const DView& d,
             const BiasView& bias) {
  using TA = std::remove_const_t<typename AView::value_type>;
  using TB = std::remove_const_t<typename BView::value_type>;
  using TC = std::remove_const_t<typename CView::value_type>;
  using TD = typename DView::value_type;
  static_assert(detail::layout_right<AView, BView, CView, DView>(), "kgpt::model::gemm takes LayoutRight operands only");
  static_assert(std::is_same<TA, TB>::value && std::is_same<TC, TD>::value && detail::supported_types<TA, TD>(),
                "kgpt::model::gemm: A and B of one type; C and D of that type, or float with bf16 inputs");
  static_assert(std::is_same<std::remove_const_t<typename BiasView::value_type>, TD>::value,
                "kgpt::model::gemm: the bias has D's type");
  const auto [m, k, n] = detail::product_shape("kgpt::model::gemm", op_a, op_b, a, b, d);
  if (c.extent(0) != m || c.extent(1) != n) detail::shape_mismatch("kgpt::model::gemm (C)", m, k, k, n, c.extent(0), c.extent(1));
  if (bias.extent(0) != 0 && bias.extent(0) != n) {
    throw Error(ExitCode::failure, "kgpt::model::gemm: a bias of " + std::to_string(bias.extent(0)) +
                                       " values for " + std::to_string(n) + " columns");
  }
  if (m == 0 || n == 0) return;
  const profile::Region region(exec, profile::regions_named() ? detail::gemm_label<TA, TD>("gemm", m, n, k, op_a, op_b)
                                                              : std::string(),
                               product_flops(m, n, k));
  GemmBackend<backend::Current>::gemm(exec, op_a, op_b, alpha, a, b, beta, c, d, bias, k);
}

// The GELU epilogue (GeluEpilogue) in the product itself where the backend has such a product for
// these operands (cuBLASLt on a GPU, for bf16 products): D and pre of the inputs' type, pre (M, N)
// written by the forward and read by the backward, a bias (N) in the forward only. Returns false,
// having done nothing, where it has not: the caller then runs the product and the activation's own
// kernel (ops/linear.hpp), which is what the host always does.
template <class AView, class BView, class BiasView, class PreView, class DView>
bool gemm_gelu(const ExecSpace& exec, GeluEpilogue which, Op op_a, Op op_b, const AView& a, const BView& b,
               const BiasView& bias, const PreView& pre, const DView& d) {
  using TA = std::remove_const_t<typename AView::value_type>;
  using TD = typename DView::value_type;
  static_assert(detail::layout_right<AView, BView, PreView, DView>(),
                "kgpt::model::gemm_gelu takes LayoutRight operands only");
  static_assert(std::is_same<TA, std::remove_const_t<typename BView::value_type>>::value &&
                    std::is_same<TA, TD>::value &&
                    std::is_same<std::remove_const_t<typename PreView::value_type>, TD>::value &&
                    std::is_same<std::remove_const_t<typename BiasView::value_type>, TD>::value,
                "kgpt::model::gemm_gelu: every operand of one type");
  const auto [m, k, n] = detail::product_shape("kgpt::model::gemm_gelu", op_a, op_b, a, b, d);
  if (pre.extent(0) != m || pre.extent(1) != n) {
    detail::shape_mismatch("kgpt::model::gemm_gelu (pre)", m, k, k, n, pre.extent(0), pre.extent(1));
  }
  if (bias.extent(0) != 0 && (bias.extent(0) != n || which == GeluEpilogue::backward)) {
    throw Error(ExitCode::failure, "kgpt::model::gemm_gelu: a bias of " + std::to_string(bias.extent(0)) + " values for " +
                                       std::to_string(n) + " columns" +
                                       (which == GeluEpilogue::backward ? " in the backward, which takes none" : ""));
  }
  if (m == 0 || n == 0 || k == 0) return false;
  const std::string label =
      profile::regions_named()
          ? detail::gemm_label<TA, TD>(which == GeluEpilogue::forward ? "gemm+gelu" : "gemm+gelu_backward", m, n, k, op_a,
                                       op_b)
          : std::string();
  return GemmBackend<backend::Current>::gemm_gelu(exec, which, op_a, op_b, a, b, bias, pre, d, k, label,
                                                  product_flops(m, n, k));
}

namespace detail {

inline const char* fp8_name(Fp8Format format) { return format == Fp8Format::e4m3 ? "e4m3" : "e5m2"; }

// "gemm_fp8 65536x1536x512 e4m3*e4m3->bf16", and the shapes checked (`who` names the caller).
template <class TD>
std::string fp8_product(const char* who, const Fp8Matrix& a, const Fp8Matrix& b, std::size_t d_rows, std::size_t d_cols) {
  if (a.cols != b.cols || d_rows != a.rows || d_cols != b.rows) {
    shape_mismatch(who, a.rows, a.cols, b.cols, b.rows, d_rows, d_cols);
  }
  if (a.data == nullptr || b.data == nullptr || a.scale == nullptr || b.scale == nullptr) {
    throw Error(ExitCode::failure, std::string(who) + ": an FP8 operand without its bytes or its scale");
  }
  if (!profile::regions_named()) return std::string();
  return std::string(who) + " " + std::to_string(a.rows) + "x" + std::to_string(b.rows) + "x" + std::to_string(a.cols) +
         " " + fp8_name(a.format) + "*" + fp8_name(b.format) + "->" + type_name<TD>();
}

}  // namespace detail

template <class CView, class DView, class BiasView>
void gemm_fp8(const ExecSpace& exec, const Fp8Matrix& a, const Fp8Matrix& b, float beta, const CView& c, const DView& d,
              const BiasView& bias, bool fast_accumulation) {
  using TD = typename DView::value_type;
  static_assert(detail::layout_right<CView, DView>(), "kgpt::model::gemm_fp8 takes LayoutRight operands only");
  static_assert(std::is_same<std::remove_const_t<typename CView::value_type>, TD>::value &&
                    (std::is_same<TD, bf16>::value || std::is_same<TD, float>::value) &&
                    std::is_same<std::remove_const_t<typename BiasView::value_type>, TD>::value,
                "kgpt::model::gemm_fp8: C, D and the bias of one type, bf16 or float");
  const std::string label = detail::fp8_product<TD>("gemm_fp8", a, b, d.extent(0), d.extent(1));
  if (c.extent(0) != d.extent(0) || c.extent(1) != d.extent(1)) {
    detail::shape_mismatch("kgpt::model::gemm_fp8 (C)", a.rows, a.cols, b.cols, b.rows, c.extent(0), c.extent(1));
  }
  if (bias.extent(0) != 0 && bias.extent(0) != b.rows) {
    throw Error(ExitCode::failure, "kgpt::model::gemm_fp8: a bias of " + std::to_string(bias.extent(0)) + " values for " +
                                       std::to_string(b.rows) + " columns");
  }
  if (a.rows == 0 || b.rows == 0) return;
  GemmBackend<backend::Current>::gemm_fp8(exec, a, b, beta, c, d, bias, fast_accumulation, label,
                                          product_flops(a.rows, b.rows, a.cols));
}

template <class BiasView, class PreView, class DView>
bool gemm_fp8_gelu(const ExecSpace& exec, GeluEpilogue which, const Fp8Matrix& a, const Fp8Matrix& b,
                   const BiasView& bias, const PreView& pre, const DView& d, bool fast_accumulation) {
  using TD = typename DView::value_type;
  static_assert(detail::layout_right<PreView, DView>(), "kgpt::model::gemm_fp8_gelu takes LayoutRight operands only");
  static_assert(std::is_same<std::remove_const_t<typename PreView::value_type>, TD>::value &&
                    std::is_same<std::remove_const_t<typename BiasView::value_type>, TD>::value,
                "kgpt::model::gemm_fp8_gelu: D, GELU's input and the bias of one type");
  const std::string label = detail::fp8_product<TD>(
      which == GeluEpilogue::forward ? "gemm_fp8+gelu" : "gemm_fp8+gelu_backward", a, b, d.extent(0), d.extent(1));
  if (pre.extent(0) != d.extent(0) || pre.extent(1) != d.extent(1)) {
    detail::shape_mismatch("kgpt::model::gemm_fp8_gelu (pre)", a.rows, a.cols, b.cols, b.rows, pre.extent(0), pre.extent(1));
  }
  if (bias.extent(0) != 0 && (bias.extent(0) != b.rows || which == GeluEpilogue::backward)) {
    throw Error(ExitCode::failure, "kgpt::model::gemm_fp8_gelu: a bias of " + std::to_string(bias.extent(0)) +
                                       " values for " + std::to_string(b.rows) + " columns");
  }
  if (a.rows == 0 || b.rows == 0 || a.cols == 0) return false;
  return GemmBackend<backend::Current>::gemm_fp8_gelu(exec, which, a, b, bias, pre, d, fast_accumulation, label,
                                                      product_flops(a.rows, b.rows, a.cols));
}

template <class AView, class BView, class CView>
void gemm(const ExecSpace& exec, Op op_a, Op op_b, GemmScalar<typename CView::value_type> alpha, const AView& a,
          const BView& b, GemmScalar<typename CView::value_type> beta, const CView& c) {
  gemm_ex(exec, op_a, op_b, alpha, a, b, beta, c, c, Kokkos::View<const typename CView::value_type*, MemSpace>());
}

// D_i = alpha op(A_i) op(B_i) + beta C_i for i < count; C may be D (C's items are read only when
// beta is not zero).
template <class TA, class TC>
void gemm_batched_ex(const ExecSpace& exec, Op op_a, Op op_b, GemmScalar<TC> alpha, const Strided<const TA>& a,
                     const Strided<const TA>& b, GemmScalar<TC> beta, const Strided<const TC>& c, const Strided<TC>& d,
                     std::size_t count) {
  static_assert(detail::supported_types<TA, TC>(), "kgpt::model::gemm_batched: unsupported operand types");
  const std::size_t m = op_a == Op::none ? a.rows : a.cols, k = op_a == Op::none ? a.cols : a.rows;
  const std::size_t kb = op_b == Op::none ? b.rows : b.cols, n = op_b == Op::none ? b.cols : b.rows;
  if (k != kb || d.rows != m || d.cols != n) detail::shape_mismatch("kgpt::model::gemm_batched", m, k, kb, n, d.rows, d.cols);
  if (c.rows != m || c.cols != n) detail::shape_mismatch("kgpt::model::gemm_batched (C)", m, k, kb, n, c.rows, c.cols);
  if (a.ld < a.cols || b.ld < b.cols || c.ld < c.cols || d.ld < d.cols) {
    throw Error(ExitCode::failure, "kgpt::model::gemm_batched: a leading dimension is smaller than its row");
  }
  if (count == 0 || m == 0 || n == 0) return;
  const profile::Region region(
      exec,
      profile::regions_named()
          ? detail::gemm_label<TA, TC>(("gemm_batched x" + std::to_string(count)).c_str(), m, n, k, op_a, op_b)
          : std::string(),
      product_flops(m, n, k) * static_cast<double>(count));
  GemmBackend<backend::Current>::gemm_batched(exec, op_a, op_b, alpha, a, b, beta, c, d, count);
}

template <class TA, class TC>
void gemm_batched(const ExecSpace& exec, Op op_a, Op op_b, GemmScalar<TC> alpha, const Strided<const TA>& a,
                  const Strided<const TA>& b, GemmScalar<TC> beta, const Strided<TC>& c, std::size_t count) {
  const Strided<const TC> c_in{c.data, c.rows, c.cols, c.ld, c.stride};
  gemm_batched_ex(exec, op_a, op_b, alpha, a, b, beta, c_in, c, count);
}

}  // namespace kgpt::model
