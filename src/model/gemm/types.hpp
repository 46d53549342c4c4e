#pragma once
// The vocabulary of kgpt's GEMM interface (model/gemm/gemm.hpp), shared with its backend
// implementations (gemm/host.hpp, gemm/cuda.hpp): operand ops, strided batches, the scalar type of
// a product, and the declarations of the entry points.
//
// Operand types: A and B are both float, both double, or both bf16; C and D are A's type, or float
// when A and B are bf16 (bf16 inputs, fp32 accumulation, fp32 output). Accumulation is in float
// (double for double) on every backend.

#include <cstddef>
#include <cstdint>

#include "core/backend.hpp"
#include "core/bf16.hpp"
#include "core/fp8.hpp"
#include "core/views.hpp"

namespace kgpt::model {

enum class Op { none, transpose };

// The device memory the GPU's products keep for cuBLASLt (one workspace per process): it lets
// cuBLASLt split K of the weight gradients.
constexpr std::size_t kCublasLtWorkspaceBytes = 32u << 20;

// `count` row-major matrices of rows x cols with leading dimension ld (>= cols); item i starts at
// data + i * stride (elements).
template <class T>
struct Strided {
  T* data;
  std::size_t rows, cols, ld, stride;
};

// alpha and beta: double for double products, float otherwise.
template <class T>
using GemmScalar = compute_t<std::remove_const_t<T>>;

// A row-major matrix of FP8 values, one byte each, rows packed (leading dimension cols), as a GPU's
// FP8 product reads it, and the device float that its values are multiplied by in the product
// (2^-k: the scale that ops/fp8.hpp rounded it at, undone).
struct Fp8Matrix {
  const std::uint8_t* data;
  std::size_t rows, cols;
  Fp8Format format;
  const float* scale;
};

template <class Backend>
struct GemmBackend;

// GELU (tanh form) on a product's way out, as cuBLASLt's epilogues do it (gemm_gelu):
//   forward:  D = GELU(op(A) op(B) + bias), and pre = op(A) op(B) + bias kept for the backward
//   backward: D = GELU'(pre) * op(A) op(B)
enum class GeluEpilogue { forward, backward };

// D = alpha op(A) op(B) + beta C + bias, the bias (one value per column of D, or an empty View)
// added to every row; C may be D. Shapes: op(A) (M, K), op(B) (K, N), C and D (M, N), bias (N).
template <class AView, class BView, class CView, class DView, class BiasView>
void gemm_ex(const ExecSpace& exec, Op op_a, Op op_b, GemmScalar<typename DView::value_type> alpha, const AView& a,
             const BView& b, GemmScalar<typename DView::value_type> beta, const CView& c, const DView& d,
             const BiasView& bias);

// The GELU epilogue in the product where the backend can; false, having done nothing, where not.
template <class AView, class BView, class BiasView, class PreView, class DView>
bool gemm_gelu(const ExecSpace& exec, GeluEpilogue which, Op op_a, Op op_b, const AView& a, const BView& b,
               const BiasView& bias, const PreView& pre, const DView& d);

// D = scale_A scale_B A B^T + beta C + bias on FP8 operands A (M, K) and B (N, K), both with K
// contiguous (the one layout of Hopper's FP8 products), C and D bf16 or float, accumulated in fp32;
// `fast_accumulation` lets the tensor cores keep their partial sums in their own narrower format
// (what FP8 training recipes use in the forward). Backends with FP8 products only
// (backend::Traits::fp8_products); others throw.
template <class CView, class DView, class BiasView>
void gemm_fp8(const ExecSpace& exec, const Fp8Matrix& a, const Fp8Matrix& b, float beta, const CView& c, const DView& d,
              const BiasView& bias, bool fast_accumulation);

// The same product with GELU on its way out (GeluEpilogue; no C): false, having done nothing, where
// the backend has no such product for the operands.
template <class BiasView, class PreView, class DView>
bool gemm_fp8_gelu(const ExecSpace& exec, GeluEpilogue which, const Fp8Matrix& a, const Fp8Matrix& b,
                   const BiasView& bias, const PreView& pre, const DView& d, bool fast_accumulation);

// C = alpha op(A) op(B) + beta C.
template <class AView, class BView, class CView>
void gemm(const ExecSpace& exec, Op op_a, Op op_b, GemmScalar<typename CView::value_type> alpha, const AView& a,
          const BView& b, GemmScalar<typename CView::value_type> beta, const CView& c);

// D_i = alpha op(A_i) op(B_i) + beta C_i for i < count (C may be D).
template <class TA, class TC>
void gemm_batched_ex(const ExecSpace& exec, Op op_a, Op op_b, GemmScalar<TC> alpha, const Strided<const TA>& a,
                     const Strided<const TA>& b, GemmScalar<TC> beta, const Strided<const TC>& c, const Strided<TC>& d,
                     std::size_t count);

// C_i = alpha op(A_i) op(B_i) + beta C_i for i < count.
template <class TA, class TC>
void gemm_batched(const ExecSpace& exec, Op op_a, Op op_b, GemmScalar<TC> alpha, const Strided<const TA>& a,
                  const Strided<const TA>& b, GemmScalar<TC> beta, const Strided<TC>& c, std::size_t count);

}  // namespace kgpt::model
