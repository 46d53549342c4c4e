#include "data/sentencepiece.hpp"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <ostream>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/error.hpp"
#include "core/files.hpp"
#include "core/text.hpp"

namespace kgpt::data {

namespace {

const std::string kWordStart = "\xe2\x96\x81";  // U+2581, SentencePiece's space

std::string mib(std::uint64_t bytes) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buffer;
}

std::uint64_t input_size(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) throw InputError(path + ": cannot read input file: " + std::strerror(errno));
  if (!S_ISREG(info.st_mode)) throw InputError(path + ": input is not a regular file");
  return static_cast<std::uint64_t>(info.st_size);
}

// The training sentences: every line of the inputs except empty lines and document delimiters.
class LineReader final : public sentencepiece::SentenceIterator {
 public:
  LineReader(const TokenizerTrainOptions& options, std::uint64_t total_bytes, TokenizerTrainSummary& summary)
      : options_(options), total_bytes_(total_bytes), summary_(summary), last_report_(std::chrono::steady_clock::now()) {
    advance();
  }

  bool done() const override { return done_; }
  void Next() override { advance(); }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return status_; }

 private:
  void advance() {
    while (true) {
      if (!in_.is_open() || !std::getline(in_, line_)) {
        if (in_.is_open() && in_.bad()) {
          status_ = sentencepiece::util::Status(sentencepiece::util::StatusCode::kInternal,
                                                options_.inputs[file_ - 1] + ": error while reading");
          done_ = true;
          return;
        }
        in_.close();
        if (file_ == options_.inputs.size()) {
          report(true);
          done_ = true;
          return;
        }
        in_.clear();
        in_.open(options_.inputs[file_++], std::ios::binary);
        if (!in_) {
          status_ = sentencepiece::util::Status(sentencepiece::util::StatusCode::kNotFound,
                                                options_.inputs[file_ - 1] + ": cannot open input file");
          done_ = true;
          return;
        }
        continue;
      }
      summary_.bytes += line_.size() + 1;
      std::string bare = line_;
      if (!bare.empty() && bare.back() == '\r') bare.pop_back();
      report(false);
      if (bare.empty() || (!options_.doc_delimiter.empty() && bare == options_.doc_delimiter)) continue;
      ++summary_.lines;
      return;
    }
  }

  void report(bool final_line) {
    if (!options_.progress) return;
    const auto now = std::chrono::steady_clock::now();
    if (!final_line && now - last_report_ < std::chrono::seconds(2)) return;
    last_report_ = now;
    const std::uint64_t read = summary_.bytes < total_bytes_ ? summary_.bytes : total_bytes_;
    *options_.progress << "tokenizer: " << mib(read) << " of " << mib(total_bytes_) << " read, "
                       << text::with_thousands(summary_.lines) << " lines to train on" << std::endl;
  }

  const TokenizerTrainOptions& options_;
  std::uint64_t total_bytes_;
  TokenizerTrainSummary& summary_;
  std::ifstream in_;
  std::size_t file_ = 0;
  std::string line_;
  bool done_ = false;
  sentencepiece::util::Status status_;
  std::chrono::steady_clock::time_point last_report_;
};

// SentencePiece skips lines longer than this many bytes (its max_sentence_length, set to this).
constexpr std::size_t kMaxLineBytes = 4192;
// Pieces every model has before the learned ones: 4 special pieces and 256 bytes.
constexpr std::size_t kFixedPieces = 260;

// "a.txt", "a.txt, b.txt", "a.txt, b.txt, c.txt and 4 more".
std::string name_inputs(const std::vector<std::string>& inputs) {
  std::string names;
  for (std::size_t i = 0; i < inputs.size() && i < 3; ++i) names += (i ? ", " : "") + inputs[i];
  if (inputs.size() > 3) names += " and " + std::to_string(inputs.size() - 3) + " more";
  return names;
}

// What the text can give SentencePiece, read before it sees the text: how many lines it would
// train on, and an upper bound on the pieces it can make of them. Pieces never cross a space
// (a space starts a word), so beyond the fixed pieces and the distinct characters, BPE makes at
// most one merge per pair of neighbouring characters in each distinct word, and unigram keeps at
// most the distinct substrings of 2 to 16 characters of the distinct words. The reading stops as
// soon as the bound reaches the pieces asked for, so a corpus large enough costs little.
struct TextCapacity {
  std::uint64_t lines = 0, usable = 0, too_long = 0;
  std::size_t bound = kFixedPieces;
  std::size_t characters = 0;
};

