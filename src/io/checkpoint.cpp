#include "io/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <utility>

#include "config/schema.hpp"
#include "core/checksum.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "core/host_copy.hpp"
#include "io/hdf5_file.hpp"
#include "parallel/watchdog.hpp"
#include "parallel/world.hpp"

namespace kgpt::io {

namespace {

namespace fs = std::filesystem;

constexpr const char* kFilePrefix = "ckpt_";
constexpr const char* kFileSuffix = ".h5";

// The groups of a checkpoint, in the order the checksum walks them.
std::vector<std::string> groups(const std::vector<std::string>& state_names, const std::vector<std::string>& features) {
  std::vector<std::string> all = {"params"};
  for (const std::string& name : state_names) all.push_back("optim/" + name);
  for (const std::string& name : features) all.push_back(name);
  return all;
}

// The top-level groups every checkpoint has; any other holds step features' groups.
const char* const kOwnFolders[] = {"params", "optim", "state", "metadata"};
// The training state's own datasets; any other under /state is a feature's scalar.
const char* const kStateFields[] = {"step", "tokens_seen", "stream_position", "training_seconds", "seed"};

template <std::size_t N>
bool among(const std::string& name, const char* const (&names)[N]) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

// The feature scalars of an open checkpoint, by name (the order the checksum adds them in).
std::map<std::string, std::int64_t> held_feature_scalars(const io::Hdf5File& in) {
  std::map<std::string, std::int64_t> scalars;
  for (const std::string& name : in.members("/state")) {
    if (!among(name, kStateFields)) scalars[name] = in.read_whole_scalar("/state/" + name);
  }
  return scalars;
}

// The feature groups of an open checkpoint, by name.
std::vector<std::string> held_feature_groups(const io::Hdf5File& in) {
  std::vector<std::string> held;
  for (const std::string& folder : in.members("/")) {
    if (among(folder, kOwnFolders)) continue;
    for (const std::string& name : in.members("/" + folder)) held.push_back(folder + "/" + name);
  }
  std::sort(held.begin(), held.end());
  return held;
}

void add_state(Checksum& sum, const CheckpointState& s) {
  sum.add(&s.step, sizeof(s.step));
  sum.add(&s.tokens_seen, sizeof(s.tokens_seen));
  sum.add(&s.stream_position, sizeof(s.stream_position));
  sum.add(&s.training_seconds, sizeof(s.training_seconds));
  sum.add(&s.seed, sizeof(s.seed));
}

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) throw Error(ExitCode::failure, path + ": cannot open to sync: " + std::strerror(errno));
  const int code = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (code != 0) throw Error(ExitCode::failure, path + ": fsync failed: " + std::strerror(error));
}

std::int64_t step_of(const std::string& file_name) {
  const std::string prefix = kFilePrefix, suffix = kFileSuffix;
  if (file_name.size() <= prefix.size() + suffix.size() || file_name.compare(0, prefix.size(), prefix) != 0 ||
      file_name.compare(file_name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return -1;
  }
  const std::string digits = file_name.substr(prefix.size(), file_name.size() - prefix.size() - suffix.size());
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return -1;
  }
  return std::stoll(digits);
}

void prune(const std::string& run_dir, const CheckpointPolicy& policy) {
  const auto files = list_checkpoints(run_dir);
  for (std::size_t i = static_cast<std::size_t>(std::max(policy.keep_last, 1)); i < files.size(); ++i) {
    const std::int64_t step = step_of(fs::path(files[i]).filename().string());
    if (policy.keep_every > 0 && step % policy.keep_every == 0) continue;
    std::error_code ignored;
    fs::remove(files[i], ignored);
  }
}

}  // namespace

std::string checkpoint_folder(const std::string& run_dir) { return run_dir + "/checkpoints"; }

std::string checkpoint_path(const std::string& run_dir, std::int64_t step) {
  char name[64];
  std::snprintf(name, sizeof(name), "%s%08lld%s", kFilePrefix, static_cast<long long>(step), kFileSuffix);
  return checkpoint_folder(run_dir) + "/" + name;
}

