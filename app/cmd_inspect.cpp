// kgpt inspect: what a checkpoint, an exported artifact or a history file holds, in a few lines.

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <numeric>

#include "commands.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "io/hdf5_file.hpp"
#include "io/artifact.hpp"

namespace kgpt::app {

namespace {

using text::significant;

void print_metadata(const io::Hdf5File& file) {
  if (!file.contains("/metadata")) return;
  for (const char* key : {"kgpt_version", "git_sha", "kokkos_version", "mpi_version", "hdf5_version", "nccl_version",
                          "deck_path", "run_dir", "slurm_job_id"}) {
    std::string value;
    try {
      value = file.read_attribute_string("/metadata", key);
    } catch (const Error&) {
      continue;
    }
    if (!value.empty()) std::cout << "  " << key << ": " << value << "\n";
  }
  try {
    std::cout << "  world_size: " << static_cast<long long>(file.read_attribute_double("/metadata", "world_size"))
              << "\n";
  } catch (const Error&) {
  }
}

void inspect_checkpoint(const io::Hdf5File& file) {
  std::cout << file.path() << ": kgpt checkpoint\n";
  for (const char* key : {"step", "tokens_seen", "stream_position", "training_seconds", "seed"}) {
    const std::string name = std::string("/state/") + key;
    if (file.contains(name)) std::cout << "  " << key << ": " << significant(file.read_doubles(name).at(0)) << "\n";
  }
  print_metadata(file);
  std::size_t count = 0;
  const auto tensors = file.members("/params");
  std::cout << "  tensors: " << tensors.size() << "\n";
  for (const auto& name : tensors) {
    const std::string path = "/params/" + name;
    const auto values = file.read_doubles(path);
    const double norm = std::sqrt(std::inner_product(values.begin(), values.end(), values.begin(), 0.0));
    count += values.size();
    std::cout << "    " << name << " " << text::shape(file.shape(path)) << " " << file.dtype(path)
              << " norm:" << significant(norm) << "\n";
  }
  std::cout << "  parameters: " << count << "\n";
  if (file.contains("/optim")) {
    std::cout << "  optimizer state:";
    for (const auto& group : file.members("/optim")) std::cout << " " << group;
    std::cout << "\n";
  }
}

void inspect_artifact(const std::string& path) {
  const io::Artifact artifact = io::read_artifact(path);
  std::size_t bytes = 0;
  {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    bytes = static_cast<std::size_t>(in.tellg());
  }
  std::cout << path << ": kgpt artifact (int8 + zlib)\n"
            << "  step: " << artifact.step << "\n"
            << "  bytes: " << bytes << "\n";
  for (const auto& [key, value] : artifact.metadata) {
    if (!value.empty()) std::cout << "  " << key << ": " << value << "\n";
  }
  std::size_t count = 0, stored = 0;
  std::cout << "  tensors: " << artifact.tensors.size() << "\n";
  for (const auto& t : artifact.tensors) {
    const auto values = t.dequantized();
    const double norm = std::sqrt(std::inner_product(values.begin(), values.end(), values.begin(), 0.0));
    count += values.size();
    stored += t.stored_bytes();
    std::cout << "    " << t.name << " " << text::shape(t.shape) << " " << io::storage_name(t.storage)
              << " norm:" << significant(norm) << "\n";
  }
  std::cout << "  parameters: " << count << "\n"
            << "  stored bytes before compression: " << stored << " (" << count * 4 << " in fp32)\n";
}

void inspect_history(const io::Hdf5File& file) {
  std::cout << file.path() << ": kgpt history\n";
  print_metadata(file);
  const auto steps = file.read_doubles("/train/step");
  const auto losses = file.read_doubles("/train/loss");
  std::cout << "  train rows: " << steps.size();
  if (!steps.empty()) {
    auto speeds = file.read_doubles("/train/tokens_per_s");
    std::nth_element(speeds.begin(), speeds.begin() + speeds.size() / 2, speeds.end());
    std::cout << " (steps " << significant(steps.front()) << "-" << significant(steps.back()) << ")"
              << ", last train loss " << significant(losses.back()) << ", median tokens/s "
              << significant(speeds[speeds.size() / 2]) << ", tokens " << significant(file.read_doubles("/train/tokens").back());
  }
  std::cout << "\n";
  const auto val_steps = file.read_doubles("/val/step");
  const auto val_losses = file.read_doubles("/val/loss");
  const auto val_bpb = file.read_doubles("/val/bpb");
  std::cout << "  val rows: " << val_steps.size();
  if (!val_steps.empty()) {
    const std::size_t best = static_cast<std::size_t>(std::min_element(val_losses.begin(), val_losses.end()) -
                                                      val_losses.begin());
    std::cout << ", last val_loss " << significant(val_losses.back()) << " val_bpb " << significant(val_bpb.back())
              << " (step " << significant(val_steps.back()) << "), best val_loss " << significant(val_losses[best])
              << " (step " << significant(val_steps[best]) << ")";
  }
  std::cout << "\n";
}

}  // namespace

const CommandSpec& inspect_spec() {
  static const CommandSpec spec{
      "inspect",
      "FILE",
      "summarise a checkpoint, an exported artifact or a history.h5",
      "A checkpoint: its step, tokens, stream position, the versions and world size that wrote it,\n"
      "every tensor with its shape, type and L2 norm, and the optimizer state it holds. An artifact\n"
      "(kgpt export): its step, size, origin, and every tensor with its storage and the L2 norm of\n"
      "its dequantised values. A history: its rows, last and best losses and tokens/s. Reads a\n"
      "history while its run goes on.",
      {},
      1,
      1};
  return spec;
}

int run_inspect(const ParsedArgs& args) {
  if (io::is_artifact_file(args.positional().at(0))) {
    inspect_artifact(args.positional().at(0));
    return 0;
  }
  const io::Hdf5File file(args.positional().at(0), io::Hdf5File::Mode::read);
  if (file.contains("/params")) {
    inspect_checkpoint(file);
  } else if (file.contains("/train/step")) {
    inspect_history(file);
  } else {
    throw InputError(file.path() + ": neither a kgpt checkpoint (/params) nor a history (/train)");
  }
  return 0;
}

}  // namespace kgpt::app
