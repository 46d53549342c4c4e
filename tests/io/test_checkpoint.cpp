// Checkpoint round trip: every tensor and every optimizer state buffer comes back bit for bit, and
// loading refuses another architecture, a corrupted file and a missing one with messages that
// name the file and the tensor.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <fstream>

#include "core/error.hpp"
#include "core/host_copy.hpp"
#include "core/random.hpp"
#include "io/hdf5_file.hpp"
#include "model/families/golf/golf.hpp"
#include "optim/optimizer.hpp"
#include "support/temp_dir.hpp"
#include "io/checkpoint.hpp"

using namespace kgpt;

namespace {

config::Config tiny_config(int d_model = 16) {
  config::Config c;
  c.model.family = "golf";
  c.model.vocab_size = 61;
  c.model.n_layer = 2;
  c.model.d_model = d_model;
  c.model.n_head = 2;
  c.model.n_kv_head = 1;
  c.model.mlp_mult = 2;
  return c;
}

// A model and optimizer with non-trivial state: random weights, then two optimizer steps on
// random gradients.
struct Trained {
  explicit Trained(const config::Config& c, std::uint64_t seed) : model(c.model, 2, 8), optimizer(model.parameters(), c) {
    model::initialize(model.parameters(), seed);
    for (int step = 0; step < 2; ++step) {
      random::fill_normal(model.parameters().grads(), seed, 100 + step, 0.1);
      optimizer.step(ExecSpace(), step, 1.0);
    }
  }
  // Writes its checkpoint of `step` (no other training state, no metadata) into run_dir.
  std::string write(const std::string& run_dir, std::int64_t step,
                    const io::CheckpointPolicy& policy = io::CheckpointPolicy{}) const {
    io::CheckpointState state;
    state.step = step;
    return io::write_checkpoint(run_dir, model.parameters(), optimizer, state, io::RunMetadata{}, policy);
  }
  model::GolfModel<float> model;
  optim::Optimizer<float> optimizer;
};

// A copy of `path` with the lowest bit of the first stored float equal to `value` flipped, as silent
// corruption on disk would do.
void copy_with_bit_flipped(const std::string& path, const std::string& copy, float value) {
  {
    std::ifstream in(path, std::ios::binary);
    std::ofstream out(copy, std::ios::binary);
    out << in.rdbuf();
  }
  std::fstream raw(copy, std::ios::in | std::ios::out | std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(raw)), std::istreambuf_iterator<char>());
  std::size_t at = std::string::npos;
  for (std::size_t i = 0; i + sizeof(float) <= bytes.size(); ++i) {
    float candidate;
    std::memcpy(&candidate, bytes.data() + i, sizeof(float));
    if (candidate == value) {
      at = i;
      break;
    }
  }
  REQUIRE(at != std::string::npos);
  raw.seekp(static_cast<std::streamoff>(at));
  raw.put(static_cast<char>(bytes[at] ^ 1));
}

}  // namespace

TEST_CASE("a checkpoint reads back bit for bit into a fresh model and optimizer", "[train][checkpoint]") {
  test::TempDir dir;
  const config::Config c = tiny_config();
  Trained saved(c, 7);
  io::CheckpointState state;
  state.step = 2;
  state.tokens_seen = 4096;
  state.stream_position = 4112;
  state.training_seconds = 1.25;
  state.seed = 7;
  io::RunMetadata metadata;
  metadata.deck_text = "model:\n  family: golf\n";
  const std::string path = io::write_checkpoint(dir.path(), saved.model.parameters(), saved.optimizer, state,
                                                   metadata, io::CheckpointPolicy{});
  CHECK(path == io::checkpoint_path(dir.path(), 2));

  Trained loaded(c, 99);  // different weights and state before loading
  REQUIRE(to_host(loaded.model.parameters().values()) != to_host(saved.model.parameters().values()));
  const io::CheckpointState back = io::load_checkpoint(path, loaded.model.parameters(), loaded.optimizer);
  CHECK(back.step == 2);
  CHECK(back.tokens_seen == 4096);
  CHECK(back.stream_position == 4112u);
  CHECK(back.training_seconds == 1.25);
  CHECK(back.seed == 7);
  CHECK(to_host(loaded.model.parameters().values()) == to_host(saved.model.parameters().values()));
  REQUIRE(saved.optimizer.state_names().size() == 3);  // golf: adam_m, adam_v, muon_momentum
  for (const std::string& name : saved.optimizer.state_names()) {
    INFO(name);
    CHECK(loaded.optimizer.state_to_host(name) == saved.optimizer.state_to_host(name));
  }
  // In the file each state group holds every tensor, zero where the tensor's optimizer keeps none:
  // Muon's matrices have no Adam moments, the embedding no momentum.
  io::Hdf5File file(path, io::Hdf5File::Mode::read);
  const auto& layout = saved.model.parameters().layout();
  for (const auto& e : layout.entries()) {
    INFO(e.spec.name);
    std::vector<float> m(e.size), momentum(e.size);
    file.read_floats("/optim/adam_m/" + e.spec.name, m.data());
    file.read_floats("/optim/muon_momentum/" + e.spec.name, momentum.data());
    const auto nonzero = [](const std::vector<float>& x) { return std::any_of(x.begin(), x.end(), [](float v) { return v != 0.0f; }); };
    const bool matrix = e.spec.group() == model::ParamGroup::matrix;
    CHECK(nonzero(m) == !matrix);
    CHECK(nonzero(momentum) == matrix);
  }
}

