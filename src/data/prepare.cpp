#include "data/prepare.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <ostream>

#include "core/files.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "data/byte_tokenizer.hpp"
#include "data/tiktoken.hpp"
#include "data/sentencepiece.hpp"
#include "data/shard.hpp"

namespace kgpt::data {

namespace {

std::uint64_t file_size(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) throw InputError(path + ": cannot read input file: " + std::strerror(errno));
  if (!S_ISREG(info.st_mode)) throw InputError(path + ": input is not a regular file");
  return static_cast<std::uint64_t>(info.st_size);
}

std::string mib(std::uint64_t bytes) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buffer;
}

// Collects one split's tokens and writes a shard each time `shard_tokens` are gathered.
class ShardSink {
 public:
  ShardSink(std::string stem, std::uint64_t shard_tokens) : stem_(std::move(stem)), shard_tokens_(shard_tokens) {}

  void push(std::uint16_t token) {
    buffer_.push_back(token);
    ++tokens_;
    if (buffer_.size() == shard_tokens_) flush();
  }
  void flush() {
    if (buffer_.empty()) return;
    char index[16];
    std::snprintf(index, sizeof(index), "%06zu", shards_.size());
    shards_.push_back(stem_ + index + ".bin");
    write_shard(shards_.back(), buffer_);
    buffer_.clear();
  }
  std::uint64_t tokens() const { return tokens_; }
  const std::vector<std::string>& shards() const { return shards_; }

 private:
  std::string stem_;
  std::uint64_t shard_tokens_;
  std::vector<std::uint16_t> buffer_;
  std::vector<std::string> shards_;
  std::uint64_t tokens_ = 0;
};

class Preparer {
 public:
  Preparer(const PrepareOptions& options, ValSplit split, std::uint64_t total_bytes, const SentencePieceModel* model,
           const TiktokenTokenizer* tiktoken)
      : options_(options),
        split_(split),
        total_bytes_(total_bytes),
        // The tail: the last val_fraction of the bytes, rounded to the nearest byte.
        cut_(total_bytes -
             static_cast<std::uint64_t>(std::llround(static_cast<double>(total_bytes) * options.val_fraction))),
        model_(model),
        tiktoken_(tiktoken),
        document_token_(model ? model->bos_id() : tiktoken ? tiktoken->end_of_text() : kByteDocumentBoundary),
        train_(options.out_dir + "/" + options.prefix + "_train_", options.shard_tokens),
        val_(options.out_dir + "/" + options.prefix + "_val_", options.shard_tokens),
        last_report_(std::chrono::steady_clock::now()) {
    summary_.val_split = split;
  }