TextCapacity text_capacity(const TokenizerTrainOptions& options) {
  TextCapacity c;
  std::unordered_set<std::string> characters, words, substrings;
  std::size_t learned = 0;
  const bool bpe = options.type == SentencePieceType::bpe;
  const auto enough = [&] { return c.usable > 0 && c.bound >= static_cast<std::size_t>(options.vocab_size); };
  for (const auto& input : options.inputs) {
    std::ifstream in(input, std::ios::binary);
    if (!in) throw InputError(input + ": cannot open input file");
    std::string line;
    while (!enough() && std::getline(in, line)) {
      ++c.lines;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty() || (!options.doc_delimiter.empty() && line == options.doc_delimiter)) continue;
      if (line.size() > kMaxLineBytes) {
        ++c.too_long;
        continue;
      }
      ++c.usable;
      std::size_t start = 0;
      while (start < line.size()) {
        std::size_t end = line.find(' ', start + 1);
        if (end == std::string::npos) end = line.size();
        const std::string word = line.substr(start, end - start);
        start = end;
        if (!words.insert(word).second) continue;
        // The word's characters, as UTF-8 sequences.
        std::vector<std::string> chars;
        for (std::size_t i = 0; i < word.size();) {
          std::size_t j = i + 1;
          while (j < word.size() && (static_cast<unsigned char>(word[j]) & 0xC0) == 0x80) ++j;
          chars.push_back(word.substr(i, j - i));
          characters.insert(chars.back());
          i = j;
        }
        if (bpe) {
          learned += chars.size() - 1;
        } else {
          for (std::size_t i = 0; i < chars.size(); ++i) {
            std::string piece = chars[i];
            for (std::size_t j = i + 1; j < chars.size() && j < i + 16; ++j) {
              piece += chars[j];
              substrings.insert(piece);
            }
          }
          learned = substrings.size();
        }
        c.characters = characters.size();
        c.bound = kFixedPieces + c.characters + learned;
      }
    }
    if (in.bad()) throw InputError(input + ": error while reading");
    if (enough()) break;
  }
  return c;
}

// SentencePiece's refusal in kgpt's words: the pieces it could make when it says so.
std::string refusal(const TokenizerTrainOptions& options, const std::string& status) {
  const std::string names = name_inputs(options.inputs);
  const std::string marker = "Please set it to a value <= ";
  const auto at = status.find(marker);
  if (at != std::string::npos) {
    const std::string most = status.substr(at + marker.size(), status.find_first_not_of("0123456789", at + marker.size()) -
                                                                   (at + marker.size()));
    return "tokenizer train: --vocab-size " + std::to_string(options.vocab_size) + " is more than the text of " + names +
           " gives: SentencePiece can make at most " + most + " pieces of it; ask for " + most +
           " or fewer, or give more text";
  }
  return "tokenizer train: SentencePiece could not train on " + names + ": " + status;
}

bool file_exists(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0;
}

}  // namespace

struct SentencePieceModel::Impl {
  sentencepiece::SentencePieceProcessor processor;
  int newline = -1;
};

SentencePieceModel::SentencePieceModel(std::string path, std::unique_ptr<Impl> impl)
    : path_(std::move(path)), impl_(std::move(impl)) {}
SentencePieceModel::~SentencePieceModel() = default;
SentencePieceModel::SentencePieceModel(SentencePieceModel&&) noexcept = default;
SentencePieceModel& SentencePieceModel::operator=(SentencePieceModel&&) noexcept = default;

SentencePieceModel SentencePieceModel::load(const std::string& path) {
  if (!std::ifstream(path, std::ios::binary)) {
    throw InputError(path + ": cannot open the SentencePiece model: " + std::strerror(errno));
  }
  auto impl = std::make_unique<Impl>();
  const auto status = impl->processor.Load(path);
  if (!status.ok() || impl->processor.GetPieceSize() <= 0) {
    throw InputError(path + ": not a SentencePiece model (" + status.ToString() +
                     "); `kgpt tokenizer train` makes one, as does SentencePiece's spm_train");
  }
  const int newline = impl->processor.PieceToId("<0x0A>");
  impl->newline = impl->processor.IsByte(newline) ? newline : -1;
  return SentencePieceModel(path, std::move(impl));
}

