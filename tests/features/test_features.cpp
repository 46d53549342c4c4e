// Step features (features/feature.hpp) through their registry: each registered feature reads deck
// keys that exist, is built only when its deck asks for it, plans the memory it allocates, and keeps
// in a checkpoint what comes back bit for bit; the averages swap in and out exactly and --weights
// refuses what stands for no model; late QAT rounds the block matrices and puts the live weights
// back before the update.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "config/schema.hpp"
#include "core/error.hpp"
#include "core/host_copy.hpp"
#include "core/profile.hpp"
#include "core/random.hpp"
#include "features/registry.hpp"
#include "io/checkpoint.hpp"
#include "model/families/golf/golf.hpp"
#include "optim/optimizer.hpp"
#include "quant/rows.hpp"
#include "support/temp_dir.hpp"

using namespace kgpt;

namespace {

config::Config tiny_config() {
  config::Config c;
  c.model.family = "golf";
  c.model.vocab_size = 61;
  c.model.n_layer = 2;
  c.model.d_model = 16;
  c.model.n_head = 2;
  c.model.n_kv_head = 1;
  c.model.mlp_mult = 2;
  return c;
}

// Every registered feature switched on.
config::Config all_on() {
  config::Config c = tiny_config();
  c.train.ema_decay = 0.9;
  c.train.swa_every = 2;
  c.train.swa_start_lr = 0.5;
  c.train.qat_start_lr = 0.5;
  c.train.warmup_steps = 1;
  return c;
}

features::StepFeature* named(const features::StepFeatures& all, const std::string& name) {
  for (const auto& f : all) {
    if (name == f->name()) return f.get();
  }
  return nullptr;
}

// Random weights in the tensors of `layout`, zero in the alignment padding between them (as the
// parameters keep it, and as checkpoints store it).
std::vector<float> random_values(const model::ParameterLayout& layout, std::uint64_t seed) {
  Vector<float> v("values", layout.buffer_size());
  random::fill_normal(v, seed, 0, 1.0);
  const std::vector<float> all = to_host(v);
  std::vector<float> values(all.size(), 0.0f);
  for (const auto& entry : layout.entries()) {
    std::copy(all.begin() + static_cast<std::ptrdiff_t>(entry.offset),
              all.begin() + static_cast<std::ptrdiff_t>(entry.offset + entry.size),
              values.begin() + static_cast<std::ptrdiff_t>(entry.offset));
  }
  return values;
}

}  // namespace

TEST_CASE("every registered feature reads deck keys of the schema and is built only when asked for", "[features]") {
  const config::Config off = tiny_config(), on = all_on();
  const model::GolfModel<float> model(off.model, 1, 8);
  const model::ParameterLayout& layout = model.parameters().layout();
  REQUIRE(features::registered_features().size() >= 2);
  for (const features::FeatureEntry& entry : features::registered_features()) {
    INFO(entry.folder);
    CHECK(!entry.keys.empty());
    for (const char* key : entry.keys) CHECK(config::find_key(key) != nullptr);
    CHECK(entry.make(off, layout) == nullptr);
    CHECK(entry.memory(off, layout).empty());
    CHECK(entry.make(on, layout) != nullptr);
    CHECK(!entry.memory(on, layout).empty());
    CHECK((entry.weights_group == nullptr) == (entry.weights_problem == nullptr));
  }
  CHECK(features::make_step_features(off, layout).empty());
  CHECK(features::make_step_features(on, layout).size() == features::registered_features().size());
}

