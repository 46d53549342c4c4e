#pragma once
// The vocabulary of kgpt's GEMM interface (model/gemm.hpp), shared with its backend
// implementations (gemm_host.hpp, gemm_cuda.hpp): operand ops, the precision, strided batches,
// and the declarations of gemm and gemm_batched.

#include <cstddef>

#include "config/config.hpp"
#include "core/backend.hpp"
#include "core/views.hpp"

namespace kgpt::model {

enum class Op { none, transpose };

// What float GEMMs are fed: fp32 (the reference) or bf16 inputs with fp32 accumulation and output.
// The host runs every GEMM in fp32.
enum class GemmPrecision { fp32, bf16 };

// `count` contiguous row-major matrices of rows x cols; item i starts at data + i * stride (elements).
template <class T>
struct Strided {
  T* data;
  std::size_t rows, cols, stride;
};

template <class Backend>
struct GemmBackend;

// The precision GEMMs run in for a model of this precision on this backend.
inline GemmPrecision gemm_precision(config::Precision precision) {
  return backend::on_gpu && precision == config::Precision::bf16 ? GemmPrecision::bf16 : GemmPrecision::fp32;
}

inline const char* gemm_precision_name(GemmPrecision precision) {
  return precision == GemmPrecision::bf16 ? "bf16" : "fp32";
}

// Shapes: op(A) is (M, K), op(B) is (K, N), C is (M, N). Mismatched shapes throw Error.
template <class AView, class BView, class CView>
void gemm(const ExecSpace& exec, Op op_a, Op op_b, typename CView::const_value_type alpha, const AView& a,
          const BView& b, typename CView::const_value_type beta, const CView& c,
          GemmPrecision precision = GemmPrecision::fp32);

// C_i = alpha op(A_i) op(B_i) + beta C_i for i < count. Shapes as in gemm; every item must fit its stride.
template <class T>
void gemm_batched(const ExecSpace& exec, Op op_a, Op op_b, T alpha, const Strided<const T>& a,
                  const Strided<const T>& b, T beta, const Strided<T>& c, std::size_t count,
                  GemmPrecision precision = GemmPrecision::fp32);

}  // namespace kgpt::model
