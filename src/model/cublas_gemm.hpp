#pragma once
// cuBLAS for kgpt::model::gemm in CUDA builds (model/gemm.hpp decides when). Row-major operands
// as kgpt stores them: C (m x n, leading dimension ldc) = alpha op(A) op(B) + beta C, op(A) m x k,
// op(B) k x n, every pointer in device memory, enqueued on `stream`. A batch of `count` products
// steps each operand by its own stride (elements). bf16: A and B are rounded to bfloat16 into
// stream-ordered temporaries and multiplied on the tensor cores with fp32 accumulation and fp32 C;
// fp32: plain sgemm. Only compiled with KOKKOS_ENABLE_CUDA.

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kgpt::model::cublas {

struct Operand {
  const float* data;
  std::int64_t rows, cols, ld;  // as stored (row-major), before op
  std::int64_t stride;          // elements between batch items (0 for one product)
  bool transpose;
};

struct Output {
  float* data;
  std::int64_t ld, stride;
};

// C = alpha op(A) op(B) + beta C for `count` items; m, n, k are op(A) rows, op(B) cols, op(A) cols.
void gemm(cudaStream_t stream, bool bf16, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
          const Operand& a, const Operand& b, float beta, const Output& c, std::int64_t count);

}  // namespace kgpt::model::cublas