TEST_CASE("a feature's memory-plan rows are the bytes it allocates", "[features]") {
  const config::Config base = all_on();
  const model::GolfModel<float> model(base.model, 1, 8);
  const model::ParameterLayout& layout = model.parameters().layout();
  const std::size_t buffer = layout.buffer_size() * sizeof(float);
  for (const auto& [ema, swa, qat] : std::vector<std::tuple<double, int, double>>{
           {0.9, 0, 0.0}, {0.0, 2, 0.0}, {0.9, 2, 0.0}, {0.0, 0, 0.5}, {0.9, 2, 0.5}}) {
    config::Config c = base;
    c.train.ema_decay = ema;
    c.train.swa_every = swa;
    c.train.qat_start_lr = qat;
    double planned = 0;
    for (const features::MemoryRow& row : features::step_feature_memory(c, layout)) planned += row.bytes;
    profile::track_memory(false);
    REQUIRE(profile::track_memory(true));  // counting from zero
    {
      const features::StepFeatures built = features::make_step_features(c, layout);
      CHECK(profile::peak_memory_bytes() == planned);
    }
    profile::track_memory(false);
    const std::size_t buffers = (ema > 0 ? 1 : 0) + (swa > 0 ? 1 : 0) + (qat > 0 ? 1 : 0);
    CHECK(planned == static_cast<double>(buffers * buffer));
  }
}

