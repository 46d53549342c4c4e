#include "inference/hf.hpp"

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <system_error>

#include "core/checksum.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "core/files.hpp"
#include "core/versions.hpp"
#include "inference/from_checkpoint.hpp"
#include "model/block_sequence.hpp"
#include "model/family.hpp"
#include "model/parameters.hpp"

namespace kgpt::inference {

namespace fs = std::filesystem;

namespace {

// The family's form, or an identity form for families transformers has no class for (their own
// names and shapes: a kgpt-written file of the same family loads).
model::HfForm form_for_loading(const config::ResolvedDeck& deck) {
  const model::Family& family = model::family(deck.config.model.family);
  return family.hf_form == nullptr ? model::HfForm{} : family.hf_form(deck);
}

// Copies a (rows, cols) tensor into `out` as (cols, rows).
void transpose(const float* in, std::size_t rows, std::size_t cols, float* out) {
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
  }
}

std::string tokenizer_model_of(const config::ResolvedDeck& deck) {
  std::string path = deck.config.data.vocab_file;
  const std::string vocab = ".vocab";
  if (path.size() > vocab.size() && path.compare(path.size() - vocab.size(), vocab.size(), vocab) == 0) {
    path = path.substr(0, path.size() - vocab.size()) + ".model";
  }
  return path;
}

}  // namespace