  void read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw InputError(path + ": cannot open input file");
    const bool by_lines = !options_.doc_delimiter.empty() || options_.paragraphs;
    flush_document();
    open_ = false;  // every file starts a document (documents never span files)
    if (model_ && !by_lines) {
      // The whole file is one document: its lines, with a line break wherever the file has one.
      std::string line;
      while (std::getline(in, line)) {
        const bool line_break = !in.eof();
        cut_here();
        if (!open_) start_document();
        emit_line(line, line_break);
      }
    } else if (!by_lines) {
      char chunk[1 << 16];
      while (in.read(chunk, sizeof(chunk)) || in.gcount() > 0) {
        std::size_t n = static_cast<std::size_t>(in.gcount()), at = 0;
        // The tail's cut can fall inside the chunk: the bytes before it go to train.
        if (split_ == ValSplit::tail && !to_val_ && summary_.bytes_read < cut_ && summary_.bytes_read + n > cut_) {
          at = static_cast<std::size_t>(cut_ - summary_.bytes_read);
          if (!open_) start_document();
          emit(chunk, at);
        }
        cut_here();
        if (!open_) start_document();
        emit(chunk + at, n - at);
      }
    } else {
      std::string line;
      while (std::getline(in, line)) {
        cut_here();
        std::string bare = line;
        if (!bare.empty() && bare.back() == '\r') bare.pop_back();
        const bool separator = options_.paragraphs ? bare.find_first_not_of(" \t") == std::string::npos
                                                   : bare == options_.doc_delimiter;
        if (separator) {
          summary_.bytes_read += line.size() + 1;
          open_ = false;
          continue;
        }
        if (!open_) start_document();
        if (model_) {
          emit_line(line, true);
        } else if (tiktoken_) {
          line.push_back('\n');
          emit_text(line.data(), line.size());
        } else {
          line.push_back('\n');
          emit(line.data(), line.size());
        }
      }
    }
    if (in.bad()) throw Error(ExitCode::failure, path + ": error while reading input");
  }

  PrepareSummary finish() {
    flush_document();
    dispatch_group();
    if (summary_.documents == 0) throw InputError("the inputs hold no text");
    if (tiktoken_ ? train_items_ == 0 : train_.tokens() == 0) {  // every rank knows the items, rank 0 the tokens
      throw InputError(split_ == ValSplit::documents
                           ? "every one of the " + std::to_string(summary_.documents) +
                                 " documents went to the val split; lower --val-fraction, give more documents "
                                 "(--doc-delimiter, --paragraphs, more files), or take the val split from the end "
                                 "of the text (--val-split tail)"
                           : "the text is too short: its " + std::to_string(summary_.bytes_read) +
                                 " bytes all went to the val split; lower --val-fraction or give more text");
    }
    train_.flush();
    val_.flush();
    summary_.train_tokens = train_.tokens();
    summary_.val_tokens = val_.tokens();
    summary_.train_shards = train_.shards();
    summary_.val_shards = val_.shards();
    report(true);
    return summary_;
  }

 private:
  // Documents: spread evenly over the splits, document i going to val when ceil((i + 1) * f)
  // exceeds ceil(i * f), so the first document always does and N documents give ceil(N * f). The
  // tail: the split is where the text is (cut_here()).
  void start_document() {
    flush_document();
    if (split_ == ValSplit::documents) {
      const double f = options_.val_fraction;
      const double i = static_cast<double>(summary_.documents);
      to_val_ = std::ceil((i + 1.0) * f) > std::ceil(i * f);
    }
    if (to_val_) ++summary_.val_documents;
    ++summary_.documents;
    put_token(to_val_, document_token_);
    open_ = true;
  }

  // The tail: from the first byte at or after the cut on, everything goes to val; a document open
  // there goes on in val, after a document token of its own.
  void cut_here() {
    if (split_ != ValSplit::tail || to_val_ || summary_.bytes_read < cut_ || cut_ == total_bytes_) return;
    flush_document();
    to_val_ = true;
    if (open_) {
      ++summary_.val_documents;
      put_token(true, document_token_);
    }
  }

  // One line of a document through the SentencePiece model, and its line break.
  void emit_line(const std::string& line, bool line_break) {
    ShardSink& sink = to_val_ ? val_ : train_;
    for (int id : model_->encode_line(line)) sink.push(static_cast<std::uint16_t>(id));
    if (line_break) sink.push(static_cast<std::uint16_t>(model_->newline_id()));
    count(line.size() + (line_break ? 1 : 0));
  }

  // tiktoken's split pattern reaches across lines, so a document's text is encoded whole, or in
  // parts cut where every encoding's pattern ends a piece: at a letter after a line break that
  // follows a visible ASCII character. (After a space the cut would move a piece's end: gpt2's
  // pattern splits "  \nA" as "  ", "\n", "A" but a part ending "  \n" as "  \n".)
  void emit_text(const char* bytes, std::size_t n) {
    document_.append(bytes, n);
    count(n);
    constexpr std::size_t kEncodeAt = std::size_t(1) << 20;
    if (document_.size() < kEncodeAt) return;
    for (std::size_t at = document_.size() - 1; at > 1; --at) {
      const char c = document_[at], before = document_[at - 2];
      if (document_[at - 1] == '\n' && before > ' ' && before < 0x7F &&
          ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) {
        encode_text(std::string_view(document_).substr(0, at));
        document_.erase(0, at);
        return;
      }
    }
  }

  // The text waits in the group, which is encoded by its rank once it holds enough.
  void encode_text(std::string_view text) {
    group_.push_back({to_val_, -1, std::string(text)});
    group_bytes_ += text.size();
    train_items_ += to_val_ ? 0 : 1;
    if (group_bytes_ >= kGroupBytes) dispatch_group();
  }

  void put_token(bool val, int token) {
    if (!tiktoken_) {
      (val ? val_ : train_).push(static_cast<std::uint16_t>(token));
      return;
    }
    group_.push_back({val, token, {}});
    train_items_ += val ? 0 : 1;
  }

  // Group g is encoded by rank g mod world_size; rank 0 takes each group's tokens in turn (its
  // own, or those its rank sends) and pushes them, so the shards do not depend on the ranks.
  void dispatch_group() {
    if (group_.empty()) return;
    const int owner = static_cast<int>(groups_++ % static_cast<std::uint64_t>(options_.world_size));
    std::vector<int> encoded;  // per text item: its token count, then its tokens
    if (owner == options_.rank) {
      for (const GroupItem& item : group_) {
        if (item.token >= 0) continue;
        tokens_.clear();
        tiktoken_->encode_into(item.text, false, tokens_);
        encoded.push_back(static_cast<int>(tokens_.size()));
        encoded.insert(encoded.end(), tokens_.begin(), tokens_.end());
      }
      if (options_.rank != 0) options_.send_to_root(std::move(encoded));
    } else if (options_.rank == 0) {
      encoded = options_.receive_at_root(owner);
    }
    if (options_.rank == 0) {
      std::size_t at = 0;
      for (const GroupItem& item : group_) {
        ShardSink& sink = item.val ? val_ : train_;
        if (item.token >= 0) {
          sink.push(static_cast<std::uint16_t>(item.token));
          continue;
        }
        const auto count = static_cast<std::size_t>(encoded.at(at++));
        for (std::size_t k = 0; k < count; ++k) sink.push(static_cast<std::uint16_t>(encoded.at(at++)));
      }
    }
    group_.clear();
    group_bytes_ = 0;
  }

  void flush_document() {
    if (!tiktoken_ || document_.empty()) return;
    encode_text(document_);
    document_.clear();
  }

  // A document starts at its first byte, so empty files and repeated separator lines make no
  // empty documents.
  void emit(const char* bytes, std::size_t n) {
    if (tiktoken_) {
      emit_text(bytes, n);
      return;
    }
    ShardSink& sink = to_val_ ? val_ : train_;
    for (std::size_t k = 0; k < n; ++k) sink.push(static_cast<unsigned char>(bytes[k]));
    count(n);
  }

  void count(std::uint64_t bytes) {
    summary_.bytes_read += bytes;
    if (to_val_) summary_.val_bytes += bytes;
    report(false);
  }

  void report(bool final_line) {
    if (!options_.progress || options_.rank != 0) return;
    const auto now = std::chrono::steady_clock::now();
    if (!final_line && now - last_report_ < std::chrono::seconds(2)) return;
    last_report_ = now;
    const double percent = total_bytes_ ? 100.0 * static_cast<double>(summary_.bytes_read) / total_bytes_ : 100.0;
    char share[16];
    std::snprintf(share, sizeof(share), "%.0f%%", percent > 100.0 ? 100.0 : percent);
    *options_.progress << "prepare: " << mib(summary_.bytes_read) << " of " << mib(total_bytes_) << " read (" << share
                       << "), " << text::with_thousands(summary_.documents) << " documents, "
                       << text::with_thousands(train_.tokens()) << " train and " << text::with_thousands(val_.tokens())
                       << " val tokens" << std::endl;
  }

  const PrepareOptions& options_;
  ValSplit split_;
  std::uint64_t total_bytes_;
  std::uint64_t cut_;  // the tail: val starts at this byte of the text
  const SentencePieceModel* model_;  // null: the byte tokenizer or tiktoken
  const TiktokenTokenizer* tiktoken_;  // null: the byte tokenizer or SentencePiece
  int document_token_;
  std::string document_;  // tiktoken: the open document's text not yet encoded
  std::vector<int> tokens_;
  // tiktoken: document tokens and texts in order, encoded together by one rank.
  struct GroupItem {
    bool val;
    int token;         // a token to push as it is, or -1 for
    std::string text;  // text to encode
  };
  static constexpr std::size_t kGroupBytes = std::size_t(256) << 10;
  std::vector<GroupItem> group_;
  std::size_t group_bytes_ = 0;
  std::uint64_t groups_ = 0;
  std::uint64_t train_items_ = 0;
  ShardSink train_, val_;
  PrepareSummary summary_;
  bool to_val_ = false;
  bool open_ = false;  // a document has started and not ended
  std::chrono::steady_clock::time_point last_report_;
};