TEST_CASE("the averages swap in and out exactly, and come back from a checkpoint bit for bit", "[features][checkpoint]") {
  test::TempDir dir;
  const config::Config c = all_on();
  model::GolfModel<float> model(c.model, 1, 8);
  model::initialize(model.parameters(), 3);
  const model::ParameterLayout& layout = model.parameters().layout();
  optim::Optimizer<float> optimizer(model.parameters(), c);
  const ExecSpace exec;
  const Vector<float>& values = model.parameters().values();
  const features::StepFeatures kept = features::make_step_features(c, layout);
  for (const auto& f : kept) f->start(exec, values);
  // Four updates at a multiplier below swa_start_lr: the SWA snapshots after steps 2 and 4.
  for (int step = 0; step < 4; ++step) {
    from_host(random_values(layout, 10 + step), values);
    for (const auto& f : kept) f->after_update(exec, step, 0.25, values);
  }
  const std::vector<float> live = to_host(values);
  const io::FeatureState saved = features::saved_state(kept);
  CHECK(saved.groups.size() == 2);
  REQUIRE(saved.scalars.count("swa_count") == 1);
  CHECK(saved.scalars.at("swa_count") == 2);
  // The EMA as its definition gives it, summed here in the same order.
  std::vector<float> ema(layout.buffer_size());
  {
    model::GolfModel<float> fresh(c.model, 1, 8);
    model::initialize(fresh.parameters(), 3);
    ema = to_host(fresh.parameters().values());
  }
  for (int step = 0; step < 4; ++step) {
    const std::vector<float> w = random_values(layout, 10 + step);
    for (std::size_t i = 0; i < ema.size(); ++i) ema[i] = 0.9f * ema[i] + (1.0f - 0.9f) * w[i];
  }
  CHECK(saved.groups.at("average/ema") == ema);

  SECTION("an evaluation's swap is exact both ways; the live weights are no feature's") {
    {
      const features::EvaluatedWeights scored(kept, exec, config::Weights::live, values);
      CHECK(scored.weights() == config::Weights::live);
      CHECK(to_host(values) == live);
    }
    {
      const features::EvaluatedWeights scored(kept, exec, config::Weights::ema, values);
      CHECK(scored.weights() == config::Weights::ema);
      CHECK(to_host(values) == ema);
    }
    CHECK(to_host(values) == live);
    {
      const features::EvaluatedWeights scored(kept, exec, config::Weights::swa, values);
      CHECK(to_host(values) == saved.groups.at("average/swa"));
    }
    CHECK(to_host(values) == live);
    // Before its first snapshot the SWA stands for no model: the live weights are scored.
    const features::StepFeatures fresh = features::make_step_features(c, layout);
    for (const auto& f : fresh) f->start(exec, values);
    const features::EvaluatedWeights scored(fresh, exec, config::Weights::swa, values);
    CHECK(scored.weights() == config::Weights::live);
    CHECK(to_host(values) == live);
  }
  SECTION("a checkpoint keeps the groups and the count; a resume and --weights read them back") {
    const io::HostState state = io::checkpoint_state(optimizer, {optimizer.shard()}, layout.buffer_size());
    io::CheckpointState at;
    at.step = 4;
    const std::string path =
        io::write_checkpoint(dir.path(), model.parameters(), state, at, io::RunMetadata{}, io::CheckpointPolicy{}, saved);
    std::int64_t step = -1;
    const io::FeatureState held = io::feature_contents(path, step);
    CHECK(step == 4);
    CHECK(held.groups.size() == 2);
    CHECK(held.scalars == saved.scalars);

    const features::StepFeatures resumed = features::make_step_features(c, layout);
    io::FeatureState read = features::wanted_state(resumed);
    CHECK(read.groups.size() == 2);
    model::GolfModel<float> other(c.model, 1, 8);
    optim::Optimizer<float> other_optimizer(other.parameters(), c);
    io::load_checkpoint(path, other.parameters(), other_optimizer, &read);
    features::restore_state(resumed, path, read);
    CHECK(features::saved_state(resumed).groups == saved.groups);
    CHECK(features::saved_state(resumed).scalars == saved.scalars);

    model::GolfModel<float> scored(c.model, 1, 8);
    features::load_weights(path, scored.parameters(), c, config::Weights::swa);
    CHECK(to_host(scored.parameters().values()) == saved.groups.at("average/swa"));
    features::load_weights(path, scored.parameters(), c, config::Weights::live);
    CHECK(to_host(scored.parameters().values()) == live);

    // A run that keeps an SWA cannot resume from a checkpoint without one.
    config::Config ema_only = c;
    ema_only.train.swa_every = 0;
    const features::StepFeatures fewer = features::make_step_features(ema_only, layout);
    const io::HostState state_again = io::checkpoint_state(optimizer, {optimizer.shard()}, layout.buffer_size());
    at.step = 5;
    const std::string without = io::write_checkpoint(dir.path(), model.parameters(), state_again, at, io::RunMetadata{},
                                                     io::CheckpointPolicy{}, features::saved_state(fewer));
    io::FeatureState wanted = features::wanted_state(resumed);
    io::load_checkpoint(without, other.parameters(), other_optimizer, &wanted);
    CHECK_THROWS_WITH(features::restore_state(resumed, without, wanted),
                      Catch::Contains(without) && Catch::Contains("keeps no SWA") && Catch::Contains("train.swa_every 0"));
    CHECK_THROWS_WITH(features::load_weights(without, scored.parameters(), c, config::Weights::swa),
                      Catch::Contains(without) && Catch::Contains("keeps no SWA"));
  }
  SECTION("--weights swa before the first snapshot is refused, naming the file and the keys") {
    const features::StepFeatures early = features::make_step_features(c, layout);
    for (const auto& f : early) f->start(exec, values);
    const io::HostState state = io::checkpoint_state(optimizer, {optimizer.shard()}, layout.buffer_size());
    io::CheckpointState at;
    at.step = 1;
    const std::string path = io::write_checkpoint(dir.path(), model.parameters(), state, at, io::RunMetadata{},
                                                  io::CheckpointPolicy{}, features::saved_state(early));
    model::GolfModel<float> scored(c.model, 1, 8);
    CHECK_THROWS_WITH(features::load_weights(path, scored.parameters(), c, config::Weights::swa),
                      Catch::Contains(path) && Catch::Contains("swa_count 0 at step 1") &&
                          Catch::Contains("train.swa_every = 2"));
    features::load_weights(path, scored.parameters(), c, config::Weights::ema);  // the EMA stands from the start
  }
  SECTION("a feature's group must be a folder of its own") {
    const io::HostState state = io::checkpoint_state(optimizer, {optimizer.shard()}, layout.buffer_size());
    for (const std::string name : {"optim/ema", "params/x", "ema"}) {
      io::FeatureState bad;
      bad.groups[name] = live;
      CHECK_THROWS_WITH(io::write_checkpoint(dir.path(), model.parameters(), state, io::CheckpointState{},
                                             io::RunMetadata{}, io::CheckpointPolicy{}, bad),
                        Catch::Contains(name));
    }
    io::FeatureState bad;
    bad.scalars["step"] = 3;
    CHECK_THROWS_WITH(io::write_checkpoint(dir.path(), model.parameters(), state, io::CheckpointState{},
                                           io::RunMetadata{}, io::CheckpointPolicy{}, bad),
                      Catch::Contains("'step'"));
  }
}