int SentencePieceModel::vocab_size() const { return impl_->processor.GetPieceSize(); }
int SentencePieceModel::bos_id() const { return impl_->processor.bos_id(); }
int SentencePieceModel::eos_id() const { return impl_->processor.eos_id(); }
int SentencePieceModel::newline_id() const { return impl_->newline; }

bool SentencePieceModel::is_boundary(int id) const {
  const auto& p = impl_->processor;
  return id < 0 || id >= p.GetPieceSize() || p.IsControl(id) || p.IsUnknown(id) || p.IsUnused(id);
}

std::string SentencePieceModel::piece(int id) const { return impl_->processor.IdToPiece(id); }

int SentencePieceModel::byte_value(int id) const {
  if (id < 0 || id >= vocab_size() || !impl_->processor.IsByte(id)) return -1;
  return static_cast<int>(std::strtol(piece(id).c_str() + 3, nullptr, 16));  // "<0xNN>"
}

std::vector<int> SentencePieceModel::encode_line(const std::string& line) const {
  std::vector<int> ids;
  const auto status = impl_->processor.Encode(line, &ids);
  if (!status.ok()) throw Error(ExitCode::failure, path_ + ": encoding failed: " + status.ToString());
  return ids;
}

std::vector<int> SentencePieceModel::encode_text(const std::string& text) const {
  std::vector<int> ids;
  std::size_t start = 0;
  while (true) {
    const std::size_t end = text.find('\n', start);
    const std::vector<int> line = encode_line(text.substr(start, end == std::string::npos ? end : end - start));
    ids.insert(ids.end(), line.begin(), line.end());
    if (end == std::string::npos) break;
    if (impl_->newline < 0) {
      throw InputError(path_ + ": the model has no byte piece <0x0A> for line breaks (train it with byte fallback)");
    }
    ids.push_back(impl_->newline);
    start = end + 1;
  }
  return ids;
}

std::string SentencePieceModel::decode(const std::vector<int>& ids) const {
  std::vector<int> text_ids;
  for (int id : ids) {
    if (!is_boundary(id)) text_ids.push_back(id);
  }
  std::string text;
  const auto status = impl_->processor.Decode(text_ids, &text);
  if (!status.ok()) throw Error(ExitCode::failure, path_ + ": decoding failed: " + status.ToString());
  return text;
}

TokenByteTable SentencePieceModel::byte_table(int vocab_size) const {
  TokenByteTable table;
  table.base_bytes.assign(vocab_size, 0);
  table.has_leading_space.assign(vocab_size, 0);
  table.is_boundary.assign(vocab_size, 1);
  const int pieces = this->vocab_size() < vocab_size ? this->vocab_size() : vocab_size;
  if (bos_id() >= 0 && bos_id() < pieces) table.document_start = bos_id();
  for (int id = 0; id < pieces; ++id) {
    if (is_boundary(id)) continue;
    table.is_boundary[id] = 0;
    if (impl_->processor.IsByte(id)) {
      table.base_bytes[id] = 1;
      continue;
    }
    std::string text = piece(id);
    if (text.compare(0, kWordStart.size(), kWordStart) == 0) {
      table.has_leading_space[id] = 1;
      text.erase(0, kWordStart.size());
    }
    table.base_bytes[id] = piece_text_bytes(text);
  }
  return table;
}

bool is_model_file(const std::string& path) {
  const std::string suffix = ".model";
  return path.size() >= suffix.size() && path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
}

TokenByteTable load_sentencepiece_table(const std::string& path, int vocab_size) {
  if (!is_model_file(path)) return load_sentencepiece_vocab(path, vocab_size);
  const SentencePieceModel model = SentencePieceModel::load(path);
  if (model.vocab_size() > vocab_size) {
    throw InputError(path + ": the model has " + std::to_string(model.vocab_size()) +
                     " pieces, more than model.vocab_size = " + std::to_string(vocab_size));
  }
  return model.byte_table(vocab_size);
}