std::vector<std::string> list_checkpoints(const std::string& run_dir) {
  std::vector<std::pair<std::int64_t, std::string>> found;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(checkpoint_folder(run_dir), error)) {
    const std::int64_t step = step_of(entry.path().filename().string());
    if (step >= 0 && entry.is_regular_file()) found.emplace_back(step, entry.path().string());
  }
  std::sort(found.rbegin(), found.rend());
  std::vector<std::string> paths;
  for (const auto& [step, path] : found) paths.push_back(path);
  return paths;
}

HostState checkpoint_state(const optim::Optimizer<float>& optimizer, const std::vector<optim::Shard>& shards,
                           std::size_t buffer_size) {
  HostState state;
  // One shard is the whole buffer: no MPI (tests and tools write checkpoints without it).
  const bool root = shards.size() == 1 || parallel::world().rank == 0;
  std::vector<std::size_t> begins, counts;
  for (const optim::Shard& s : shards) {
    begins.push_back(s.begin);
    counts.push_back(s.size());
  }
  for (const std::string& name : optimizer.state_names()) {
    std::vector<float> mine = optimizer.state_to_host(name);
    if (shards.size() == 1) {
      state.emplace_back(name, std::move(mine));
      continue;
    }
    std::vector<float> whole(root ? buffer_size : 0);
    parallel::gather_spans_to_root(mine.data(), whole.data(), begins, counts);
    if (root) state.emplace_back(name, std::move(whole));
  }
  return state;
}

std::string write_checkpoint(const std::string& run_dir, const model::Parameters<float>& params,
                             const optim::Optimizer<float>& optimizer, const CheckpointState& state,
                             const io::RunMetadata& metadata, const CheckpointPolicy& policy) {
  if (optimizer.shard().begin != 0 || optimizer.shard().size() != params.layout().buffer_size()) {
    throw Error(ExitCode::failure, "write_checkpoint: an optimizer of one shard needs checkpoint_state first");
  }
  return write_checkpoint(run_dir, params, checkpoint_state(optimizer, {optimizer.shard()}, params.layout().buffer_size()),
                          state, metadata, policy);
}

std::string write_checkpoint(const std::string& run_dir, const model::Parameters<float>& params,
                             const HostState& optimizer_state, const CheckpointState& state,
                             const io::RunMetadata& metadata, const CheckpointPolicy& policy,
                             const FeatureState& features) {
  fs::create_directories(checkpoint_folder(run_dir));
  const std::string path = checkpoint_path(run_dir, state.step), temporary = path + ".tmp";
  Checksum sum;
  try {
    io::Hdf5File out(temporary, io::Hdf5File::Mode::create);
    const auto& layout = params.layout();
    std::vector<std::pair<std::string, const std::vector<float>*>> all;
    const std::vector<float> values = to_host(params.values());
    all.emplace_back("params", &values);
    for (const auto& [name, host] : optimizer_state) all.emplace_back("optim/" + name, &host);
    for (const auto& [name, host] : features.groups) {
      if (name.find('/') == std::string::npos || among(name.substr(0, name.find('/')), kOwnFolders)) {
        throw Error(ExitCode::failure, "feature group '" + name + "': not a folder/name path of its own");
      }
      all.emplace_back(name, &host);
    }
    for (const auto& [group, stored] : all) {
      parallel::progress();
      const std::vector<float>& host = *stored;
      if (host.size() != layout.buffer_size()) {
        throw Error(ExitCode::failure, group + ": " + std::to_string(host.size()) + " values for a buffer of " +
                                           std::to_string(layout.buffer_size()));
      }
      // A diverged run must not replace the last good checkpoint.
      if (!std::all_of(host.begin(), host.end(), [](float x) { return std::isfinite(x); })) {
        out.close_and_remove();
        throw Error(ExitCode::failure, "step " + std::to_string(state.step) + ": " + group +
                                           " hold non-finite values; no checkpoint written, the last one is kept");
      }
      sum.add(host.data(), host.size() * sizeof(float));
      for (const auto& e : layout.entries()) out.write("/" + group + "/" + e.spec.name, e.spec.shape, host.data() + e.offset);
    }
    add_state(sum, state);
    for (const auto& [name, value] : features.scalars) {
      if (among(name, kStateFields)) throw Error(ExitCode::failure, "feature scalar '" + name + "' is a state field");
      sum.add(&value, sizeof(value));
      out.write("/state/" + name, {}, &value);
    }
    out.write("/state/step", {}, &state.step);
    out.write("/state/tokens_seen", {}, &state.tokens_seen);
    const auto stream_position = static_cast<std::int64_t>(state.stream_position);
    out.write("/state/stream_position", {}, &stream_position);
    out.write("/state/training_seconds", {}, &state.training_seconds);
    out.write("/state/seed", {}, &state.seed);
    io::write_metadata(out, metadata);
    out.set_attribute("/", "tensor_count", static_cast<std::int64_t>(layout.entries().size()));
    out.set_attribute("/", "checksum", sum.hex());
    out.flush();
    out.close();
    fsync_path(temporary, false);
  } catch (const Error& e) {
    // Nothing partial is left behind; the newest complete checkpoint stays the newest.
    std::error_code ignored;
    fs::remove(temporary, ignored);
    const auto kept = list_checkpoints(run_dir);
    throw Error(ExitCode::failure, std::string("writing the checkpoint of step ") + std::to_string(state.step) +
                                       " failed: " + e.what() + "; " +
                                       (kept.empty() ? "no checkpoint was written before" : "the newest checkpoint is still " + kept.front()));
  }
  fs::rename(temporary, path);
  fsync_path(checkpoint_folder(run_dir), true);
  prune(run_dir, policy);
  return path;
}

