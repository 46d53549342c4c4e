#include "probes/gelu.hpp"

#include <algorithm>
#include <string>
#include <type_traits>

#include <Kokkos_Core.hpp>

#include "core/bf16.hpp"
#include "core/error.hpp"
#include "core/host_copy.hpp"
#include "core/random.hpp"
#include "core/views.hpp"
#include "model/gemm/gemm.hpp"
#include "model/ops/launch.hpp"
#include "model/ops/linear.hpp"
#include "probes/timing.hpp"

namespace kgpt::probes {

using namespace kgpt::model;  // the probes run the models' own pieces

namespace {

template <class A>
GeluProbe probe(const config::ModelConfig& model, int batch, int seq) {
  GeluProbe p;
  p.rows = static_cast<std::size_t>(batch) * static_cast<std::size_t>(seq);
  p.width = static_cast<std::size_t>(model.d_model);
  p.hidden = p.width * static_cast<std::size_t>(model.mlp_mult);
  const std::size_t n = p.rows, c = p.width, f = p.hidden;
  const ExecSpace exec;
  const auto matrix = [](const char* label, std::size_t rows, std::size_t cols, std::uint64_t stream, double std_dev) {
    Matrix<A> made(std::string("kgpt::gelu_probe::") + label, rows, cols);
    if (std_dev > 0) random::fill_normal(made, 72, stream, std_dev);
    return made;
  };
  const Matrix<A> h = matrix("h", n, c, 0, 1.0), dy = matrix("dy", n, c, 1, 1.0);
  const Matrix<A> w_up = matrix("w_up", f, c, 2, 0.02), w_down = matrix("w_down", c, f, 3, 0.02);
  Vector<A> b_up("kgpt::gelu_probe::b_up", f), b_down("kgpt::gelu_probe::b_down", c);
  random::fill_normal(b_up, 72, 4, 0.02);
  const Matrix<float> g_up("kgpt::gelu_probe::g_up", f, c), g_down("kgpt::gelu_probe::g_down", c, f);
  const Vector<float> gb_up("kgpt::gelu_probe::gb_up", f), gb_down("kgpt::gelu_probe::gb_down", c);
  const ops::Linear<float, A> up(w_up, g_up, b_up, gb_up), down(w_down, g_down, b_down, gb_down);
  Kokkos::View<float*, MemSpace> partial_memory("kgpt::gelu_probe::partials", ops::ColumnSums<float, 1>::workspace(n, c));
  const Workspace<float> partials(partial_memory.data(), partial_memory.size(), "kgpt::gelu_probe::partials");
  const Matrix<A> pre = matrix("pre", n, f, 0, 0), act = matrix("act", n, f, 0, 0), d_pre = matrix("d_pre", n, f, 0, 0);
  const Matrix<A> pre_apart = matrix("pre_apart", n, f, 0, 0), act_apart = matrix("act_apart", n, f, 0, 0),
                  d_pre_apart = matrix("d_pre_apart", n, f, 0, 0);

  // Both ways of ops/linear.hpp, whatever model.gelu_epilogue says: GELU in the products where the
  // backend can, and the products and the activation's kernels apart.
  const auto in_products = [&] {
    ops::linear_gelu_forward(exec, up, h, pre, act, true);
    ops::linear_backward_into_gelu(exec, down, act, pre, dy, d_pre, true, partials);
  };
  const auto apart = [&] {
    ops::linear_gelu_forward(exec, up, h, pre_apart, act_apart, false);
    ops::linear_backward_into_gelu(exec, down, act_apart, pre_apart, dy, d_pre_apart, false, partials);
  };
  p.fused_forward = gemm_gelu(exec, GeluEpilogue::forward, Op::none, Op::transpose, h, w_up, ConstVector<A>(b_up), pre, act);
  p.fused_backward = gemm_gelu(exec, GeluEpilogue::backward, Op::none, Op::none, dy, w_down, ConstVector<A>(), pre, d_pre);
  p.apart_ms = fastest_of_three(exec, apart);
  if (p.fused_forward || p.fused_backward) p.fused_ms = fastest_of_three(exec, in_products);
  else in_products();
  exec.fence();
  p.max_difference = std::max(max_relative_difference(host_values(act), host_values(act_apart)),
                              max_relative_difference(host_values(d_pre), host_values(d_pre_apart)));
  // bf16: the fused product rounds the pre-activation after GELU reads it, the separate kernels
  // before, and each output is rounded once more (2^-8). fp32: sums of another order differ by
  // ~1e-6 here, while a GELU of another form (erf) would be up to 4.7e-4 off.
  p.tolerance = std::is_same<A, bf16>::value ? 2e-2 : 5e-5;
  if (!(p.max_difference <= p.tolerance)) {
    throw Error(ExitCode::failure, "GELU in the products and GELU apart differ by " + std::to_string(p.max_difference) +
                                       " (allowed " + std::to_string(p.tolerance) + ")");
  }
  return p;
}

}  // namespace

GeluProbe probe_gelu(const config::ModelConfig& model, int batch, int seq) {
  return model.precision == config::Precision::bf16 ? probe<bf16>(model, batch, seq) : probe<float>(model, batch, seq);
}

}  // namespace kgpt::probes
