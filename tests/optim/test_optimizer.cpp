// The optimizer over a whole parameter buffer: each tensor keeps only the state its optimizer reads
// (Adam moments, or Muon momentum for Muon's matrices), and steps exactly as it would alone; the
// checkpoint's form of that state (the parameter buffer's layout, zero where a tensor keeps no such
// state) reads back into a fresh optimizer that then steps the same.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.hpp"
#include "core/error.hpp"
#include "core/host_copy.hpp"
#include "core/random.hpp"
#include "model/families/golf/golf.hpp"
#include "optim/optimizer.hpp"
#include "optim/rules/adamw/updates.hpp"
#include "optim/rules/muon/updates.hpp"
#include "support/tiny_golf.hpp"

using namespace kgpt;

namespace {

config::Config golf_config(const std::string& matrix_optimizer) {
  config::Config c = testing::tiny_golf(matrix_optimizer);
  // A decay rate of its own for each group: a group given another's rate fails the comparisons.
  c.optim.matrix_weight_decay = 0.01;
  c.optim.embed_weight_decay = 0.02;
  c.optim.head_weight_decay = 0.03;
  c.optim.scalar_weight_decay = 0.05;
  return c;
}

std::vector<double> span_of(const std::vector<double>& buffer, const model::TensorEntry& e) {
  return std::vector<double>(buffer.begin() + static_cast<std::ptrdiff_t>(e.offset),
                             buffer.begin() + static_cast<std::ptrdiff_t>(e.offset + e.size));
}

// One tensor stepped on its own, with buffers of its own, the way docs/design.md's groups say.
struct AloneTensor {
  AloneTensor(const model::TensorEntry& e, const config::Config& c, const std::vector<double>& values)
      : entry(e), p("p", e.size), g("g", e.size), m("m", e.size), v("v", e.size), momentum("momentum", e.size),
        update("update", e.size),
        work(e.size, e.spec.shape.size() == 2 ? std::min(e.spec.shape[0], e.spec.shape[1]) : 1),
        muon(optim::rule_of(e.spec.group(), c) == "muon"),
        optim(c.optim) {
    from_host(span_of(values, e), p);
  }
  void step(int step, const std::vector<double>& grads) {
    from_host(span_of(grads, entry), g);
    double lr = 0, decay = 0;
    switch (entry.spec.group()) {
      case model::ParamGroup::matrix: lr = optim.matrix_lr, decay = optim.matrix_weight_decay; break;
      case model::ParamGroup::embedding: lr = optim.embed_lr, decay = optim.embed_weight_decay; break;
      case model::ParamGroup::head: lr = optim.head_lr, decay = optim.head_weight_decay; break;
      case model::ParamGroup::scalar: lr = optim.scalar_lr, decay = optim.scalar_weight_decay; break;
    }
    if (muon) {
      const std::size_t rows = entry.spec.shape[0], cols = entry.spec.shape[1];
      const double mu = optim::muon_momentum_at(step, optim.muon_momentum_warmup_start, optim.muon_momentum,
                                                optim.muon_momentum_warmup_steps);
      optim::muon_update<double>(ExecSpace(), Matrix<double>(p.data(), rows, cols),
                                 ConstMatrix<double>(g.data(), rows, cols), Matrix<double>(momentum.data(), rows, cols),
                                 Matrix<double>(update.data(), rows, cols), lr, mu, decay,
                                 optim.muon_backend_steps, work);
      return;
    }
    optim::AdamSettings s;
    s.lr = lr;
    s.beta1 = optim.beta1;
    s.beta2 = optim.beta2;
    s.eps = optim.adam_eps;
    s.weight_decay = decay;
    optim::adam_update<double>(ExecSpace(), p, g, m, v, s, step + 1);
  }
  model::TensorEntry entry;
  Vector<double> p, g, m, v, momentum, update;
  optim::NewtonSchulzWorkspace<double> work;
  bool muon;
  config::OptimConfig optim;
};

// The state named `name` of every tensor stepped alone, in the checkpoint's form.
std::vector<double> alone_state(const std::vector<AloneTensor>& alone, std::size_t buffer_size, const std::string& name) {
  std::vector<double> whole(buffer_size, 0.0);
  for (const AloneTensor& t : alone) {
    if (t.muon != (name == "muon_momentum")) continue;
    const Vector<double>& state = name == "adam_m" ? t.m : name == "adam_v" ? t.v : t.momentum;
    const std::vector<double> host = to_host(state);
    std::copy(host.begin(), host.end(), whole.begin() + static_cast<std::ptrdiff_t>(t.entry.offset));
  }
  return whole;
}

}  // namespace