TEST_CASE("late QAT rounds the block matrices from its step on and puts the live weights back", "[features]") {
  const config::Config c = all_on();  // qat_start_lr 0.5 after 1 warmup step; export bits 6 and 5 by default
  model::GolfModel<float> model(c.model, 1, 8);
  model::initialize(model.parameters(), 5);
  const model::ParameterLayout& layout = model.parameters().layout();
  const ExecSpace exec;
  const Vector<float>& values = model.parameters().values();
  const features::StepFeatures all = features::make_step_features(c, layout);
  features::StepFeature* const qat = named(all, "late QAT");
  REQUIRE(qat != nullptr);
  CHECK(named(all, "weight averages") != nullptr);
  const std::vector<float> live = to_host(values);
  CHECK(qat->before_micro_steps(exec, 0, 0.1, values).empty());  // still warming up
  CHECK(to_host(values) == live);
  CHECK(qat->before_micro_steps(exec, 1, 0.75, values).empty());  // above qat_start_lr
  CHECK(to_host(values) == live);
  const std::string note = qat->before_micro_steps(exec, 2, 0.25, values);
  CHECK(note.rfind("late_qat: from step:3 lr_multiplier:0.25", 0) == 0);
  const std::vector<float> rounded = to_host(values);
  int matrices = 0;
  for (const auto& entry : layout.entries()) {
    const auto& spec = entry.spec;
    const bool block_matrix = spec.shape.size() == 2 && model::is_block_matrix(spec.role);
    if (!block_matrix) {
      for (std::size_t i = 0; i < entry.size; ++i) CHECK(rounded[entry.offset + i] == live[entry.offset + i]);
      continue;
    }
    ++matrices;
    const int bits = spec.role == model::Role::mlp ? c.export_.mlp_bits : c.export_.attention_bits;
    const float limit = static_cast<float>(quant::code_limit(bits));
    const std::size_t columns = spec.shape[1];
    for (std::size_t r = 0; r < spec.shape[0]; ++r) {
      const float* row = live.data() + entry.offset + r * columns;
      float top = 0;
      for (std::size_t j = 0; j < columns; ++j) top = std::max(top, std::fabs(row[j]));
      const float scale = top / limit;
      for (std::size_t j = 0; j < columns && top == 0; ++j) CHECK(rounded[entry.offset + r * columns + j] == 0.0f);
      for (std::size_t j = 0; j < columns && top > 0; ++j) {
        // Independently of quant/rows.hpp: the nearest multiple of the scale, at most `limit` of them.
        const float code = std::nearbyint(row[j] / scale);
        CHECK(rounded[entry.offset + r * columns + j] == std::min(std::max(code, -limit), limit) * scale);
      }
    }
  }
  CHECK(matrices == 2 * 6);  // golf: q, k, v, o, fc and proj in each of 2 blocks
  qat->before_update(exec, values);
  CHECK(to_host(values) == live);
  CHECK(qat->before_micro_steps(exec, 3, 0.2, values).empty());  // said once
  qat->before_update(exec, values);
  CHECK(qat->before_micro_steps(exec, 4, 0.75, values).empty());  // off again: the weights are left alone
  CHECK(to_host(values) == live);
}