// tiktoken reads text: a NUL byte, most likely a binary file given as text, is refused before
// anything is written, naming the file, line and column.
void refuse_nul_bytes_in(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open input file");
  std::uint64_t line = 1, column = 1;
  char chunk[1 << 16];
  while (in.read(chunk, sizeof(chunk)) || in.gcount() > 0) {
    const auto n = static_cast<std::size_t>(in.gcount());
    const void* nul = std::memchr(chunk, 0, n);
    const std::size_t end = nul ? static_cast<std::size_t>(static_cast<const char*>(nul) - chunk) : n;
    for (std::size_t k = 0; k < end; ++k) {
      if (chunk[k] == '\n') {
        ++line, column = 1;
      } else {
        ++column;
      }
    }
    if (nul) {
      throw InputError(path + ":" + std::to_string(line) + ":" + std::to_string(column) +
                       ": a NUL byte; --tokenizer tiktoken reads text (is this a binary file?)");
    }
  }
}

void write_meta(const PrepareOptions& options, const SentencePieceModel* model, const TiktokenTokenizer* tiktoken,
                PrepareSummary& summary) {
  summary.meta_file = options.out_dir + "/" + options.prefix + "_prepare.yaml";
  std::ostringstream out;
  out << "# written by kgpt prepare\n";
  if (model) {
    out << "tokenizer: sentencepiece\n"
        << "model: \"" << model->path() << "\"\n"
        << "vocab_size: " << model->vocab_size() << "  # the model's pieces\n"
        << "document_boundary: " << model->bos_id() << "  # " << model->piece(model->bos_id())
        << ", placed before every document\n"
        << "line_break: " << model->newline_id() << "  # " << model->piece(model->newline_id())
        << ", after every line\n";
  } else if (tiktoken) {
    out << "tokenizer: tiktoken\n"
        << "vocab_file: \"" << tiktoken->path() << "\"\n"
        << "encoding: " << tiktoken->encoding() << "\n"
        << "vocab_size: " << tiktoken->vocab_size() << "  # ranks and special tokens\n"
        << "document_boundary: " << tiktoken->end_of_text() << "  # <|endoftext|>, placed before every document\n";
  } else {
    out << "tokenizer: byte\n"
        << "vocab_size: " << kByteVocabSize << "  # bytes 0-255 and the document boundary\n"
        << "document_boundary: " << kByteDocumentBoundary << "  # placed before every document\n";
  }
  out
      << "doc_delimiter: \"" << options.doc_delimiter << "\"\n"
      << "paragraphs: " << (options.paragraphs ? "true" : "false") << "\n"
      << "val_fraction: " << text::format_double(options.val_fraction) << "\n"
      << "val_split: " << (summary.val_split == ValSplit::tail ? "tail" : "documents") << "\n"
      << "documents: " << summary.documents << "\n"
      << "val_documents: " << summary.val_documents << "\n"
      << "bytes_read: " << summary.bytes_read << "\n"
      << "val_bytes: " << summary.val_bytes << "\n"
      << "train_tokens: " << summary.train_tokens << "\n"
      << "val_tokens: " << summary.val_tokens << "\n"
      << "train_shards: " << summary.train_shards.size() << "\n"
      << "val_shards: " << summary.val_shards.size() << "\n"
      << "inputs:\n";
  for (const auto& input : options.inputs) out << "  - \"" << input << "\"\n";
  write_file_atomically(summary.meta_file, out.str());
}