TokenizerTrainSummary train_sentencepiece(const TokenizerTrainOptions& options) {
  if (options.inputs.empty()) throw InputError("tokenizer train: no input files (--input FILE...)");
  if (options.out_prefix.empty()) throw InputError("tokenizer train: no output prefix (--out PREFIX)");
  if (options.vocab_size < 261 || options.vocab_size > 65536) {
    throw InputError("tokenizer train: --vocab-size " + std::to_string(options.vocab_size) +
                     " must be in [261, 65536]: 4 special pieces and 256 byte pieces come first, and shards "
                     "store token ids as uint16");
  }
  std::uint64_t total_bytes = 0;
  for (const auto& input : options.inputs) total_bytes += input_size(input);
  TokenizerTrainSummary summary;
  summary.model_file = options.out_prefix + ".model";
  summary.vocab_file = options.out_prefix + ".vocab";
  for (const auto& file : {summary.model_file, summary.vocab_file}) {
    if (file_exists(file)) {
      throw InputError(file + ": already exists; remove it or choose another --out prefix");
    }
  }
  // What SentencePiece would fail on, or (with its log on) crash on, checked first in kgpt's words.
  const TextCapacity capacity = text_capacity(options);
  const std::string names = name_inputs(options.inputs);
  if (capacity.usable == 0) {
    throw InputError(names + ": no line to train a tokenizer on (" + text::with_thousands(capacity.lines) +
                     " lines read: empty" + (options.doc_delimiter.empty() ? "" : ", document delimiters") +
                     (capacity.too_long > 0 ? ", or longer than " + std::to_string(kMaxLineBytes) +
                                                  " bytes, which SentencePiece skips (" +
                                                  text::with_thousands(capacity.too_long) + " of them)"
                                            : "") +
                     ")");
  }
  if (capacity.bound < static_cast<std::size_t>(options.vocab_size)) {
    throw InputError("tokenizer train: --vocab-size " + std::to_string(options.vocab_size) + " is more than the text of " +
                     names + " can give: at most " + std::to_string(capacity.bound) + " pieces (" +
                     std::to_string(kFixedPieces) + " special and byte pieces, " +
                     std::to_string(capacity.characters) + " distinct characters, and the " +
                     (options.type == SentencePieceType::bpe ? "merges" : "substrings") + " of " +
                     text::with_thousands(capacity.usable) + " lines); ask for fewer pieces or give more text");
  }
  const auto slash = options.out_prefix.rfind('/');
  if (slash != std::string::npos && slash > 0) make_directories(options.out_prefix.substr(0, slash));

  const std::unordered_map<std::string, std::string> settings = {
      {"model_prefix", options.out_prefix},
      {"vocab_size", std::to_string(options.vocab_size)},
      {"model_type", options.type == SentencePieceType::bpe ? "bpe" : "unigram"},
      {"byte_fallback", "true"},
      {"pad_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"unk_id", "3"},
      // Text stays as it is, so that decoding gives back the bytes encoded and val_bpb counts them.
      {"normalization_rule_name", "identity"},
      {"add_dummy_prefix", "false"},
      {"remove_extra_whitespaces", "false"},
      {"split_digits", "true"},
      {"character_coverage", "0.9995"},
      {"num_threads", std::to_string(options.threads < 1 ? 1 : options.threads)},
      {"max_sentence_length", std::to_string(kMaxLineBytes)},
      // Warnings at most: the BPE trainer's INFO log dereferences its best pair even when no pair is
      // left (a crash when the text gives fewer merges than asked for); kgpt prints its own progress.
      {"minloglevel", options.progress ? "1" : "2"},
  };
  if (options.progress) {
    *options.progress << "tokenizer: training a " << (options.type == SentencePieceType::bpe ? "bpe" : "unigram")
                       << " model of " << options.vocab_size << " pieces on " << options.inputs.size()
                       << " files (" << mib(total_bytes) << ")" << std::endl;
  }
  const auto start = std::chrono::steady_clock::now();
  LineReader lines(options, total_bytes, summary);
  const auto status = sentencepiece::SentencePieceTrainer::Train(settings, &lines);
  if (!lines.status().ok()) throw InputError("tokenizer train: " + lines.status().ToString());
  if (!status.ok()) {
    for (const auto& file : {summary.model_file, summary.vocab_file}) std::remove(file.c_str());
    throw InputError(refusal(options, status.ToString()));
  }
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  summary.pieces = SentencePieceModel::load(summary.model_file).vocab_size();
  return summary;
}

}  // namespace kgpt::data
