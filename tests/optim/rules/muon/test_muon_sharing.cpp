// Muon's matrices shared among ranks: each rank orthogonalises whole matrices, balanced by their
// arithmetic, and every rank ends with the parameters and momentum of one rank that did them all.
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.hpp"
#include "core/host_copy.hpp"
#include "core/random.hpp"
#include "model/families/golf/golf.hpp"
#include "optim/optimizer.hpp"
#include "optim/rules/muon/muon.hpp"
#include "optim/rules/muon/newton_schulz.hpp"
#include "support/tiny_golf.hpp"

using namespace kgpt;

namespace {

config::Config golf_config() {
  config::Config c = testing::tiny_golf("muon");
  c.optim.matrix_weight_decay = 0.01;
  return c;
}

// Muon's setup over the whole layout: every matrix, shared by `ranks`.
optim::RuleSetup muon_setup(const model::ParameterLayout& layout, const config::Config& c, int ranks) {
  optim::RuleSetup setup;
  setup.layout = &layout;
  setup.config = &c;
  setup.shard = optim::whole_layout(layout);
  setup.sharing = {0, ranks};
  for (std::size_t i = 0; i < layout.entries().size(); ++i) {
    if (layout.entries()[i].spec.group() == model::ParamGroup::matrix) setup.tensors.push_back(i);
  }
  return setup;
}

}  // namespace

TEST_CASE("Muon's matrices go to the ranks whole, balanced by their Newton-Schulz arithmetic", "[optim][muon]") {
  config::Config c = golf_config();
  c.model.n_layer = 9;  // golf's depth: 54 matrices of four shapes
  c.model.d_model = 64;
  c.model.n_head = 4;
  c.model.n_kv_head = 2;
  const model::GolfModel<float> model(c.model, 1, 8);
  const auto& layout = model.parameters().layout();
  for (const int ranks : {1, 2, 3, 4, 8, 64}) {
    INFO(ranks << " ranks");
    const optim::RuleSetup setup = muon_setup(layout, c, ranks);
    std::vector<double> loads;
    const std::vector<int> owners = optim::muon_owners(setup, &loads);
    REQUIRE(owners.size() == setup.tensors.size());
    std::vector<double> load(static_cast<std::size_t>(ranks), 0.0);
    double largest = 0, matrices = 0;
    for (std::size_t k = 0; k < owners.size(); ++k) {
      const model::TensorEntry& e = layout.entries()[setup.tensors[k]];
      REQUIRE(owners[k] >= 0);
      REQUIRE(owners[k] < ranks);
      const double flops = optim::newton_schulz_flops(e.spec.shape[0], e.spec.shape[1], c.optim.muon_backend_steps);
      load[static_cast<std::size_t>(owners[k])] += flops;
      largest = std::max(largest, flops);
      ++matrices;
    }
    CHECK(matrices == 54);
    // The costliest first, each to the least loaded rank: no rank is more than one matrix ahead of
    // another, and with as many ranks as matrices or more, one each.
    const auto [least, most] = std::minmax_element(load.begin(), load.end());
    CHECK(*most - *least <= largest);
    if (ranks >= 54) CHECK(*most == largest);
    CHECK(owners == optim::muon_owners(setup));  // the same on every rank
    CHECK(loads == load);
    // The optimizer's loads are Muon's: golf's other rules split nothing.
    CHECK(optim::shared_loads(layout, c, optim::whole_layout(layout), ranks) == load);
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
  config::Config c = golf_config();
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
                                                                   optim::Sharing{r, ranks}));
    shares += optimizers.back()->shared_work_share();
    CHECK(optimizers.back()->shared_work_share() < 1.0);
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