HfExportSummary export_hf(const std::string& checkpoint, const std::string& out, io::SafetensorsDtype dtype,
                          config::Weights which) {
  const config::ResolvedDeck deck = checkpoint_deck(checkpoint, {}, 1);
  const model::Family& family = model::family(deck.config.model.family);
  if (family.hf_form == nullptr) {
    throw InputError(checkpoint + ": model.family " + family.name +
                     " has no Hugging Face transformers class; --format hf exports the families that have one "
                     "(gpt2: GPT2LMHeadModel, llama: LlamaForCausalLM). The int8 artifact (--format artifact) "
                     "holds any family");
  }
  const model::HfForm form = family.hf_form(deck);
  // No transformers class of these families caps its logits: a capped model would compute another
  // function there.
  if (deck.config.model.logit_softcap != 0) {
    throw InputError(checkpoint + ": the checkpoint's deck: " + deck.where("model.logit_softcap") + ": " +
                     text::significant(deck.config.model.logit_softcap) + " caps the logits, which " +
                     form.architecture + " does not; a model trained with model.logit_softcap: 0 can be exported");
  }
  // Nor runs any block twice: under depth recurrence the file would hold another function.
  const config::ModelConfig& m = deck.config.model;
  if (model::run_layers(m) != m.n_layer) {
    throw InputError(checkpoint + ": the checkpoint's deck: " + deck.where("model.recur_start") + ": " +
                     std::to_string(m.recur_start) + " runs blocks " + std::to_string(m.recur_start) + " to " +
                     std::to_string(m.recur_start + m.recur_count - 1) + " twice, which " + form.architecture +
                     " does not; the int8 artifact (--format artifact) holds it");
  }
  std::error_code error;
  if (fs::exists(out, error)) {
    throw InputError(out + ": exists; kgpt export --format hf writes a new folder and never replaces one");
  }
  std::string tokenizer;
  if (deck.config.data.tokenizer == config::Tokenizer::sentencepiece) {
    tokenizer = tokenizer_model_of(deck);
    if (!std::ifstream(tokenizer).good()) {
      throw InputError(tokenizer + ": the SentencePiece model of the checkpoint's deck (data.vocab_file " +
                       deck.config.data.vocab_file + ") cannot be read; it goes into the folder as tokenizer.model");
    }
  }

  HfExportSummary summary;
  const std::vector<float> values = checkpoint_parameters(deck, checkpoint, summary.step, which);
  const model::ParameterLayout layout = family.layout(deck.config.model, deck.config.train.seq_len);
  const std::set<std::string> transposed(form.transposed.begin(), form.transposed.end());
  io::SafetensorsFile file;
  file.dtype = dtype;
  // transformers loads a safetensors file only with format "pt" in its metadata.
  file.metadata = {{"format", "pt"}, {"kgpt_version", versions().kgpt}, {"step", std::to_string(summary.step)}};
  for (const model::TensorEntry& entry : layout.entries()) {
    io::SafetensorsTensor t;
    t.name = entry.spec.name;
    t.shape = entry.spec.shape;
    const float* at = values.data() + entry.offset;
    t.values.assign(at, at + entry.size);
    if (transposed.count(t.name) != 0) {
      transpose(at, t.shape[0], t.shape[1], t.values.data());
      std::swap(t.shape[0], t.shape[1]);
    }
    file.tensors.push_back(std::move(t));
  }
  nlohmann::json config = nlohmann::json::parse(form.config_json);
  config["torch_dtype"] = dtype == io::SafetensorsDtype::bf16 ? "bfloat16" : "float32";
  const std::string weights = io::serialize_safetensors(file);

  // A folder of its own beside the target, renamed into place once complete.
  const fs::path target(out);
  const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  make_directories(parent.string());
  const fs::path temporary = parent / ("." + target.filename().string() + ".partial-" + std::to_string(::getpid()));
  fs::remove_all(temporary, error);
  try {
    make_directories(temporary.string());
    write_file_atomically((temporary / "config.json").string(), config.dump(2) + "\n");
    write_file_atomically((temporary / "model.safetensors").string(), weights);
    summary.files = {"config.json", "model.safetensors"};
    if (!tokenizer.empty()) {
      std::ifstream in(tokenizer, std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      write_file_atomically((temporary / "tokenizer.model").string(), bytes);
      summary.files.push_back("tokenizer.model");
    }
    if (fs::exists(target, error)) throw InputError(out + ": appeared while the export was written; left alone");
    fs::rename(temporary, target);
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(temporary, error);
    throw Error(ExitCode::failure, out + ": cannot write the folder: " + e.what());
  } catch (...) {
    fs::remove_all(temporary, error);
    throw;
  }
  summary.tensors = file.tensors.size();
  summary.bytes = weights.size();
  return summary;
}

InitWeights read_init_weights(const config::ResolvedDeck& deck) {
  const std::string source = deck.config.model.init_from;
  InitWeights result;
  std::error_code error;
  result.file = fs::is_directory(source, error) ? (fs::path(source) / "model.safetensors").string() : source;
  io::SafetensorsFile file;
  try {
    // Read once: the checksum and the tensors come from the same bytes.
    const std::string bytes = io::read_safetensors_bytes(result.file);
    Checksum sum;
    sum.add(bytes.data(), bytes.size());
    result.checksum = sum.hex();
    file = io::parse_safetensors(bytes, result.file);
  } catch (const InputError& e) {
    throw InputError(deck.where("model.init_from") + ": " + e.what());
  }
  const model::HfForm form = form_for_loading(deck);
  const model::ParameterLayout layout =
      model::family(deck.config.model.family).layout(deck.config.model, deck.config.train.seq_len);
  const std::set<std::string> transposed(form.transposed.begin(), form.transposed.end());
  const std::set<std::string> position_tables(form.position_tables.begin(), form.position_tables.end());
  std::map<std::string, const io::SafetensorsTensor*> by_name;
  for (const io::SafetensorsTensor& t : file.tensors) by_name[t.name] = &t;

  const std::string where = deck.where("model.init_from") + ": " + result.file + ": ";
  std::vector<std::string> problems;
  std::set<std::string> used;
  result.values.assign(layout.buffer_size(), 0.0f);
  for (const model::TensorEntry& entry : layout.entries()) {
    const std::string& name = entry.spec.name;
    auto found = by_name.find(name);
    if (found == by_name.end() && !form.optional_prefix.empty() && name.rfind(form.optional_prefix, 0) == 0) {
      found = by_name.find(name.substr(form.optional_prefix.size()));
    }
    if (found == by_name.end()) {
      problems.push_back(where + "tensor " + name + " " + text::shape(entry.spec.shape) +
                         " of the deck's model is not in the file");
      continue;
    }
    const io::SafetensorsTensor& t = *found->second;
    used.insert(t.name);
    const bool flip = transposed.count(name) != 0;
    std::vector<std::size_t> want = entry.spec.shape;
    if (flip) std::swap(want[0], want[1]);
    // A position table of the model's width: a longer one loads its first rows, the positions the
    // deck's sequences use; a shorter one is refused, saying how long a sequence it covers.
    const bool position_table = position_tables.count(name) != 0 && !flip && t.shape.size() == 2 &&
                                want.size() == 2 && t.shape[1] == want[1];
    const bool crop = position_table && t.shape[0] > want[0];
    if (t.shape != want && !crop) {
      problems.push_back(where + "tensor " + t.name + " is " + text::shape(t.shape) + " in the file and " +
                         text::shape(want) + " in the deck's model" + (flip ? " (stored as (in, out))" : "") +
                         (position_table ? " (the file has positions for sequences of up to " +
                                               std::to_string(t.shape[0]) + " tokens; " + deck.where("train.seq_len") +
                                               " asks for " + std::to_string(want[0]) + ")"
                                         : ""));
      continue;
    }
    float* at = result.values.data() + entry.offset;
    if (crop) {
      std::copy(t.values.begin(), t.values.begin() + static_cast<std::ptrdiff_t>(want[0] * want[1]), at);
      result.cropped.push_back(name + " " + std::to_string(t.shape[0]) + "->" + std::to_string(want[0]));
    } else if (flip) {
      transpose(t.values.data(), want[0], want[1], at);
    } else {
      std::copy(t.values.begin(), t.values.end(), at);
    }
    ++result.tensors;
  }
  for (const io::SafetensorsTensor& t : file.tensors) {
    if (used.count(t.name) != 0) continue;
    const bool buffer = std::any_of(form.buffer_suffixes.begin(), form.buffer_suffixes.end(), [&](const std::string& s) {
      return t.name.size() >= s.size() && t.name.compare(t.name.size() - s.size(), s.size(), s) == 0;
    });
    if (buffer) continue;
    if (t.name == "lm_head.weight" && deck.config.model.tie_embeddings) {
      // A tied head saved beside its embedding must be that embedding (every family declares its
      // token embedding first).
      const model::TensorEntry& embedding = layout.entries().front();
      const bool same = t.values.size() == embedding.size &&
                        std::equal(t.values.begin(), t.values.end(), result.values.begin() + embedding.offset);
      if (!same) {
        problems.push_back(where + "tensor lm_head.weight differs from " + embedding.spec.name +
                           ", but the deck ties them (model.tie_embeddings: true)");
      }
      continue;
    }
    problems.push_back(where + "tensor " + t.name + " " + text::shape(t.shape) + " is not in the deck's model (" +
                       deck.config.model.family + ")");
  }
  if (problems.size() > 12) {
    // A file of another model entirely: the first dozen say enough.
    const std::size_t more = problems.size() - 12;
    problems.resize(12);
    problems.push_back(where + "and " + std::to_string(more) + " more tensor problems");
  }
  if (!problems.empty()) throw InputError(problems);
  return result;
}

}  // namespace kgpt::inference