TEST_CASE("each tensor keeps only its rule's state and steps as it would alone", "[optim][optimizer]") {
  const std::string matrix_optimizer = GENERATE(as<std::string>(), "muon", "adamw");
  const config::Config c = golf_config(matrix_optimizer);
  const bool muon = matrix_optimizer == "muon";
  // Adam's tensors one launch each (the host's way) or all in one (a GPU's), in 16-byte packs or not.
  const int arrangement = GENERATE(0, 1, 2);
  const bool fused = arrangement > 0, packs = arrangement == 2;
  INFO((muon ? "muon" : "adamw") << (fused ? ", Adam's tensors in one launch" : ", Adam's tensors one by one")
                                 << (packs ? ", 16 bytes per thread" : ""));
  model::GolfModel<double> model(c.model, 2, 8);
  model::initialize(model.parameters(), 5);
  optim::Optimizer<double> optimizer(model.parameters(), c);
  optimizer.arrange(fused, packs);
  const auto& layout = model.parameters().layout();
  const std::vector<double> start = to_host(model.parameters().values());
  std::vector<AloneTensor> alone;
  for (const auto& e : layout.entries()) alone.emplace_back(e, c, start);
  REQUIRE(std::count_if(alone.begin(), alone.end(), [](const AloneTensor& t) { return t.muon; }) == (muon ? 12 : 0));

  for (int step = 0; step < 3; ++step) {
    random::fill_normal(model.parameters().grads(), 11, static_cast<std::uint64_t>(step), 0.1);
    const std::vector<double> grads = to_host(model.parameters().grads());
    // The squared norm of the raw gradients comes from the same passes.
    const Kokkos::View<double, MemSpace> norm_sq("norm_sq");
    optimizer.step(ExecSpace(), step, 1.0, nullptr, norm_sq.data());
    for (AloneTensor& t : alone) t.step(step, grads);
    double expected = 0, measured = 0;
    for (const auto& e : layout.entries()) {
      for (const double g : span_of(grads, e)) expected += g * g;
    }
    Kokkos::deep_copy(measured, norm_sq);
    CHECK(measured == Approx(expected).epsilon(1e-12));
  }
  const std::vector<double> values = to_host(model.parameters().values());
  for (const AloneTensor& t : alone) {
    INFO(t.entry.spec.name);
    const std::vector<double> together = span_of(values, t.entry), by_itself = to_host(t.p);
    // A GPU contracts multiply-adds kernel by kernel, and the step's kernels (which also sum the
    // norm, and take Adam's tensors together) are not the lone tensor's: values that cancel
    // (p - lr u near 0) keep an absolute difference of a few ulps of p.
    const double margin = backend::on_gpu ? 1e-12 : 0.0;
    for (std::size_t i = 0; i < t.entry.size; ++i) {
      CHECK(together[i] == Approx(by_itself[i]).epsilon(1e-13).margin(margin));
    }
  }
  REQUIRE(optimizer.state_names() == (muon ? std::vector<std::string>{"adam_m", "adam_v", "muon_momentum"}
                                           : std::vector<std::string>{"adam_m", "adam_v"}));
  for (const std::string& name : optimizer.state_names()) {
    INFO(name);
    const std::vector<double> stored = optimizer.state_to_host(name), expected = alone_state(alone, layout.buffer_size(), name);
    REQUIRE(stored.size() == layout.buffer_size());
    for (std::size_t i = 0; i < stored.size(); ++i) CHECK(stored[i] == Approx(expected[i]).epsilon(1e-13).margin(0));
  }

  // The bytes the memory plan counts: two Adam moments for the tensors Adam updates, one momentum for
  // Muon's matrices (each tensor aligned as in the parameter buffer), the Nesterov updates and the
  // Newton-Schulz workspaces of the largest batch of same-shape matrices, a norm part per tensor and
  // one for Adam's tensors together, where each of Adam's and Muon's tensors starts (AdamSegment,
  // MuonSegment), and each batched matrix's momentum and parameter offsets.
  const auto aligned = [](std::size_t n) { return (n + 15) / 16 * 16; };
  std::size_t adam = 0, momentum = 0, adam_tensors = 0, muon_tensors = 0;
  std::map<std::pair<std::size_t, std::size_t>, std::size_t> shapes;  // (rows, cols) -> matrices
  for (const AloneTensor& t : alone) {
    adam_tensors += t.muon ? 0 : 1;
    muon_tensors += t.muon ? 1 : 0;
    std::size_t& used = t.muon ? momentum : adam;
    used = aligned(used + t.entry.size);
    if (t.muon) ++shapes[{t.entry.spec.shape[0], t.entry.spec.shape[1]}];
  }
  std::size_t elements = 0, squares = 0, count = 0;
  for (const auto& [shape, matrices] : shapes) {
    const std::size_t side = std::min(shape.first, shape.second);
    elements = std::max(elements, matrices * shape.first * shape.second);
    squares = std::max(squares, matrices * side * side);
    count = std::max(count, matrices);
  }
  CHECK(shapes.size() == (muon ? 4u : 0u));  // golf's q and out projections, k and v, MLP up, MLP down
  CHECK(adam + momentum >= layout.buffer_size());  // the same elements, split by kind
  CHECK(adam + momentum < layout.buffer_size() + 32);
  // Muon's part only where Muon is in use.
  const std::size_t muon_bytes =
      muon ? (momentum + elements) * sizeof(double) +
                 optim::NewtonSchulzWorkspace<double>::bytes(std::max<std::size_t>(elements, 1),
                                                             std::max<std::size_t>(squares, 1), std::max<std::size_t>(count, 1)) +
                 muon_tensors * sizeof(optim::MuonSegment) +
                 2 * muon_tensors * sizeof(std::size_t)
           : 0;
  CHECK(optim::Optimizer<double>::state_bytes(layout, c) ==
        2 * adam * sizeof(double) + adam_tensors * sizeof(optim::AdamSegment) +
            (layout.entries().size() + 1) * sizeof(double) + muon_bytes);
  CHECK_THROWS_WITH(optimizer.state_to_host("adam_w"), Catch::Contains("no state 'adam_w'"));
  if (!muon) CHECK_THROWS_WITH(optimizer.state_to_host("muon_momentum"), Catch::Contains("no state 'muon_momentum'"));
}