namespace {

// Checks `path` against the model and its checksum, then fills params (from the group `wanted`)
// and, when given, the optimizer and the feature groups `features` names; the other groups are read
// for the checksum only, one at a time.
CheckpointState load(const std::string& path, const model::Parameters<float>& params,
                     const std::vector<std::string>& state_names, optim::Optimizer<float>* optimizer,
                     FeatureState* features, const std::string& wanted) {
  io::Hdf5File in(path, io::Hdf5File::Mode::read);
  const auto& layout = params.layout();
  if (!in.contains("/state/step")) throw InputError(path + ": not a kgpt checkpoint (no /state/step)");
  const std::vector<std::string> held = held_feature_groups(in);
  if (wanted != "params" && std::find(held.begin(), held.end(), wanted) == held.end()) {
    throw InputError(path + ": the checkpoint holds no weights '" + wanted + "'");
  }
  const std::int64_t tensors = in.read_attribute_whole("/", "tensor_count");
  if (tensors < 0 || static_cast<std::size_t>(tensors) != layout.entries().size()) {
    throw InputError(path + ": the checkpoint holds " + std::to_string(tensors) +
                     " tensors; this model has " + std::to_string(layout.entries().size()) +
                     " (a different architecture; check model.* in the deck)");
  }
  Checksum sum;
  std::vector<std::pair<std::string, std::vector<float>>> loaded;
  for (const std::string& group : groups(state_names, held)) {
    std::vector<float> host(layout.buffer_size(), 0.0f);
    for (const auto& e : layout.entries()) {
      const std::string name = "/" + group + "/" + e.spec.name;
      if (!in.contains(name)) {
        throw InputError(path + ": no tensor '" + name + "' (a different architecture; check model.* in the deck)");
      }
      const auto shape = in.shape(name);
      if (shape != e.spec.shape) {
        throw InputError(path + ": tensor '" + name + "' is " + text::shape(shape) + " in the checkpoint and " +
                         text::shape(e.spec.shape) + " in this model (check model.* in the deck)");
      }
      if (in.dtype(name) != "float32") {
        throw InputError(path + ": tensor '" + name + "' is " + in.dtype(name) + ", expected float32");
      }
      in.read_floats(name, host.data() + e.offset);
    }
    sum.add(host.data(), host.size() * sizeof(float));
    const bool optimizer_state = group.rfind("optim/", 0) == 0;
    const bool feature_wanted = features != nullptr && features->groups.count(group) > 0;
    if (group == wanted || (optimizer != nullptr && optimizer_state) || feature_wanted) {
      loaded.emplace_back(group, std::move(host));
    }
  }
  CheckpointState state;
  state.step = in.read_whole_scalar("/state/step");
  state.tokens_seen = in.read_whole_scalar("/state/tokens_seen");
  state.stream_position = static_cast<std::uint64_t>(in.read_whole_scalar("/state/stream_position"));
  state.training_seconds = in.read_scalar("/state/training_seconds");
  state.seed = in.read_whole_scalar("/state/seed");
  add_state(sum, state);
  const std::map<std::string, std::int64_t> feature_scalars = held_feature_scalars(in);
  for (const auto& [name, value] : feature_scalars) sum.add(&value, sizeof(value));
  const std::string stored = in.read_attribute_string("/", "checksum");
  if (stored != sum.hex()) {
    throw InputError(path + ": checksum mismatch (stored " + stored + ", computed " + sum.hex() +
                     "): the checkpoint is corrupted");
  }
  if (features != nullptr) features->scalars = feature_scalars;
  // The weights and the features' groups take the whole layout, the optimizer's state its shard.
  for (auto& [group, host] : loaded) {
    if (group == wanted) from_host(host, params.values());
    if (features != nullptr && features->groups.count(group) > 0) {
      features->groups[group] = std::move(host);
      continue;
    }
    if (optimizer == nullptr || group.rfind("optim/", 0) != 0) continue;
    const optim::Shard& shard = optimizer->shard();
    const auto first = host.begin() + static_cast<std::ptrdiff_t>(shard.begin);
    optimizer->state_from_host(group.substr(std::string("optim/").size()),
                               std::vector<float>(first, first + static_cast<std::ptrdiff_t>(shard.size())));
  }
  return state;
}

}  // namespace

