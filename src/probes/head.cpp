#include "probes/head.hpp"

#include <utility>

#include <Kokkos_Core.hpp>

#include "core/backend.hpp"
#include "core/bf16.hpp"
#include "core/random.hpp"
#include "core/views.hpp"
#include "model/gemm/gemm.hpp"
#include "model/ops/elementwise.hpp"
#include "model/model_base.hpp"
#include "probes/timing.hpp"

namespace kgpt::probes {

using namespace kgpt::model;  // the probes run the models' own pieces

namespace {

// The fastest of three runs of the head's products with logits rows `stride` apart and the three
// products `cols` wide (the weights padded with zero rows past v), after one that makes cuBLASLt's
// plans.
template <class A>
double time_head(std::size_t n, std::size_t c, std::size_t v, std::size_t stride, std::size_t cols) {
  const ExecSpace exec;
  Matrix<A> x("kgpt::head_probe::x", n, c), w("kgpt::head_probe::w", cols, c), dx("kgpt::head_probe::dx", n, c);
  Matrix<float> dw("kgpt::head_probe::dw", v, c);
  Matrix<float> dw_wide("kgpt::head_probe::dw_wide", cols != v ? cols : 0, c);
  Matrix<A> storage("kgpt::head_probe::logits", n, stride);
  const auto first = [](std::size_t k) { return std::make_pair(std::size_t(0), k); };
  const Matrix<A> product = Kokkos::subview(storage, Kokkos::ALL(), first(cols));
  const Matrix<A> logits = Kokkos::subview(storage, Kokkos::ALL(), first(v));
  random::fill_normal(x, 71, 0, 1.0);
  random::fill_normal(Matrix<A>(Kokkos::subview(w, first(v), Kokkos::ALL())), 71, 1, 0.02);
  using ConstA = Kokkos::View<const A**, Layout, MemSpace>;
  const auto products = [&] {
    gemm(exec, Op::none, Op::transpose, 1.0f, x, w, 0.0f, product);
    gemm(exec, Op::none, Op::none, 1.0f, ConstA(product), w, 0.0f, dx);
    if (cols == v) {
      gemm(exec, Op::transpose, Op::none, 1.0f, ConstA(logits), x, 1.0f, dw);
    } else {
      // As OutputHead runs it: dW as wide as the products, its vocabulary rows added to the gradient.
      gemm(exec, Op::transpose, Op::none, 1.0f, ConstA(product), x, 0.0f, dw_wide);
      ops::add_into<float>(exec, Kokkos::subview(dw_wide, first(v), Kokkos::ALL()), dw);
    }
  };
  return fastest_of_three(exec, products);
}

template <class A>
HeadProbe probe(const config::ModelConfig& model, int batch, int seq) {
  using Head = OutputHead<float, A>;
  HeadProbe p;
  p.rows = static_cast<std::size_t>(batch) * static_cast<std::size_t>(seq);
  p.width = static_cast<std::size_t>(model.d_model);
  p.vocab = static_cast<std::size_t>(model.vocab_size);
  p.row_stride = Head::row_stride(p.vocab);
  const bool padded = Head::padded_products(p.vocab, backend::Traits::padded_head_products);
  p.product_cols = padded ? p.row_stride : p.vocab;
  p.flops = 3.0 * 2.0 * static_cast<double>(p.rows) * static_cast<double>(p.width) * static_cast<double>(p.vocab);
  p.kept_ms = time_head<A>(p.rows, p.width, p.vocab, p.row_stride, p.product_cols);
  if (p.row_stride != p.vocab) {
    p.other_cols_ms = time_head<A>(p.rows, p.width, p.vocab, p.row_stride, padded ? p.vocab : p.row_stride);
    p.unpadded_ms = time_head<A>(p.rows, p.width, p.vocab, p.vocab, p.vocab);
  }
  return p;
}

}  // namespace

HeadProbe probe_head(const config::ModelConfig& model, int batch, int seq) {
  return model.precision == config::Precision::bf16 ? probe<bf16>(model, batch, seq) : probe<float>(model, batch, seq);
}

}  // namespace kgpt::probes
