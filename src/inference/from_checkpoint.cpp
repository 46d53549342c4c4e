#include "inference/from_checkpoint.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <fstream>
#include <numeric>
#include <sstream>

#include "core/error.hpp"
#include "core/files.hpp"
#include "core/host_copy.hpp"
#include "core/random.hpp"
#include "core/text.hpp"
#include "core/versions.hpp"
#include "data/byte_tokenizer.hpp"
#include "data/sentencepiece.hpp"
#include "io/hdf5_file.hpp"
#include "model/family.hpp"
#include "model/language_model.hpp"
#include "io/artifact.hpp"
#include "io/checkpoint.hpp"
#include "features/registry.hpp"
#include "inference/evaluator.hpp"
#include "inference/text_codec.hpp"

namespace kgpt::inference {

namespace {

using Real = float;

// The deck's model (in the precision of its deck) built for `batch` sequences of `seq` tokens and
// loaded from the checkpoint (its live weights or an average it keeps) or artifact; its step comes
// back through `step`.
std::unique_ptr<model::LanguageModel<Real>> loaded_model(const config::ResolvedDeck& deck, const std::string& path,
                                                          int batch, int seq, std::int64_t& step,
                                                          config::Weights weights) {
  auto model = model::make_model<Real>(deck.config.model, batch, seq);
  if (io::is_artifact_file(path)) {
    if (weights != config::Weights::live) {
      throw InputError(path + ": an artifact holds one set of weights; --weights " + config::name_of(weights) +
                       " takes a checkpoint (kgpt export --weights " + config::name_of(weights) +
                       " makes an artifact of the average)");
    }
    const io::Artifact artifact = io::read_artifact(path);
    load_artifact_weights(path, artifact, model->parameters());
    step = artifact.step;
    return model;
  }
  step = features::load_weights(path, model->parameters(), deck.config, weights).step;
  return model;
}

std::string absolute(const std::string& path) {
  char resolved[PATH_MAX];
  return ::realpath(path.c_str(), resolved) ? std::string(resolved) : path;
}

bool is_directory(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

// <run>/checkpoints/ckpt_*.h5 -> <run>, or "" for a checkpoint outside a run directory.
std::string run_directory_of(const std::string& checkpoint) {
  const std::string path = absolute(checkpoint);
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return "";
  const std::string folder = path.substr(0, slash);
  const std::string suffix = "/checkpoints";
  if (folder.size() <= suffix.size() || folder.compare(folder.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return "";
  }
  const std::string run = folder.substr(0, folder.size() - suffix.size());
  return is_directory(run) ? run : "";
}

std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (char ch : text) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + "\"";
}

}  // namespace

config::ResolvedDeck checkpoint_deck(const std::string& path, const std::vector<std::string>& overrides,
                                     int world_size) {
  std::string text;
  if (io::is_artifact_file(path)) {
    text = io::read_artifact(path).deck_text;
  } else {
    io::Hdf5File file(path, io::Hdf5File::Mode::read);
    if (!file.contains("/metadata/deck")) throw InputError(path + ": not a kgpt checkpoint (no /metadata/deck)");
    text = file.read_string("/metadata/deck");
  }
  config::DeckOptions options;
  options.world_size = world_size;
  options.overrides = overrides;
  return config::load_deck_text(text, path + " (its deck)", options);
}

CheckpointEvaluation evaluate_checkpoint(const config::ResolvedDeck& deck, const std::string& path,
                                         config::Weights weights) {
  const auto& world = parallel::world();
  const int batch = static_cast<int>(deck.plan.local_sequences), seq = deck.config.train.seq_len;
  CheckpointEvaluation result;
  result.artifact = io::is_artifact_file(path);
  const auto model = loaded_model(deck, path, batch, seq, result.step, weights);
  Evaluator evaluator(deck, batch);
  const Evaluation e = evaluator.run(ExecSpace(), *model, world.rank, world.size);
  result.loss = e.loss;
  result.bpb = e.bpb;
  result.tokens = evaluator.tokens();
  result.windows = evaluator.windows();
  result.seconds = e.seconds;
  return result;
}

TaskEvaluation evaluate_tasks(const config::ResolvedDeck& deck, const std::string& path,
                              const std::vector<std::string>& task_files, config::Weights weights) {
  const auto& world = parallel::world();
  const int seq = deck.config.train.seq_len;
  const TextCodec codec(deck, path);
  std::vector<Task> tasks;
  for (const std::string& file : task_files) tasks.push_back(prepare_task(file, codec, seq));
  // The endings of one example are one micro-batch (HellaSwag has four).
  std::size_t endings = 1;
  for (const Task& task : tasks) {
    for (const auto& e : task.examples) endings = std::max(endings, e.endings.size());
  }
  const int batch = static_cast<int>(std::min<std::size_t>(endings, 64));
  TaskEvaluation result;
  result.artifact = io::is_artifact_file(path);
  const auto model = loaded_model(deck, path, batch, seq, result.step, weights);
  for (const Task& task : tasks) result.tasks.push_back(score_task(ExecSpace(), *model, task, batch, seq, world.rank, world.size));
  return result;
}

std::string sample_checkpoint(const config::ResolvedDeck& deck, const std::string& path, const SampleOptions& options,
                              const std::function<void(const std::string&)>& emit) {
  const TextCodec codec(deck, path);
  const int seq = deck.config.train.seq_len, vocab = deck.config.model.vocab_size;
  std::vector<int> tokens = codec.prompt(options.prompt), generated;
  std::string shown;
  std::int64_t step = 0;
  const auto loaded = loaded_model(deck, path, 1, seq, step, options.weights);
  model::LanguageModel<Real>& model = *loaded;
  {
    const ExecSpace exec;
    TokenMatrix inputs("kgpt::sample::inputs", 1, seq), targets("kgpt::sample::targets", 1, seq);
    auto host_inputs = Kokkos::create_mirror_view(inputs);
    std::vector<double> probabilities(static_cast<std::size_t>(vocab));
    std::vector<int> order(static_cast<std::size_t>(vocab));
    for (int i = 0; i < options.max_new_tokens; ++i) {
      // The newest seq tokens are the context: the model knows no positions beyond seq_len.
      const int length = std::min<int>(seq, static_cast<int>(tokens.size()));
      for (int t = 0; t < length; ++t) host_inputs(0, t) = tokens[tokens.size() - length + t];
      const TokenMatrix window(inputs.data(), 1, length), window_targets(targets.data(), 1, length);
      Kokkos::deep_copy(exec, window, Kokkos::subview(host_inputs, Kokkos::ALL(), std::make_pair(0, length)));
      model.forward(exec, window, window_targets);
      auto logits = Kokkos::create_mirror(model.logits());
      Kokkos::deep_copy(logits, model.logits());
      const int last = length - 1;
      int next = 0;
      if (options.temperature <= 0) {
        for (int v = 1; v < vocab; ++v) next = logits(last, v) > logits(last, next) ? v : next;
      } else {
        std::iota(order.begin(), order.end(), 0);
        const int keep = options.top_k > 0 ? std::min(options.top_k, vocab) : vocab;
        std::partial_sort(order.begin(), order.begin() + keep, order.end(),
                          [&](int a, int b) { return logits(last, a) > logits(last, b); });
        const double top = logits(last, order[0]);
        double total = 0;
        for (int k = 0; k < keep; ++k) {
          probabilities[k] = std::exp((logits(last, order[k]) - top) / options.temperature);
          total += probabilities[k];
        }
        double u = random::uniform(options.seed, 11, static_cast<std::uint64_t>(i)) * total;
        next = order[keep - 1];
        for (int k = 0; k < keep; ++k) {
          if ((u -= probabilities[k]) <= 0) {
            next = order[k];
            break;
          }
        }
      }
      if (codec.ends_document(next)) break;
      tokens.push_back(next);
      generated.push_back(next);
      const std::string now = codec.text(generated, false);
      if (now.size() > shown.size() && now.compare(0, shown.size(), shown) == 0) {
        emit(now.substr(shown.size()));
        shown = now;
      }
    }
  }
  const std::string all = codec.text(generated, true);
  if (all.size() > shown.size() && all.compare(0, shown.size(), shown) == 0) emit(all.substr(shown.size()));
  return all;
}

namespace {

void write_record(const std::string& file, const std::vector<std::pair<std::string, std::string>>& fields) {
  std::ostringstream out;
  out << "# the newest artifact exported from this run: written by kgpt export, completed by kgpt eval\n";
  for (const auto& [key, value] : fields) out << key << ": " << value << "\n";
  write_file_atomically(file, out.str());
}

// The record's fields in order (a flat "key: value" YAML written by write_record).
std::vector<std::pair<std::string, std::string>> read_record(const std::string& file) {
  std::vector<std::pair<std::string, std::string>> fields;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto colon = line.find(": ");
    if (colon != std::string::npos) fields.emplace_back(line.substr(0, colon), line.substr(colon + 2));
  }
  return fields;
}

}  // namespace

std::vector<float> checkpoint_parameters(const config::ResolvedDeck& deck, const std::string& path, std::int64_t& step,
                                         config::Weights weights) {
  // Built for the deck's sequence length: families that learn positions learn that many.
  return to_host(loaded_model(deck, path, 1, deck.config.train.seq_len, step, weights)->parameters().values());
}

double ExportedGroup::rms_error() const {
  return elements == 0 ? 0.0 : std::sqrt(squares / static_cast<double>(elements));
}

namespace {

// The groups of the layout's tensors in io::WeightGroup's order, each with its bits; `group_of`
// gives each entry's index among them.
std::vector<ExportedGroup> export_groups(const model::ParameterLayout& layout, const config::ExportConfig& config,
                                         std::vector<std::size_t>& group_of) {
  const io::WeightGroup order[] = {io::WeightGroup::embed, io::WeightGroup::attention, io::WeightGroup::mlp,
                                   io::WeightGroup::other};
  std::vector<ExportedGroup> groups;
  group_of.assign(layout.entries().size(), 0);
  for (const io::WeightGroup g : order) {
    bool present = false;
    for (std::size_t i = 0; i < layout.entries().size(); ++i) {
      if (io::weight_group(layout.entries()[i].spec) != g) continue;
      if (!present) groups.push_back(ExportedGroup{io::weight_group_name(g), io::export_bits(g, config)});
      present = true;
      group_of[i] = groups.size() - 1;
    }
  }
  return groups;
}

// `path` relative to the folder `base`, both made absolute first.
std::string relative_to(const std::string& path, const std::string& base) {
  namespace fs = std::filesystem;
  return fs::weakly_canonical(fs::absolute(path)).lexically_relative(fs::weakly_canonical(fs::absolute(base))).generic_string();
}

// The metadata every artifact carries; its export line says how the tensors were stored, and
// `weights` which of the checkpoint's weights they are. checkpoint and run: the paths it stores
// (export_checkpoint makes them relative).
std::map<std::string, std::string> artifact_metadata(const std::string& checkpoint, const std::string& run,
                                                     const config::ExportConfig& e, config::Weights weights) {
  return {{"kgpt_version", versions().kgpt},
          {"git_sha", versions().git_sha},
          {"checkpoint", checkpoint},
          {"run_dir", run},
          {"weights", config::name_of(weights)},
          {"export", "embed_bits=" + std::to_string(e.embed_bits) + " attention_bits=" + std::to_string(e.attention_bits) +
                         " mlp_bits=" + std::to_string(e.mlp_bits) + " compression=" + config::name_of(e.compression) +
                         " code_layout=" + config::name_of(e.code_layout) +
                         " keep_float_max=" + std::to_string(e.keep_float_max)}};
}

}  // namespace

ExportSummary export_checkpoint(const std::string& checkpoint, const std::string& out,
                                const std::vector<std::string>& overrides, config::Weights weights) {
  const config::ResolvedDeck deck = checkpoint_deck(checkpoint, overrides, 1);
  const config::ExportConfig& settings = deck.config.export_;
  std::int64_t step = 0;
  const auto model = loaded_model(deck, checkpoint, 1, deck.config.train.seq_len, step, weights);
  const std::vector<float> values = to_host(model->parameters().values());

  io::Artifact artifact;
  // The deck's values alone: the same deck gives the same text however its run was started.
  artifact.deck_text = config::render_values(deck);
  artifact.step = step;
  artifact.compression = settings.compression;
  const std::string run = run_directory_of(checkpoint);
  // Relative paths, so that the same checkpoint exports to the same bytes wherever its run lies: the
  // checkpoint's to its run directory (its file name outside one), the run directory's to the
  // artifact's folder ("" outside one).
  {
    namespace fs = std::filesystem;
    const std::string out_folder = fs::absolute(out).parent_path().string();
    artifact.metadata = artifact_metadata(run.empty() ? fs::path(checkpoint).filename().string() : relative_to(checkpoint, run),
                                          run.empty() ? "" : relative_to(run, out_folder), settings, weights);
  }
  ExportSummary summary;
  summary.step = step;
  summary.compression = config::name_of(settings.compression);
  const auto& layout = model->parameters().layout();
  std::vector<std::size_t> group_of;
  summary.groups = export_groups(layout, settings, group_of);
  const auto keep = static_cast<std::size_t>(settings.keep_float_max);
  for (std::size_t index = 0; index < layout.entries().size(); ++index) {
    const auto& entry = layout.entries()[index];
    ExportedGroup& group = summary.groups[group_of[index]];
    const float* tensor = values.data() + entry.offset;
    io::ArtifactTensor stored = io::quantize_tensor(entry.spec, tensor, keep, group.bits);
    ExportedTensor report;
    report.name = entry.spec.name;
    report.storage = stored.storage_label();
    report.group = group.name;
    report.shape = entry.spec.shape;
    const std::vector<float> back = stored.dequantized();
    double squares = 0;
    for (std::size_t i = 0; i < back.size(); ++i) {
      const double error = std::fabs(static_cast<double>(back[i]) - tensor[i]);
      report.max_error = std::max(report.max_error, error);
      report.max_abs = std::max(report.max_abs, std::fabs(static_cast<double>(tensor[i])));
      squares += error * error;
    }
    report.rms_error = back.empty() ? 0.0 : std::sqrt(squares / static_cast<double>(back.size()));
    summary.float32_bytes += back.size() * sizeof(float);
    group.tensors += 1;
    group.elements += back.size();
    group.squares += squares;
    summary.tensors.push_back(report);
    artifact.tensors.push_back(std::move(stored));
  }
  // export.code_layout: 4-7 bit codes packed, or a byte each for the compressor to code, or the
  // smaller file of the two.
  std::string file = io::serialize_artifact(artifact);
  const bool coded = std::any_of(artifact.tensors.begin(), artifact.tensors.end(),
                                 [](const io::ArtifactTensor& t) { return t.storage == io::TensorStorage::packed_rows; });
  if (coded) summary.code_layout = "packed";
  if (coded && settings.code_layout != config::CodeLayout::packed) {
    io::Artifact bytes = artifact;
    for (auto& t : bytes.tensors) t = io::with_byte_codes(t);
    std::string other = io::serialize_artifact(bytes);
    if (settings.code_layout == config::CodeLayout::bytes || other.size() < file.size()) {
      file = std::move(other);
      summary.code_layout = "bytes";
      artifact = std::move(bytes);
    }
  }
  // The payload's bytes, by group, of the layout written.
  for (std::size_t index = 0; index < artifact.tensors.size(); ++index) {
    summary.payload_bytes += artifact.tensors[index].stored_bytes();
    summary.groups[group_of[index]].stored_bytes += artifact.tensors[index].stored_bytes();
  }
  const auto slash = out.rfind('/');
  if (slash != std::string::npos && slash > 0) make_directories(out.substr(0, slash));
  write_file_atomically(out, file);
  summary.bytes = file.size();
  if (!run.empty()) {
    summary.record = run + "/artifact.yaml";
    write_record(summary.record, {{"artifact", quoted(absolute(out))},
                                  {"checkpoint", quoted(absolute(checkpoint))},
                                  {"step", std::to_string(step)},
                                  {"bytes", std::to_string(summary.bytes)},
                                  {"float32_bytes", std::to_string(summary.float32_bytes)}});
  }
  return summary;
}

ArtifactPlan plan_artifact(const config::ResolvedDeck& deck) {
  const config::ExportConfig& settings = deck.config.export_;
  const model::ParameterLayout layout = model::family(deck.config.model.family).layout(deck.config.model, deck.config.train.seq_len);
  io::Artifact artifact;
  artifact.deck_text = config::render_values(deck);
  artifact.compression = settings.compression;
  // The checkpoint's path and run directory are not known yet: room for two paths of 512 bytes.
  artifact.metadata = artifact_metadata(std::string(512, '/'), std::string(512, '/'), settings, config::Weights::live);
  ArtifactPlan plan;
  std::vector<std::size_t> group_of;
  plan.groups = export_groups(layout, settings, group_of);
  for (std::size_t index = 0; index < layout.entries().size(); ++index) {
    const auto& spec = layout.entries()[index].spec;
    ExportedGroup& group = plan.groups[group_of[index]];
    // Packed codes bound what export.code_layout: auto writes too (it keeps the smaller file).
    const io::ArtifactTensor planned =
        io::planned_tensor(spec, static_cast<std::size_t>(settings.keep_float_max), group.bits);
    artifact.tensors.push_back(settings.code_layout == config::CodeLayout::bytes ? io::with_byte_codes(planned) : planned);
    group.tensors += 1;
    group.elements += artifact.tensors.back().elements();
    group.stored_bytes += artifact.tensors.back().stored_bytes();
  }
  plan.payload_bytes = io::payload_bytes(artifact);
  plan.largest_bytes = io::largest_file_bytes(plan.payload_bytes, settings.compression);
  return plan;
}

std::string record_artifact_evaluation(const std::string& artifact_path, const CheckpointEvaluation& result) {
  const io::Artifact artifact = io::read_artifact(artifact_path);
  const auto run = artifact.metadata.find("run_dir");
  if (run == artifact.metadata.end() || run->second.empty()) return "";
  // Relative to the artifact's folder (absolute in artifacts of earlier versions).
  const std::filesystem::path run_dir(run->second);
  const std::string file =
      ((run_dir.is_absolute() ? run_dir : std::filesystem::absolute(artifact_path).parent_path() / run_dir) / "artifact.yaml")
          .lexically_normal()
          .string();
  auto fields = read_record(file);
  const auto named = std::find_if(fields.begin(), fields.end(), [](const auto& f) { return f.first == "artifact"; });
  if (named == fields.end() || named->second != quoted(absolute(artifact_path))) return "";
  fields.erase(std::remove_if(fields.begin(), fields.end(),
                              [](const auto& f) { return f.first.rfind("roundtrip_", 0) == 0; }),
               fields.end());
  fields.emplace_back("roundtrip_val_loss", text::fixed(result.loss, 6));
  fields.emplace_back("roundtrip_val_bpb", text::fixed(result.bpb, 6));
  fields.emplace_back("roundtrip_val_tokens", std::to_string(result.tokens));
  write_record(file, fields);
  return file;
}

}  // namespace kgpt::inference