void check_and_load(const PrepareOptions& options, std::unique_ptr<SentencePieceModel>& model,
                    std::unique_ptr<TiktokenTokenizer>& tiktoken, std::uint64_t& total_bytes) {
  if (options.inputs.empty()) throw InputError("missing --input FILE... (the text files to make shards of)");
  if (options.out_dir.empty()) throw InputError("missing --out DIR (the folder for the shards)");
  if (!(options.val_fraction >= 0.0 && options.val_fraction < 1.0)) {
    throw InputError("--val-fraction " + text::format_double(options.val_fraction) + " must be in [0, 1)");
  }
  if (options.shard_tokens < 1 || options.shard_tokens > static_cast<std::uint64_t>(INT32_MAX)) {
    throw InputError("--shard-tokens must be in [1, " + std::to_string(INT32_MAX) + "]");
  }
  if (options.paragraphs && !options.doc_delimiter.empty()) {
    throw InputError("give --doc-delimiter TEXT or --paragraphs, not both");
  }
  if (options.prefix.empty() || options.prefix.find('/') != std::string::npos) {
    throw InputError("--prefix '" + options.prefix + "' must be a non-empty name without '/'");
  }
  if (options.tokenizer == PrepareTokenizer::sentencepiece) {
    if (options.model_file.empty()) throw InputError("--tokenizer sentencepiece needs --model FILE.model");
    model = std::make_unique<SentencePieceModel>(SentencePieceModel::load(options.model_file));
    if (model->vocab_size() > 65536) {
      throw InputError(options.model_file + ": the model has " + std::to_string(model->vocab_size()) +
                       " pieces; shards store token ids as uint16, so at most 65536 fit");
    }
    if (model->bos_id() < 0) {
      throw InputError(options.model_file + ": the model has no document start piece <s> (bos_id); kgpt places "
                       "one before every document");
    }
    if (model->newline_id() < 0) {
      throw InputError(options.model_file + ": the model has no byte piece <0x0A> for line breaks; train it "
                       "with byte fallback (`kgpt tokenizer train` does)");
    }
  } else if (!options.model_file.empty()) {
    throw InputError("--model is for --tokenizer sentencepiece");
  }
  if (options.tokenizer == PrepareTokenizer::tiktoken) {
    if (options.vocab_file.empty()) throw InputError("--tokenizer tiktoken needs --vocab FILE (a .tiktoken rank file or encoder.json)");
    tiktoken = std::make_unique<TiktokenTokenizer>(TiktokenTokenizer::load(options.vocab_file, options.encoding));
    if (tiktoken->vocab_size() > 65536) {
      throw InputError(options.vocab_file + ": encoding " + tiktoken->encoding() + " has ids up to " +
                       std::to_string(tiktoken->vocab_size() - 1) + "; shards store token ids as uint16, so at most 65536 fit");
    }
    if (tiktoken->end_of_text() < 0) {
      throw InputError(options.vocab_file + ": encoding " + tiktoken->encoding() +
                       " has no <|endoftext|>, which kgpt places before every document");
    }
  } else if (!options.vocab_file.empty() || options.encoding != "auto") {
    throw InputError("--vocab and --encoding are for --tokenizer tiktoken");
  }
  for (const auto& input : options.inputs) total_bytes += file_size(input);
  if (tiktoken) {
    for (const auto& input : options.inputs) refuse_nul_bytes_in(input);
  }
  std::vector<std::string> existing;
  for (const char* split : {"_train_", "_val_"}) {
    for (auto& file : find_shards(options.out_dir + "/" + options.prefix + split + "*.bin")) existing.push_back(file);
  }
  if (!existing.empty()) {
    if (!options.force) {
      throw InputError(existing.front() + ": shards with prefix '" + options.prefix + "' are already in " +
                       options.out_dir + " (" + std::to_string(existing.size()) +
                       " files); pass --force to replace them or choose another --out or --prefix");
    }
  }
}

}  // namespace