TEST_CASE("checkpoints are pruned to the newest keep_last plus every keep_every-th", "[train][checkpoint]") {
  test::TempDir dir;
  const config::Config c = tiny_config();
  Trained t(c, 3);
  io::CheckpointPolicy policy;
  policy.keep_last = 2;
  policy.keep_every = 4;
  for (int step = 1; step <= 9; ++step) t.write(dir.path(), step, policy);
  CHECK(io::list_checkpoints(dir.path()) ==
        std::vector<std::string>{io::checkpoint_path(dir.path(), 9), io::checkpoint_path(dir.path(), 8),
                                 io::checkpoint_path(dir.path(), 4)});
}

TEST_CASE("loading refuses another architecture, a corrupted file and a missing one", "[train][checkpoint]") {
  test::TempDir dir;
  Trained saved(tiny_config(), 5);
  const std::string path = saved.write(dir.path(), 1);
  Trained wider(tiny_config(32), 5);
  CHECK_THROWS_WITH(io::load_checkpoint(path, wider.model.parameters(), wider.optimizer),
                    Catch::Contains(path) && Catch::Contains("'/params/tok_emb.weight' is (61, 16) in the checkpoint") &&
                        Catch::Contains("(61, 32) in this model"));

  // One changed bit in a stored float, as silent corruption on disk would do: the checksum catches
  // it, and the model is left as it was.
  const std::string copy = dir.file("changed.h5");
  copy_with_bit_flipped(path, copy, to_host(saved.model.parameters().values())[5]);
  Trained fresh(tiny_config(), 11);
  const auto before = to_host(fresh.model.parameters().values());
  CHECK_THROWS_WITH(io::load_checkpoint(copy, fresh.model.parameters(), fresh.optimizer),
                    Catch::Contains(copy) && Catch::Contains("checksum mismatch"));
  CHECK(to_host(fresh.model.parameters().values()) == before);

  CHECK_THROWS_WITH(io::load_checkpoint(dir.file("none.h5"), fresh.model.parameters(), fresh.optimizer),
                    Catch::Contains(dir.file("none.h5")));
}

TEST_CASE("reading only the weights still checks the optimizer state's checksum", "[train][checkpoint]") {
  test::TempDir dir;
  const config::Config c = tiny_config();
  Trained saved(c, 5);
  const std::string path = saved.write(dir.path(), 3);
  model::GolfModel<float> weights(c.model, 2, 8);
  CHECK(io::load_checkpoint_weights(path, weights.parameters(), c).step == 3);
  CHECK(to_host(weights.parameters().values()) == to_host(saved.model.parameters().values()));

  // A changed bit in the Muon momentum, which a weights-only read does not keep, is still caught.
  const std::vector<float> momentum = saved.optimizer.state_to_host("muon_momentum");
  const auto stored = std::find_if(momentum.begin(), momentum.end(), [](float v) { return v != 0.0f; });
  REQUIRE(stored != momentum.end());
  const std::string copy = dir.file("changed.h5");
  copy_with_bit_flipped(path, copy, *stored);
  model::GolfModel<float> fresh(c.model, 2, 8);
  CHECK_THROWS_WITH(io::load_checkpoint_weights(copy, fresh.parameters(), c),
                    Catch::Contains(copy) && Catch::Contains("checksum mismatch"));
}