CheckpointState load_checkpoint(const std::string& path, const model::Parameters<float>& params,
                                optim::Optimizer<float>& optimizer, FeatureState* features) {
  return load(path, params, optimizer.state_names(), &optimizer, features, "params");
}

CheckpointState load_checkpoint_weights(const std::string& path, const model::Parameters<float>& params,
                                        const config::Config& config, const std::string& group) {
  return load(path, params, optim::state_names(config), nullptr, nullptr, group);
}

FeatureState feature_contents(const std::string& path, std::int64_t& step) {
  const io::Hdf5File in(path, io::Hdf5File::Mode::read);
  if (!in.contains("/state/step")) throw InputError(path + ": not a kgpt checkpoint (no /state/step)");
  step = in.read_whole_scalar("/state/step");
  FeatureState contents;
  for (const std::string& group : held_feature_groups(in)) contents.groups[group] = {};
  contents.scalars = held_feature_scalars(in);
  return contents;
}

std::string model_change(const std::string& path, const config::ResolvedDeck& deck) {
  std::string text;
  {
    io::Hdf5File in(path, io::Hdf5File::Mode::read);
    if (!in.contains("/metadata/deck")) return "";  // not a kgpt checkpoint: load() says so
    text = in.read_string("/metadata/deck");
  }
  config::DeckOptions options;
  options.world_size = 1;  // the model's keys do not depend on it
  config::ResolvedDeck stored;
  try {
    stored = config::load_deck_text(text, path + " (its deck)", options);
  } catch (const InputError&) {
    return "";  // a deck this kgpt does not read: the tensors' own checks still apply
  }
  std::string changes;
  for (const config::KeySpec& spec : config::deck_schema()) {
    if (!spec.fixed_for_run) continue;
    const std::string was = config::value_text(spec.get(stored.config)), now = config::value_text(spec.get(deck.config));
    if (was == now) continue;
    changes += std::string(changes.empty() ? "" : "; ") + spec.dotted() + " is " + was + " there and " + now +
               " here (" + deck.origin(spec.dotted()).describe() + ")";
  }
  if (changes.empty()) return "";
  return path + ": written by a run of another model than this deck's: " + changes +
         ". --resume continues a run with the model it trained: give these keys the checkpoint's values, or "
         "start a new run";
}

}  // namespace kgpt::io