PrepareSummary prepare_shards(const PrepareOptions& options) {
  std::unique_ptr<SentencePieceModel> model;
  std::unique_ptr<TiktokenTokenizer> tiktoken;
  std::uint64_t total_bytes = 0;
  // Every check before anything is written, on every rank, which agree on the outcome.
  const auto agree = options.agree ? options.agree : [](const std::function<void()>& step) { step(); };
  agree([&] { check_and_load(options, model, tiktoken, total_bytes); });
  // Rank 0 alone touches the output folder; the others wait until it has.
  if (options.rank == 0) {
    make_directories(options.out_dir);
    for (const char* split : {"_train_", "_val_"}) {
      for (auto& file : find_shards(options.out_dir + "/" + options.prefix + split + "*.bin")) std::remove(file.c_str());
    }
  }
  agree([] {});

  // One document (one file, nothing that separates documents) cannot be split by documents.
  ValSplit split = options.val_split;
  if (split == ValSplit::automatic) {
    split = options.inputs.size() == 1 && options.doc_delimiter.empty() && !options.paragraphs ? ValSplit::tail
                                                                                                : ValSplit::documents;
  }
  PrepareSummary summary;
  if (options.rank != 0 && !tiktoken) return summary;  // the byte and SentencePiece encodings run on rank 0
  Preparer preparer(options, split, total_bytes, model.get(), tiktoken.get());
  for (const auto& input : options.inputs) preparer.read_file(input);
  summary = preparer.finish();
  if (options.rank == 0) write_meta(options, model.get(), tiktoken.get(), summary);
  return summary;
}

}  // namespace kgpt::data
