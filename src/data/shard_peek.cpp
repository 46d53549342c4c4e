#include "data/shard_peek.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <vector>

#include "core/error.hpp"
#include "core/text.hpp"
#include "data/byte_tokenizer.hpp"
#include "data/sentencepiece.hpp"
#include "data/shard.hpp"
#include "data/tiktoken.hpp"

namespace kgpt::data {

namespace {

// <dir>/<prefix>_prepare.yaml for <dir>/<prefix>_train_000000.bin or <prefix>_val_...; "" otherwise.
std::string prepare_record_of(const std::string& path) {
  const std::filesystem::path file(path);
  const std::string name = file.filename().string();
  for (const char* split : {"_train_", "_val_"}) {
    const auto at = name.rfind(split);
    if (at != std::string::npos) return (file.parent_path() / (name.substr(0, at) + "_prepare.yaml")).string();
  }
  return "";
}

std::string scalar(const YAML::Node& record, const char* key) {
  const YAML::Node value = record[key];
  return value && value.IsScalar() ? value.as<std::string>() : "";
}

// Control characters other than line breaks and tabs as \xNN, so the peek cannot move the terminal.
std::string printable(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (c < 0x20 && c != '\n' && c != '\t') {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\x%02X", c);
      out += escaped;
    } else {
      out += static_cast<char>(c);
    }
  }
  return decode_utf8_replacing(out);
}

}  // namespace

bool is_shard_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::int32_t magic = 0;
  return in.read(reinterpret_cast<char*>(&magic), sizeof(magic)) && magic == kShardMagic;
}

void describe_shard(const std::string& path, std::ostream& out, int peek_tokens) {
  const std::vector<std::uint16_t> tokens = read_shard(path, 65536);
  std::uint16_t low = 0, high = 0;
  if (!tokens.empty()) {
    const auto [min_it, max_it] = std::minmax_element(tokens.begin(), tokens.end());
    low = *min_it, high = *max_it;
  }
  const std::set<std::uint16_t> distinct(tokens.begin(), tokens.end());
  out << path << ": token shard of " << text::with_thousands(tokens.size()) << " tokens (ids " << low << " to " << high
      << ", " << text::with_thousands(distinct.size()) << " distinct)\n";

  const std::string record_path = prepare_record_of(path);
  if (record_path.empty() || !std::filesystem::exists(record_path)) {
    out << "  no <prefix>_prepare.yaml beside it names its tokenizer, so its text is not shown\n";
    return;
  }
  YAML::Node record;
  try {
    record = YAML::LoadFile(record_path);
  } catch (const YAML::Exception& e) {
    throw InputError(record_path + ": not the YAML kgpt prepare writes (" + e.what() + ")");
  }
  const std::string kind = scalar(record, "tokenizer");
  long long boundary = -1;
  if (!text::parse_int64(scalar(record, "document_boundary"), boundary)) boundary = -1;
  const std::string file = kind == "sentencepiece" ? scalar(record, "model") : scalar(record, "vocab_file");
  out << "  made by kgpt prepare (" << record_path << "): tokenizer " << kind;
  if (kind == "tiktoken") out << ", encoding " << scalar(record, "encoding");
  if (!file.empty()) out << ", " << file;
  out << "\n";
  if (boundary >= 0) {
    const auto documents = std::count(tokens.begin(), tokens.end(), static_cast<std::uint16_t>(boundary));
    out << "  " << text::with_thousands(static_cast<unsigned long long>(documents)) << " documents start in it (token "
        << boundary << " before each)\n";
  }

  const std::size_t n = std::min<std::size_t>(tokens.size(), static_cast<std::size_t>(std::max(peek_tokens, 0)));
  const std::vector<int> first(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(n));
  std::string text;
  try {
    if (kind == "tiktoken") {
      const TiktokenTokenizer tokenizer = TiktokenTokenizer::load(file, scalar(record, "encoding"));
      for (int id : first) text += std::string(tokenizer.token_bytes(id));
    } else if (kind == "sentencepiece") {
      const SentencePieceModel model = SentencePieceModel::load(file);
      text = model.decode(first);
    } else if (kind == "byte") {
      for (int id : first) text += id == kByteDocumentBoundary ? std::string("<doc>") : std::string(1, static_cast<char>(id));
    } else {
      out << "  tokenizer '" << kind << "' is not one kgpt decodes\n";
      return;
    }
  } catch (const InputError& e) {
    out << "  its text is not shown: " << e.what() << "\n";
    return;
  }
  out << "  its first " << n << " tokens as text:\n    ";
  for (char c : printable(text)) {
    out << c;
    if (c == '\n') out << "    ";
  }
  out << "\n";
}

}  // namespace kgpt::data
