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
#include "optim/updates.hpp"

using namespace kgpt;

namespace {

config::Config golf_config(config::MatrixOptimizer matrix_optimizer) {
  config::Config c;
  c.model.family = "golf";
  c.model.vocab_size = 37;
  c.model.n_layer = 2;
  c.model.d_model = 16;
  c.model.n_head = 2;
  c.model.n_kv_head = 1;
  c.model.mlp_mult = 2;
  c.optim.matrix_optimizer = matrix_optimizer;
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
        muon(c.optim.matrix_optimizer == config::MatrixOptimizer::muon && e.spec.group() == model::ParamGroup::matrix),
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

TEST_CASE("each tensor keeps only its optimizer's state and steps as it would alone", "[optim][optimizer]") {
  const auto matrix_optimizer = GENERATE(config::MatrixOptimizer::muon, config::MatrixOptimizer::adamw);
  const config::Config c = golf_config(matrix_optimizer);
  const bool muon = matrix_optimizer == config::MatrixOptimizer::muon;
  // Adam's tensors one launch each (the host's way) or all in one (a GPU's), in 16-byte packs or not.
  const int arrangement = GENERATE(0, 1, 2);
  const bool fused = arrangement > 0, packs = arrangement == 2;
  INFO((muon ? "muon" : "adamw") << (fused ? ", Adam's tensors in one launch" : ", Adam's tensors one by one")
                                 << (packs ? ", 16 bytes per thread" : ""));
  model::GolfModel<double> model(c.model, 2, 8);
  model::initialize(model.parameters(), 5);
  optim::Optimizer<double> optimizer(model.parameters(), c);
  optimizer.fuse_adam(fused, packs);
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
  CHECK(optim::Optimizer<double>::state_bytes(layout, c) ==
        (2 * adam + momentum + elements) * sizeof(double) +
            optim::NewtonSchulzWorkspace<double>::bytes(std::max<std::size_t>(elements, 1), std::max<std::size_t>(squares, 1),
                                                        std::max<std::size_t>(count, 1)) +
            optim::NewtonSchulzWorkspace<bf16>::bytes(1, 1, 1) + (layout.entries().size() + 1) * sizeof(double) +
            adam_tensors * sizeof(optim::AdamSegment) + muon_tensors * sizeof(optim::MuonSegment) +
            2 * muon_tensors * sizeof(std::size_t));
  CHECK_THROWS_WITH(optimizer.state_to_host("adam_w"), Catch::Contains("no state 'adam_w'"));
  if (!muon) CHECK_THROWS_WITH(optimizer.state_to_host("muon_momentum"), Catch::Contains("no state 'muon_momentum'"));
}

TEST_CASE("optimizer state in the checkpoint's form reads back into a fresh optimizer", "[optim][optimizer]") {
  const config::Config c = golf_config(config::MatrixOptimizer::muon);
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

TEST_CASE("Muon's matrices go to the ranks whole, balanced by their Newton-Schulz arithmetic", "[optim][muon]") {
  config::Config c = golf_config(config::MatrixOptimizer::muon);
  c.model.n_layer = 9;  // golf's depth: 54 matrices of four shapes
  c.model.d_model = 64;
  c.model.n_head = 4;
  c.model.n_kv_head = 2;
  const model::GolfModel<float> model(c.model, 1, 8);
  const auto& layout = model.parameters().layout();
  const optim::Shard whole = optim::whole_layout(layout);
  for (const int ranks : {1, 2, 3, 4, 8, 64}) {
    INFO(ranks << " ranks");
    const std::vector<int> owners = optim::muon_owners(layout, c, whole, ranks);
    REQUIRE(owners.size() == layout.entries().size());
    std::vector<double> load(static_cast<std::size_t>(ranks), 0.0);
    double largest = 0, matrices = 0;
    for (std::size_t i = 0; i < owners.size(); ++i) {
      const model::TensorEntry& e = layout.entries()[i];
      const bool muon = e.spec.group() == model::ParamGroup::matrix;
      CHECK((owners[i] >= 0) == muon);  // every matrix of Muon's, nothing else
      if (!muon) continue;
      REQUIRE(owners[i] < ranks);
      const double flops = optim::newton_schulz_flops(e.spec.shape[0], e.spec.shape[1], c.optim.muon_backend_steps);
      load[static_cast<std::size_t>(owners[i])] += flops;
      largest = std::max(largest, flops);
      ++matrices;
    }
    CHECK(matrices == 54);
    // The costliest first, each to the least loaded rank: no rank is more than one matrix ahead of
    // another, and with as many ranks as matrices or more, one each.
    const auto [least, most] = std::minmax_element(load.begin(), load.end());
    CHECK(*most - *least <= largest);
    if (ranks >= 54) CHECK(*most == largest);
    CHECK(owners == optim::muon_owners(layout, c, whole, ranks));  // the same on every rank
  }
  // Golf's widths: 1024 x 512 and 512 x 1024 cost the most, 256 x 512 the least (m^2 n terms).
  CHECK(optim::newton_schulz_flops(1024, 512, 5) == optim::newton_schulz_flops(512, 1024, 5));
  CHECK(optim::newton_schulz_flops(512, 512, 5) == 5 * 6.0 * 512 * 512 * 512);
  CHECK(optim::newton_schulz_flops(256, 512, 5) < optim::newton_schulz_flops(512, 512, 5));
}

TEST_CASE("Muon shared by several ranks updates every matrix as one rank does, bit for bit", "[optim][muon]") {
  // Each rank steps its own copy of the model from the same state and gradients. The exchange is
  // played in two passes: every rank's step records the updates it wrote (zeros elsewhere), then,
  // from the state before that step, every rank steps again and receives all the records combined,
  // as the transports combine them. Every rank must then hold the unshared optimizer's parameters
  // and momentum exactly.
  config::Config c = golf_config(config::MatrixOptimizer::muon);
  const bool bf16 = GENERATE(false, true);
  c.model.precision = bf16 ? config::Precision::bf16 : config::Precision::fp32;
  c.model.attention = config::Attention::gemm;  // no forward runs here; any attention builds
  const int ranks = GENERATE(2, 3, 4);
  INFO(ranks << " ranks, Newton-Schulz in " << (bf16 ? "bf16" : "fp32"));
  model::GolfModel<float> reference(c.model, 2, 8);
  model::initialize(reference.parameters(), 21);
  optim::Optimizer<float> unshared(reference.parameters(), c);
  std::vector<std::unique_ptr<model::GolfModel<float>>> models;
  std::vector<std::unique_ptr<optim::Optimizer<float>>> optimizers;
  const optim::Shard whole = optim::whole_layout(reference.parameters().layout());
  double shares = 0;
  for (int r = 0; r < ranks; ++r) {
    models.push_back(std::make_unique<model::GolfModel<float>>(c.model, 2, 8));
    Kokkos::deep_copy(models.back()->parameters().values(), reference.parameters().values());
    optimizers.push_back(std::make_unique<optim::Optimizer<float>>(models.back()->parameters(), c, whole,
                                                                   optim::MuonSharing{r, ranks}));
    shares += optimizers.back()->muon_share();
    CHECK(optimizers.back()->muon_share() < 1.0);
  }
  CHECK(shares == Approx(1.0));
  using Bytes = Kokkos::View<unsigned char*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  for (int step = 0; step < 3; ++step) {
    random::fill_normal(reference.parameters().grads(), 17, static_cast<std::uint64_t>(step), 0.1);
    unshared.step(ExecSpace(), step, 1.0);
    std::vector<std::vector<unsigned char>> written(static_cast<std::size_t>(ranks));
    for (int r = 0; r < ranks; ++r) {
      model::Parameters<float>& params = models[static_cast<std::size_t>(r)]->parameters();
      optim::Optimizer<float>& optimizer = *optimizers[static_cast<std::size_t>(r)];
      Kokkos::deep_copy(params.grads(), reference.parameters().grads());
      const std::vector<float> values = to_host(params.values());
      std::vector<std::vector<float>> state;
      for (const std::string& name : optimizer.state_names()) state.push_back(optimizer.state_to_host(name));
      optimizer.exchange_with([&written, r](const ExecSpace& exec, void* data, std::size_t bytes) {
        exec.fence();
        const Bytes device(static_cast<unsigned char*>(data), bytes);
        auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), device);
        written[static_cast<std::size_t>(r)].assign(host.data(), host.data() + bytes);
      });
      optimizer.step(ExecSpace(), step, 1.0);
      // Back to the state before the step, for the second pass.
      from_host(values, params.values());
      for (std::size_t k = 0; k < state.size(); ++k) optimizer.state_from_host(optimizer.state_names()[k], state[k]);
    }
    for (int r = 0; r < ranks; ++r) {
      model::Parameters<float>& params = models[static_cast<std::size_t>(r)]->parameters();
      optim::Optimizer<float>& optimizer = *optimizers[static_cast<std::size_t>(r)];
      optimizer.exchange_with([&written](const ExecSpace& exec, void* data, std::size_t bytes) {
        std::vector<unsigned char> combined(bytes, 0);
        for (const auto& from : written) {
          REQUIRE(from.size() == bytes);
          for (std::size_t i = 0; i < bytes; ++i) combined[i] |= from[i];
        }
        const Bytes device(static_cast<unsigned char*>(data), bytes);
        const Kokkos::View<const unsigned char*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> host(
            combined.data(), bytes);
        Kokkos::deep_copy(exec, device, host);
      });
      optimizer.step(ExecSpace(), step, 1.0);
      INFO("rank " << r << ", step " << step);
      const std::vector<float> values = to_host(params.values()), expected = to_host(reference.parameters().values());
      if (!backend::on_gpu) {
        CHECK(values == expected);
      } else {
        // cuBLASLt may pick another algorithm for a batch of another size (a rank's share of a shape
        // against all of it): one rounding of Newton-Schulz's output, at most about an ulp of its
        // type, times the step (lr 0.04 here, times the shape's scale of at most 2).
        const double ulp = bf16 ? 1.0 / 128 : 1e-5;
        for (std::size_t i = 0; i < values.size(); ++i) REQUIRE(std::abs(values[i] - expected[i]) <= 0.04 * 2 * ulp);
      }
      // Every rank applies the same exchanged updates, and the momentum does not depend on them.
      CHECK(values == to_host(models.front()->parameters().values()));
      CHECK(optimizer.state_to_host("muon_momentum") == unshared.state_to_host("muon_momentum"));
    }
    if (backend::on_gpu) Kokkos::deep_copy(reference.parameters().values(), models.front()->parameters().values());
  }
  // Without a way to exchange, a shared step refuses to run.
  optimizers.front()->exchange_with(nullptr);
  CHECK_THROWS_WITH(optimizers.front()->step(ExecSpace(), 3, 1.0), Catch::Contains("no exchange of their updates"));
}
