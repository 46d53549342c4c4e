#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "model/gradcheck.hpp"
#include "model/ops/activations.hpp"
#include "model/ops/gelu_definition.hpp"
#include "model/precision_check.hpp"

using namespace kgpt;
using test::host_values;
using test::max_difference;

namespace {

enum class Activation { relu_squared, gelu_tanh };

const char* name_of(Activation a) { return a == Activation::relu_squared ? "relu_squared" : "gelu_tanh"; }

// The definitions, on the host in long double. GELU is PyTorch's F.gelu(x, approximate='tanh').
long double definition(Activation a, long double x) {
  if (a == Activation::relu_squared) return x > 0 ? x * x : 0;
  return test::gelu_tanh(x);
}

long double derivative(Activation a, long double x) {
  if (a == Activation::relu_squared) return x > 0 ? 2 * x : 0;
  return test::gelu_tanh_derivative(x);
}

template <class T>
void forward(Activation a, const ConstMatrix<T>& x, const Matrix<T>& y) {
  if (a == Activation::relu_squared) {
    model::ops::relu_squared_forward<T>(ExecSpace(), x, y);
  } else {
    model::ops::gelu_tanh_forward<T>(ExecSpace(), x, y);
  }
}

template <class T>
void backward(Activation a, const ConstMatrix<T>& x, const ConstMatrix<T>& dy, const Matrix<T>& dx) {
  if (a == Activation::relu_squared) {
    model::ops::relu_squared_backward<T>(ExecSpace(), x, dy, dx);
  } else {
    model::ops::gelu_tanh_backward<T>(ExecSpace(), x, dy, dx);
  }
}

// Forward, then backward twice into a dx that starts as NaN, in precision T: "y", "dx" after the
// first backward and "dx_again" after the second.
template <class T>
std::map<std::string, std::vector<double>> run(Activation a, const Matrix<double>& x_in, const Matrix<double>& dy_in) {
  const auto x = test::converted<Matrix<T>>("x", x_in);
  const auto dy = test::converted<Matrix<T>>("dy", dy_in);
  Matrix<T> y("y", x.extent(0), x.extent(1)), dx("dx", x.extent(0), x.extent(1));
  Kokkos::deep_copy(dx, std::numeric_limits<T>::quiet_NaN());
  forward<T>(a, x, y);
  std::map<std::string, std::vector<double>> r{{"y", host_values(y)}};
  backward<T>(a, x, dy, dx);
  r["dx"] = host_values(dx);
  backward<T>(a, x, dy, dx);
  r["dx_again"] = host_values(dx);
  return r;
}

// (6, 8) inputs: five rows of N(0, 1.5^2) and one row of fixed points from deep in the negative tail
// (where tanh(u) -> -1, and exp(-2u) overflows to infinity in float) to the far positive side.
Matrix<double> test_inputs() {
  Matrix<double> x("x", 6, 8);
  random::fill_normal(x, 90, 0, 1.5);
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x);
  const double fixed[8] = {-100.0, -30.0, -8.0, -2.5, 0.0, 0.75, 6.0, 30.0};
  for (int j = 0; j < 8; ++j) host(5, j) = fixed[j];
  Kokkos::deep_copy(x, host);
  return x;
}

}  // namespace

TEST_CASE("activations: forward and derivative match their definitions", "[model][activations]") {
  const auto x = test_inputs();
  const auto dy = test::random_like("dy", x, 91);
  const auto hx = host_values(x), hdy = host_values(dy);
  for (const auto a : {Activation::relu_squared, Activation::gelu_tanh}) {
    INFO(name_of(a));
    const auto r = run<double>(a, x, dy);
    for (std::size_t i = 0; i < hx.size(); ++i) {
      INFO("x = " << hx[i]);
      // Long double keeps the digits that 1 + tanh(u) loses for negative x in double, down to
      // about 1e-19 * |x|: below that even the long double definition is only rounding (at
      // x = -8 it gives 0 where the op gives -3.4e-21), hence the absolute margin.
      CHECK(r.at("y")[i] == Approx(static_cast<double>(definition(a, hx[i]))).epsilon(1e-14).margin(1e-16));
      CHECK(r.at("dx")[i] ==
            Approx(static_cast<double>(hdy[i] * derivative(a, hx[i]))).epsilon(1e-13).margin(1e-16));
    }
  }
}

TEST_CASE("activations: backward matches finite differences", "[model][activations][gradcheck]") {
  auto x = test_inputs();
  Matrix<double> y("y", x.extent(0), x.extent(1)), dx("dx", x.extent(0), x.extent(1));
  const auto w = test::random_like("w", y, 92);
  for (const auto a : {Activation::relu_squared, Activation::gelu_tanh}) {
    auto loss = [&] {
      forward<double>(a, x, y);
      return test::dot(w, y);
    };
    loss();
    backward<double>(a, x, w, dx);
    test::check_gradient(std::string(name_of(a)) + " dx", x, dx, loss);
  }
}

TEST_CASE("activations: backward overwrites dx", "[model][activations]") {
  const auto x = test_inputs();
  const auto dy = test::random_like("dy", x, 93);
  for (const auto a : {Activation::relu_squared, Activation::gelu_tanh}) {
    INFO(name_of(a));
    const auto r = run<double>(a, x, dy);
    // dx started as NaN: max_difference is infinite if any NaN was left behind.
    CHECK(max_difference(r.at("dx_again"), r.at("dx")) == 0);
  }
}

TEST_CASE("activations in float agree with double", "[model][activations][float]") {
  const auto x = test_inputs();
  const auto dy = test::random_like("dy", x, 94);
  for (const auto a : {Activation::relu_squared, Activation::gelu_tanh}) {
    const auto low = run<float>(a, x, dy);
    const auto ref = run<double>(a, x, dy);
    for (const auto& entry : ref) {
      INFO(name_of(a) << " " << entry.first << ": float against double");
      // Float rounds x, the cube and the exp at about 6e-8 each, scaled by up to |x|^2 through
      // u' and relu^2's product: this case shows up to 1e-7.
      CHECK(max_difference(low.at(entry.first), entry.second) < 1e-6);
    }
  }
}

TEST_CASE("activations on bf16 activations agree with double", "[model][activations][bf16]") {
  const auto x = test_inputs();
  const auto dy = test::random_like("dy", x, 95);
  const auto ref_relu = run<double>(Activation::relu_squared, x, dy), ref_gelu = run<double>(Activation::gelu_tanh, x, dy);
  const auto x16 = test::converted<Matrix<bf16>>("x", x), dy16 = test::converted<Matrix<bf16>>("dy", dy);
  Matrix<bf16> y("y", x.extent(0), x.extent(1)), dx("dx", x.extent(0), x.extent(1));
  model::ops::relu_squared_forward<float>(ExecSpace(), x16, y);
  model::ops::relu_squared_backward<float>(ExecSpace(), x16, dy16, dx);
  // x and dy rounded at 2^-8 relative, the results again: relu^2 doubles x's relative error.
  CHECK(max_difference(host_values(y), ref_relu.at("y")) < 2e-2);
  CHECK(max_difference(host_values(dx), ref_relu.at("dx")) < 2e-2);
  model::ops::gelu_tanh_forward<float>(ExecSpace(), x16, y);
  model::ops::gelu_tanh_backward<float>(ExecSpace(), x16, dy16, dx);
  CHECK(max_difference(host_values(y), ref_gelu.at("y")) < 2e-2);
  CHECK(max_difference(host_values(dx), ref_gelu.at("dx")) < 2e-2);
}
