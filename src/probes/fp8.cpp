#include "probes/fp8.hpp"

#include <cmath>
#include <string>
#include <vector>

#include <Kokkos_Core.hpp>

#include "core/bf16.hpp"
#include "core/error.hpp"
#include "core/host_copy.hpp"
#include "core/random.hpp"
#include "core/views.hpp"
#include "model/attention/heads.hpp"
#include "model/ops/linear.hpp"
#include "probes/timing.hpp"

namespace kgpt::probes {

using namespace kgpt::model;  // the probes run the models' own pieces

namespace {

Fp8ProbeLayer probe_layer(const std::string& name, std::size_t n, std::size_t in, std::size_t out) {
  Fp8ProbeLayer p;
  p.name = name;
  p.rows = n;
  p.in = in;
  p.out = out;
  p.native = ops::Fp8Operands<bf16>::native(n, in, out);
  const ExecSpace exec;
  const auto matrix = [&](const char* label, std::size_t rows, std::size_t cols, std::uint64_t stream, double std_dev) {
    Matrix<bf16> made(std::string("kgpt::fp8_probe::") + label, rows, cols);
    if (std_dev > 0) random::fill_normal(made, 73, stream, std_dev);
    return made;
  };
  const Matrix<bf16> x = matrix("x", n, in, 0, 1.0), w = matrix("w", out, in, 1, 0.02), dy = matrix("dy", n, out, 2, 1e-3);
  const Matrix<bf16> y = matrix("y", n, out, 0, 0), dx = matrix("dx", n, in, 0, 0);
  const Matrix<bf16> y_fp8 = matrix("y_fp8", n, out, 0, 0), dx_fp8 = matrix("dx_fp8", n, in, 0, 0);
  const Matrix<float> g("kgpt::fp8_probe::g", out, in);
  const ops::Fp8Operands<bf16> operands("kgpt::fp8_probe::", n, in, out, out * in);
  const ops::Linear<float, bf16> plain(w, g);
  const auto fp8 = ops::Linear<float, bf16>(w, g).with_fp8(&operands);
  p.bf16_ms = fastest_of_three(exec, [&] {
    ops::linear_forward(exec, plain, x, y);
    ops::linear_backward(exec, plain, x, dy, dx);
  });
  p.fp8_ms = fastest_of_three(exec, [&] {
    ops::linear_forward(exec, fp8, x, y_fp8);
    ops::linear_backward(exec, fp8, x, dy, dx_fp8);
  });
  exec.fence();
  const std::vector<double> got = host_values(y_fp8), want = host_values(y);
  double error = 0, size = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    error += (got[i] - want[i]) * (got[i] - want[i]);
    size += want[i] * want[i];
  }
  p.relative_error = size > 0 ? std::sqrt(error / size) : 0.0;
  // Each of y's terms is a product of two e4m3 values (4 significant bits: about 3.6% RMS error
  // each, 5% for the product), and the errors of a sum's terms are independent: y is off by about
  // 5% RMS. A wrong scale (a power of two) or a wrong layout is off by 50% or more.
  if (!(p.relative_error <= 0.15)) {
    throw Error(ExitCode::failure, name + ": the FP8 products' output is off the bf16 products' by " +
                                       std::to_string(p.relative_error) + " RMS (allowed 0.15)");
  }
  return p;
}

}  // namespace

std::vector<Fp8ProbeLayer> probe_fp8(const config::ModelConfig& model, int batch, int seq) {
  const std::size_t n = static_cast<std::size_t>(batch) * static_cast<std::size_t>(seq);
  const auto c = static_cast<std::size_t>(model.d_model), f = c * static_cast<std::size_t>(model.mlp_mult);
  return {probe_layer("attention qkv", n, c, head_shape(model).qkv_width()), probe_layer("attention out", n, c, c),
          probe_layer("mlp up", n, c, f), probe_layer("mlp down", n, f, c)};
}

}  // namespace kgpt::probes
