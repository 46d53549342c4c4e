#pragma once
// GEMMs on CUDA: float and bf16 products run through cuBLASLt (gemm/cuda.cpp) with one 32 MiB
// workspace, so that the K = 65,536 weight-gradient products can split K; bf16 inputs accumulate in
// fp32 on the tensor cores and write bf16 or fp32; the bias, a separate C (D = AB + C, a residual
// add) and, for bf16 products, GELU with its gradient (cuBLASLt's GELU_AUX and DGELU epilogues,
// where cuBLASLt has a kernel for the operands) ride in the product; algorithms are chosen once
// per shape. double products take the host implementation's route through Kokkos Kernels, which
// reaches cuBLAS dgemm.
// Row-major operands as kgpt stores them, every pointer in device memory, enqueued on the execution
// space's stream.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "core/profile.hpp"
#include "model/gemm/host.hpp"
#include "model/gemm/types.hpp"

namespace kgpt::model {

namespace cuda_gemm {

enum class Type { f32, bf16, e4m3, e5m2 };

inline Type type_of(Fp8Format format) { return format == Fp8Format::e4m3 ? Type::e4m3 : Type::e5m2; }

template <class T>
constexpr Type type_of() {
  return std::is_same<std::remove_const_t<T>, bf16>::value ? Type::bf16 : Type::f32;
}

struct Operand {
  const void* data;
  Type type;
  std::int64_t rows, cols, ld;  // as stored, row-major, before op
  std::int64_t stride;          // elements between batch items
  bool transpose;
};

// What cuBLASLt does to the result on its way out besides the bias (GeluEpilogue).
enum class Epilogue { none, gelu, gelu_backward };

// D (m x n, row-major) = alpha op(A) op(B) + beta C + bias, for `count` items; with a GELU epilogue
// (one item, alpha 1, beta 0) D = GELU(op(A) op(B) + bias) writing aux = op(A) op(B) + bias, or
// D = GELU'(aux) * op(A) op(B).
struct Product {
  std::int64_t m = 0, n = 0, k = 0, count = 1;
  Operand a{}, b{};
  Type out = Type::f32;                            // C, D and the bias
  const void* c = nullptr;
  std::int64_t ldc = 0, stride_c = 0;
  void* d = nullptr;
  std::int64_t ldd = 0, stride_d = 0;
  const void* bias = nullptr;                      // n values, or none
  float alpha = 1.0f, beta = 0.0f;
  Epilogue epilogue = Epilogue::none;
  const void* aux = nullptr;                       // GELU's input (m x n, D's type), or none
  std::int64_t ldaux = 0;
  // FP8 operands (A not transposed, B transposed: K contiguous in both): the device floats their
  // values are multiplied by, and whether the tensor cores may keep narrower partial sums.
  const float* a_scale = nullptr;
  const float* b_scale = nullptr;
  bool fast_accumulation = false;
};

// Enqueues the product on `stream`; throws Error naming the shape when cuBLASLt refuses it.
void run(cudaStream_t stream, const Product& product);

// Whether cuBLASLt has an algorithm for the product, epilogue included (it makes the plan, and runs
// nothing). The GELU epilogues' kernels are fewer than the plain ones, so a product may have none.
bool supported(const Product& product);

// Enqueues a product with a GELU epilogue where cuBLASLt has an algorithm for it and takes the call;
// otherwise enqueues nothing and returns false (and false from then on for its shape), for the
// caller to run the product and the activation apart.
bool run_with_epilogue(cudaStream_t stream, const Product& product);

// For each product whose algorithm was chosen by timing its candidates (a side not a multiple of
// 8), what the timing found: one line each.
std::vector<std::string> choices();

// Creates the cuBLASLt handle and its workspace now (models call it when they are built), so that
// the first training step allocates nothing.
void prepare();

}  // namespace cuda_gemm

template <>
struct GemmBackend<backend::Cuda> {
  static void prepare() { cuda_gemm::prepare(); }
  static std::vector<std::string> choices() { return cuda_gemm::choices(); }

