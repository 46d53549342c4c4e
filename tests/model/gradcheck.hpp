#pragma once
// Finite-difference gradient checks in double. An op's backward is checked by choosing a fixed
// random upstream gradient W, defining loss = sum(W * y), and comparing each analytic input or
// parameter gradient with central differences of that loss.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "config/config.hpp"
#include "core/random.hpp"
#include "core/views.hpp"

namespace kgpt::test {

// sum(a * b) over two Views of the same shape, in double.
template <class A, class B>
double dot(const A& a, const B& b) {
  auto ha = Kokkos::create_mirror(a);
  auto hb = Kokkos::create_mirror(b);
  Kokkos::deep_copy(ha, a);
  Kokkos::deep_copy(hb, b);
  double sum = 0;
  for (std::size_t i = 0; i < a.span(); ++i) sum += static_cast<double>(ha.data()[i]) * static_cast<double>(hb.data()[i]);
  return sum;
}

// A View like `like`, filled with N(0, 1) numbers from `stream`.
template <class V>
V random_like(const std::string& label, const V& like, std::uint64_t stream, double std_dev = 1.0) {
  V out(label, like.layout());
  kgpt::random::fill_normal(out, 1234, stream, std_dev);
  return out;
}

// Compares `analytic` (the gradient of loss() with respect to `param`) with central differences,
// element by element: |analytic - numeric| <= tol * max(1, |numeric|). `loss` must recompute the
// forward from the current contents of `param`. Checks at most `max_checks` elements, spread evenly.
template <class Param, class Grad, class Loss>
void check_gradient(const std::string& name, const Param& param, const Grad& analytic, Loss&& loss, double tol = 1e-6,
                    double step = 1e-6, std::size_t max_checks = 400) {
  REQUIRE(param.span() == analytic.span());
  auto host_param = Kokkos::create_mirror(param);
  auto host_grad = Kokkos::create_mirror(analytic);
  Kokkos::deep_copy(host_param, param);
  Kokkos::deep_copy(host_grad, analytic);
  const std::size_t n = param.span();
  const std::size_t stride = n > max_checks ? (n + max_checks - 1) / max_checks : 1;
  double worst = 0;
  for (std::size_t i = 0; i < n; i += stride) {
    const double original = host_param.data()[i];
    host_param.data()[i] = original + step;
    Kokkos::deep_copy(param, host_param);
    const double plus = loss();
    host_param.data()[i] = original - step;
    Kokkos::deep_copy(param, host_param);
    const double minus = loss();
    host_param.data()[i] = original;
    Kokkos::deep_copy(param, host_param);
    const double numeric = (plus - minus) / (2 * step);
    const double a = host_grad.data()[i];
    const double error = std::fabs(a - numeric) / std::max(1.0, std::fabs(numeric));
    worst = std::max(worst, error);
    if (error > tol) {
      INFO(name << "[" << i << "]: analytic " << a << ", finite difference " << numeric);
      CHECK(error <= tol);
    }
  }
  INFO(name << ": worst relative error " << worst);
  CHECK(worst <= tol);
}

// The whole gradient of a model's mean loss on one batch, tensor by tensor, against finite
// differences (at most `per_tensor` elements of each tensor, spread evenly).
template <class Model>
void check_model_gradient(Model& model, const TokenMatrix& inputs, const TokenMatrix& targets, std::size_t per_tensor = 24) {
  auto loss = [&] { return model.forward(ExecSpace(), inputs, targets); };
  loss();
  Kokkos::deep_copy(model.parameters().grads(), 0.0);
  model.backward(ExecSpace(), 1.0);
  const auto& params = model.parameters();
  for (const auto& entry : params.layout().entries()) {
    Vector<double> value(params.values().data() + entry.offset, entry.size);
    Vector<double> grad(params.grads().data() + entry.offset, entry.size);
    check_gradient(entry.spec.name, value, grad, loss, 1e-6, 1e-6, per_tensor);
  }
}

// A (B, T) matrix of token ids below `vocab`, the same for the same stream.
inline TokenMatrix random_tokens(int b, int t, int vocab, std::uint64_t stream) {
  TokenMatrix tokens("tokens", b, t);
  auto host = Kokkos::create_mirror_view(tokens);
  for (int i = 0; i < b * t; ++i) host.data()[i] = static_cast<int>(kgpt::random::bits(7, stream, i) % vocab);
  Kokkos::deep_copy(tokens, host);
  return tokens;
}

// The mean loss of one batch and the gradient of the whole parameter buffer, from zeroed gradients.
template <class Model>
std::pair<double, std::vector<double>> loss_and_gradient(Model& model, const TokenMatrix& inputs,
                                                         const TokenMatrix& targets) {
  using T = typename std::decay_t<decltype(model.parameters().grads())>::non_const_value_type;
  Kokkos::deep_copy(model.parameters().grads(), T(0));
  const double loss = model.forward(ExecSpace(), inputs, targets);
  model.backward(ExecSpace(), T(1));
  auto g = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), model.parameters().grads());
  return {loss, std::vector<double>(g.data(), g.data() + g.span())};
}

// A float model and a model with bf16 activations holding the same parameters. Activations rounded at
// 2^-8 relative through a few blocks move the loss by a few 1e-3 of itself and the gradient by a few
// percent of its norm: the loss must agree within 1e-2 relative, the gradient within 5e-2 of its
// norm, and the losses must differ (equal results would mean bf16 never ran).
template <class Float, class Low>
void check_bf16_near_float(Float& reference, Low& low, const TokenMatrix& inputs, const TokenMatrix& targets) {
  const auto [loss, grad] = loss_and_gradient(reference, inputs, targets);
  const auto [low_loss, low_grad] = loss_and_gradient(low, inputs, targets);
  CHECK(low_loss == Approx(loss).epsilon(1e-2));
  CHECK(low_loss != loss);
  REQUIRE(low_grad.size() == grad.size());
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < grad.size(); ++i) {
    diff += (low_grad[i] - grad[i]) * (low_grad[i] - grad[i]);
    norm += grad[i] * grad[i];
  }
  CHECK(std::sqrt(diff / norm) < 5e-2);
}

// One model with the GEMM and with the fused attention (config.attention set to each), its
// parameters set by `randomize`: the loss and every gradient agree to rounding.
template <class Model, class Config, class Randomize>
void check_attention_kinds_agree(Config config, int vocab, const Randomize& randomize) {
  std::vector<std::vector<double>> grads;
  std::vector<double> losses;
  for (kgpt::config::Attention kind : {kgpt::config::Attention::gemm, kgpt::config::Attention::fused}) {
    config.attention = kind;
    Model model(config, 2, 9);
    randomize(model);
    auto [loss, grad] = loss_and_gradient(model, random_tokens(2, 9, vocab, 7), random_tokens(2, 9, vocab, 8));
    losses.push_back(loss);
    grads.push_back(std::move(grad));
  }
  CHECK(losses[1] == Approx(losses[0]).epsilon(1e-13));
  double worst = 0;
  for (std::size_t i = 0; i < grads[0].size(); ++i) {
    worst = std::max(worst, std::fabs(grads[1][i] - grads[0][i]) / std::max(1.0, std::fabs(grads[0][i])));
  }
  CHECK(worst < 1e-12);
}

}  // namespace kgpt::test