TEST_CASE("optimizer state in the checkpoint's form reads back into a fresh optimizer", "[optim][optimizer]") {
  const config::Config c = golf_config("muon");
  model::GolfModel<double> model(c.model, 2, 8), copy(c.model, 2, 8);
  model::initialize(model.parameters(), 9);
  optim::Optimizer<double> optimizer(model.parameters(), c);
  for (int step = 0; step < 2; ++step) {
    random::fill_normal(model.parameters().grads(), 3, static_cast<std::uint64_t>(step), 0.1);
    optimizer.step(ExecSpace(), step, 1.0);
  }
  Kokkos::deep_copy(copy.parameters().values(), model.parameters().values());
  optim::Optimizer<double> fresh(copy.parameters(), c);
  for (const std::string& name : optimizer.state_names()) fresh.state_from_host(name, optimizer.state_to_host(name));
  for (const std::string& name : optimizer.state_names()) CHECK(fresh.state_to_host(name) == optimizer.state_to_host(name));

  random::fill_normal(model.parameters().grads(), 3, 2, 0.1);
  Kokkos::deep_copy(copy.parameters().grads(), model.parameters().grads());
  optimizer.step(ExecSpace(), 2, 1.0);
  fresh.step(ExecSpace(), 2, 1.0);
  CHECK(to_host(copy.parameters().values()) == to_host(model.parameters().values()));

  CHECK_THROWS_WITH(fresh.state_from_host("adam_m", std::vector<double>(3, 0.0)),
                    Catch::Contains("3 values of 'adam_m'"));
}