  template <class AView, class BView, class CView, class DView, class BiasView>
  static void gemm(const ExecSpace& exec, Op op_a, Op op_b, GemmScalar<typename DView::value_type> alpha,
                   const AView& a, const BView& b, GemmScalar<typename DView::value_type> beta, const CView& c,
                   const DView& d, const BiasView& bias, std::size_t k) {
    using TA = std::remove_const_t<typename AView::value_type>;
    if constexpr (std::is_same<TA, double>::value) {
      GemmBackend<backend::Host>::gemm(exec, op_a, op_b, alpha, a, b, beta, c, d, bias, k);
    } else {
      cuda_gemm::Product p = product(op_a, op_b, a, b, d, bias, k);
      p.c = c.data();
      p.ldc = static_cast<std::int64_t>(c.stride(0));
      p.alpha = alpha;
      p.beta = beta;
      cuda_gemm::run(exec.cuda_stream(), p);
    }
  }

  template <class AView, class BView, class BiasView, class PreView, class DView>
  static bool gemm_gelu(const ExecSpace& exec, GeluEpilogue which, Op op_a, Op op_b, const AView& a, const BView& b,
                        const BiasView& bias, const PreView& pre, const DView& d, std::size_t k,
                        const std::string& label, double flops) {
    using TA = std::remove_const_t<typename AView::value_type>;
    if constexpr (!std::is_same<TA, bf16>::value) {
      // bf16 only: its rounding (2^-8) hides how the epilogue evaluates tanh, while fp32 runs are
      // the ones held to 1e-5 against the host and PyTorch, so they keep the activation's kernel.
      return false;
    } else {
      return run_gelu(exec, product(op_a, op_b, a, b, d, bias, k), which, pre, label, flops);
    }
  }

  template <class CView, class DView, class BiasView>
  static void gemm_fp8(const ExecSpace& exec, const Fp8Matrix& a, const Fp8Matrix& b, float beta, const CView& c,
                       const DView& d, const BiasView& bias, bool fast_accumulation, const std::string& label,
                       double flops) {
    cuda_gemm::Product p = fp8_product(a, b, d, bias, fast_accumulation);
    p.c = c.data();
    p.ldc = static_cast<std::int64_t>(c.stride(0));
    p.beta = beta;
    const profile::Region region(exec, label, flops);
    cuda_gemm::run(exec.cuda_stream(), p);
  }

  template <class BiasView, class PreView, class DView>
  static bool gemm_fp8_gelu(const ExecSpace& exec, GeluEpilogue which, const Fp8Matrix& a, const Fp8Matrix& b,
                            const BiasView& bias, const PreView& pre, const DView& d, bool fast_accumulation,
                            const std::string& label, double flops) {
    return run_gelu(exec, fp8_product(a, b, d, bias, fast_accumulation), which, pre, label, flops);
  }

  template <class TA, class TC>
  static void gemm_batched(const ExecSpace& exec, Op op_a, Op op_b, GemmScalar<TC> alpha, const Strided<const TA>& a,
                           const Strided<const TA>& b, GemmScalar<TC> beta, const Strided<const TC>& c,
                           const Strided<TC>& d, std::size_t count) {
    if constexpr (std::is_same<TA, double>::value) {
      GemmBackend<backend::Host>::gemm_batched(exec, op_a, op_b, alpha, a, b, beta, c, d, count);
    } else {
      cuda_gemm::Product p;
      p.m = static_cast<std::int64_t>(d.rows);
      p.n = static_cast<std::int64_t>(d.cols);
      p.k = static_cast<std::int64_t>(op_a == Op::none ? a.cols : a.rows);
      p.count = static_cast<std::int64_t>(count);
      p.a = strided(a, op_a);
      p.b = strided(b, op_b);
      p.out = cuda_gemm::type_of<TC>();
      p.c = c.data;
      p.ldc = static_cast<std::int64_t>(c.ld);
      p.stride_c = static_cast<std::int64_t>(c.stride);
      p.d = d.data;
      p.ldd = static_cast<std::int64_t>(d.ld);
      p.stride_d = static_cast<std::int64_t>(d.stride);
      p.alpha = alpha;
      p.beta = beta;
      cuda_gemm::run(exec.cuda_stream(), p);
    }
  }

 private:
  // The product with GELU on its way out, where cuBLASLt has a kernel for it; false, having run
  // nothing, where not.
  template <class PreView>
  static bool run_gelu(const ExecSpace& exec, cuda_gemm::Product p, GeluEpilogue which, const PreView& pre,
                       const std::string& label, double flops) {
    p.epilogue = which == GeluEpilogue::forward ? cuda_gemm::Epilogue::gelu : cuda_gemm::Epilogue::gelu_backward;
    p.aux = pre.data();
    p.ldaux = static_cast<std::int64_t>(pre.stride(0));
    if (!cuda_gemm::supported(p)) return false;
    const profile::Region region(exec, label, flops);
    return cuda_gemm::run_with_epilogue(exec.cuda_stream(), p);
  }

  // D = op(A) op(B) (+ bias), with D standing for C as well: what every product of D sets.
  template <class AView, class BView, class DView, class BiasView>
  static cuda_gemm::Product product(Op op_a, Op op_b, const AView& a, const BView& b, const DView& d,
                                    const BiasView& bias, std::size_t k) {
    cuda_gemm::Product p;
    p.m = static_cast<std::int64_t>(d.extent(0));
    p.n = static_cast<std::int64_t>(d.extent(1));
    p.k = static_cast<std::int64_t>(k);
    p.a = operand(a, op_a);
    p.b = operand(b, op_b);
    p.out = cuda_gemm::type_of<typename DView::value_type>();
    p.c = p.d = d.data();
    p.ldc = p.ldd = static_cast<std::int64_t>(d.stride(0));
    p.bias = bias.extent(0) != 0 ? bias.data() : nullptr;
    return p;
  }
  // D = scale_a scale_b A B^T (+ bias) on FP8 operands, D standing for C as well.
  template <class DView, class BiasView>
  static cuda_gemm::Product fp8_product(const Fp8Matrix& a, const Fp8Matrix& b, const DView& d, const BiasView& bias,
                                        bool fast_accumulation) {
    cuda_gemm::Product p;
    p.m = static_cast<std::int64_t>(a.rows);
    p.n = static_cast<std::int64_t>(b.rows);
    p.k = static_cast<std::int64_t>(a.cols);
    p.a = cuda_gemm::Operand{a.data, cuda_gemm::type_of(a.format), p.m, p.k, p.k, 0, false};
    p.b = cuda_gemm::Operand{b.data, cuda_gemm::type_of(b.format), p.n, p.k, p.k, 0, true};
    p.out = cuda_gemm::type_of<typename DView::value_type>();
    p.c = p.d = d.data();
    p.ldc = p.ldd = static_cast<std::int64_t>(d.stride(0));
    p.bias = bias.extent(0) != 0 ? bias.data() : nullptr;
    p.a_scale = a.scale;
    p.b_scale = b.scale;
    p.fast_accumulation = fast_accumulation;
    return p;
  }
  template <class View>
  static cuda_gemm::Operand operand(const View& x, Op op) {
    return cuda_gemm::Operand{x.data(), cuda_gemm::type_of<typename View::value_type>(),
                              static_cast<std::int64_t>(x.extent(0)), static_cast<std::int64_t>(x.extent(1)),
                              static_cast<std::int64_t>(x.stride(0)), 0, op == Op::transpose};
  }
  template <class T>
  static cuda_gemm::Operand strided(const Strided<const T>& x, Op op) {
    return cuda_gemm::Operand{x.data, cuda_gemm::type_of<T>(), static_cast<std::int64_t>(x.rows),
                              static_cast<std::int64_t>(x.cols), static_cast<std::int64_t>(x.ld),
                              static_cast<std::int64_t>(x.stride), op == Op::transpose};
  }
};

}  // namespace kgpt::model
