#include "data/tiktoken.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <unordered_map>

#include "core/error.hpp"

namespace kgpt::data {

namespace {

constexpr char kSpacedPattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr char kCl100kPattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr char kO200kPattern[] =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::string file_line(const std::string& path, std::size_t line) { return path + ":" + std::to_string(line); }

std::string read_whole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot be read (a tiktoken rank file or GPT-2's encoder.json)");
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (in.bad()) throw InputError(path + ": a read error");
  return bytes.str();
}

std::string file_name(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string sibling(const std::string& path, const std::string& name) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? name : path.substr(0, slash + 1) + name;
}

// Strict base64 (the standard alphabet, padded to a multiple of four); false when `text` is not.
bool decode_base64(std::string_view text, std::string& out) {
  out.clear();
  if (text.empty() || text.size() % 4 != 0) return false;
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  for (std::size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    int v[4];
    int padding = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = text[i + static_cast<std::size_t>(k)];
      if (c == '=' && last && k >= 2) {
        v[k] = 0;
        ++padding;
        continue;
      }
      if (padding > 0) return false;  // a character after '='
      v[k] = value(c);
      if (v[k] < 0) return false;
    }
    const std::uint32_t bits = (static_cast<std::uint32_t>(v[0]) << 18) | (static_cast<std::uint32_t>(v[1]) << 12) |
                               (static_cast<std::uint32_t>(v[2]) << 6) | static_cast<std::uint32_t>(v[3]);
    out += static_cast<char>((bits >> 16) & 0xFF);
    if (padding < 2) out += static_cast<char>((bits >> 8) & 0xFF);
    if (padding < 1) out += static_cast<char>(bits & 0xFF);
  }
  return true;
}

// GPT-2's spelling of bytes as printable characters: the printable bytes other than the space
// stand for themselves, the other 68 bytes for U+0100 upwards, in byte order. The ranks of the 256
// single bytes follow the same order.
struct ByteSpelling {
  std::array<std::uint32_t, 256> char_of{};   // byte -> code point
  std::array<int, 256> byte_rank_order{};     // rank -> byte
  std::map<std::uint32_t, int> byte_of;       // code point -> byte
  ByteSpelling() {
    auto printable = [](int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
    int rank = 0, extra = 0;
    for (int b = 0; b < 256; ++b) {
      if (printable(b)) byte_rank_order[static_cast<std::size_t>(rank++)] = b, char_of[static_cast<std::size_t>(b)] = static_cast<std::uint32_t>(b);
    }
    for (int b = 0; b < 256; ++b) {
      if (!printable(b)) {
        byte_rank_order[static_cast<std::size_t>(rank++)] = b;
        char_of[static_cast<std::size_t>(b)] = static_cast<std::uint32_t>(256 + extra++);
      }
    }
    for (int b = 0; b < 256; ++b) byte_of[char_of[static_cast<std::size_t>(b)]] = b;
  }
  // The bytes a spelled token stands for; false when a character is not a byte's spelling.
  bool bytes(const std::string& spelled, std::string& out) const {
    out.clear();
    if (decode_utf8_replacing(spelled) != spelled) return false;
    std::vector<std::uint32_t> chars, offsets;
    decode_valid_utf8(spelled, chars, offsets);
    for (const std::uint32_t c : chars) {
      const auto it = byte_of.find(c);
      if (it == byte_of.end()) return false;
      out += static_cast<char>(it->second);
    }
    return true;
  }
};

// Token bytes -> rank: open addressing over the token strings themselves, with a hash made for
// the short keys BPE asks about (two to a few dozen bytes), several times faster than
// std::unordered_map's.
class TokenIndex {
 public:
  static constexpr int kNone = std::numeric_limits<int>::max();

  void build(const std::vector<std::string>& tokens, const std::vector<std::uint8_t>& special) {
    tokens_ = &tokens;
    std::size_t capacity = 16;
    while (capacity < tokens.size() * 2) capacity *= 2;
    slots_.assign(capacity, 0);
    mask_ = capacity - 1;
    for (std::size_t id = 0; id < tokens.size(); ++id) {
      if (tokens[id].empty() || special[id]) continue;
      const std::uint64_t h = hash(tokens[id]);
      std::size_t i = h & mask_;
      while (slots_[i] != 0) i = (i + 1) & mask_;
      slots_[i] = (h & 0xFFFFFFFF00000000ull) | (id + 1);
    }
  }

  int find(std::string_view bytes) const {
    const std::uint64_t h = hash(bytes);
    for (std::size_t i = h & mask_;; i = (i + 1) & mask_) {
      const std::uint64_t slot = slots_[i];
      if (slot == 0) return kNone;
      if ((slot & 0xFFFFFFFF00000000ull) == (h & 0xFFFFFFFF00000000ull)) {
        const auto id = static_cast<std::size_t>(slot & 0xFFFFFFFFull) - 1;
        if ((*tokens_)[id] == bytes) return static_cast<int>(id);
      }
    }
  }

 private:
  static std::uint64_t hash(std::string_view bytes) {
    std::uint64_t h = 0x9E3779B97F4A7C15ull ^ bytes.size();
    std::size_t i = 0;
    for (; i + 8 <= bytes.size(); i += 8) {
      std::uint64_t chunk;
      std::memcpy(&chunk, bytes.data() + i, 8);
      h = (h ^ chunk) * 0xBF58476D1CE4E5B9ull;
      h ^= h >> 31;
    }
    std::uint64_t tail = 0;
    std::memcpy(&tail, bytes.data() + i, bytes.size() - i);
    h = (h ^ tail) * 0x94D049BB133111EBull;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 32);
  }

  const std::vector<std::string>* tokens_ = nullptr;
  std::vector<std::uint64_t> slots_;  // high 32 bits: the hash's; low: id + 1; 0: empty
  std::size_t mask_ = 0;
};

}  // namespace

const std::vector<TiktokenEncodingSpec>& tiktoken_encodings() {
  static const std::vector<TiktokenEncodingSpec> encodings = {
      {"gpt2", kSpacedPattern, {{"<|endoftext|>", 50256}}, 50256},
      {"r50k_base", kSpacedPattern, {{"<|endoftext|>", 50256}}, 50256},
      {"p50k_base", kSpacedPattern, {{"<|endoftext|>", 50256}}, 50280},
      {"p50k_edit",
       kSpacedPattern,
       {{"<|endoftext|>", 50256}, {"<|fim_prefix|>", 50281}, {"<|fim_middle|>", 50282}, {"<|fim_suffix|>", 50283}},
       50280},
      {"cl100k_base",
       kCl100kPattern,
       {{"<|endoftext|>", 100257},
        {"<|fim_prefix|>", 100258},
        {"<|fim_middle|>", 100259},
        {"<|fim_suffix|>", 100260},
        {"<|endofprompt|>", 100276}},
       100256},
      {"o200k_base", kO200kPattern, {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}}, 199998},
  };
  return encodings;
}

std::vector<std::string> tiktoken_encoding_names() {
  std::vector<std::string> names;
  for (const auto& e : tiktoken_encodings()) names.push_back(e.name);
  return names;
}

struct TiktokenTokenizer::Impl {
  std::string path, encoding;
  std::unique_ptr<SplitPattern> pattern;
  std::vector<std::string> tokens;  // by id; empty for ids that are no token
  std::vector<std::uint8_t> special;
  std::vector<std::pair<std::string, int>> special_tokens;
  TokenIndex rank_of;  // over `tokens`, built once they are all there
  std::array<int, 256> byte_rank{};
  int rank_count = 0;
  int end_of_text = -1;

  // Scratch of one encode call.
  mutable std::vector<SplitPattern::Piece> pieces;
  mutable std::vector<std::pair<std::uint32_t, std::uint32_t>> parts;

  int rank(std::string_view bytes) const { return rank_of.find(bytes); }

  // tiktoken's merge: the adjacent pair whose bytes have the lowest rank merges first (the
  // leftmost of equal ones), until no pair of parts is a token.
  void merge(std::string_view piece, std::vector<int>& out) const {
    if (piece.size() == 1) {
      out.push_back(byte_rank[static_cast<unsigned char>(piece[0])]);
      return;
    }
    const int whole = rank(piece);
    if (whole != std::numeric_limits<int>::max()) {
      out.push_back(whole);
      return;
    }
    constexpr std::uint32_t none = std::numeric_limits<std::uint32_t>::max();
    parts.clear();
    const auto n = static_cast<std::uint32_t>(piece.size());
    for (std::uint32_t i = 0; i + 1 < n; ++i) {
      const int r = rank(piece.substr(i, 2));
      parts.emplace_back(i, r == std::numeric_limits<int>::max() ? none : static_cast<std::uint32_t>(r));
    }
    parts.emplace_back(n - 1, none);
    parts.emplace_back(n, none);
    auto rank_after_merge = [&](std::size_t i) -> std::uint32_t {
      if (i + 3 >= parts.size()) return none;
      const int r = rank(piece.substr(parts[i].first, parts[i + 3].first - parts[i].first));
      return r == std::numeric_limits<int>::max() ? none : static_cast<std::uint32_t>(r);
    };
    for (;;) {
      std::uint32_t best = none;
      std::size_t at = 0;
      for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
        if (parts[i].second < best) best = parts[i].second, at = i;
      }
      if (best == none) break;
      if (at > 0) parts[at - 1].second = rank_after_merge(at - 1);
      parts[at].second = rank_after_merge(at);
      parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(at) + 1);
    }
    for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
      out.push_back(rank(piece.substr(parts[i].first, parts[i + 1].first - parts[i].first)));
    }
  }

  void encode_ordinary(const std::string& text, std::vector<int>& out) const {
    pattern->split(text, pieces);
    const std::string_view view(text);
    for (const auto& p : pieces) merge(view.substr(p.begin, p.end - p.begin), out);
  }

  void add_token(std::string bytes, int id, const std::string& where) {
    if (id < 0) throw InputError(where + ": a negative rank");
    if (static_cast<std::size_t>(id) >= tokens.size()) {
      tokens.resize(static_cast<std::size_t>(id) + 1);
      special.resize(tokens.size(), 0);
    }
    if (!tokens[static_cast<std::size_t>(id)].empty()) throw InputError(where + ": rank " + std::to_string(id) + " is given twice");
    if (bytes.empty()) throw InputError(where + ": a token of no bytes");
    tokens[static_cast<std::size_t>(id)] = std::move(bytes);
    ++rank_count;
  }

  // Indexes the tokens (not the special ones), and finds each byte's token.
  void finish(const std::vector<std::string>& line_of_rank) {
    std::unordered_map<std::string_view, int> seen;
    seen.reserve(tokens.size());
    for (std::size_t id = 0; id < tokens.size(); ++id) {
      const std::string& bytes = tokens[id];
      if (bytes.empty() || special[id]) continue;
      const auto [it, inserted] = seen.emplace(std::string_view(bytes), static_cast<int>(id));
      if (!inserted) {
        throw InputError(line_of_rank[id] + ": the token of rank " + std::to_string(id) + " has the bytes of rank " +
                         std::to_string(it->second) + " (" + line_of_rank[static_cast<std::size_t>(it->second)] + ")");
      }
    }
    rank_of.build(tokens, special);
    for (int b = 0; b < 256; ++b) {
      const int r = rank(std::string(1, static_cast<char>(b)));
      if (r == std::numeric_limits<int>::max()) {
        throw InputError(path + ": the byte " + std::to_string(b) +
                         " has no token of its own, so byte-level BPE cannot encode every text");
      }
      byte_rank[static_cast<std::size_t>(b)] = r;
    }
  }

  void add_special_tokens(const std::vector<std::pair<std::string, int>>& list) {
    for (const auto& [text, id] : list) {
      if (static_cast<std::size_t>(id) < tokens.size() && !tokens[static_cast<std::size_t>(id)].empty()) {
        throw InputError(path + ": rank " + std::to_string(id) + " is a token of the file, but encoding " + encoding +
                         " gives that id to its special token " + text);
      }
      if (static_cast<std::size_t>(id) >= tokens.size()) {
        tokens.resize(static_cast<std::size_t>(id) + 1);
        special.resize(tokens.size(), 0);
      }
      tokens[static_cast<std::size_t>(id)] = text;
      special[static_cast<std::size_t>(id)] = 1;
      special_tokens.emplace_back(text, id);
      if (text == "<|endoftext|>") end_of_text = id;
    }
  }

  void check_no_gaps() const {
    const std::size_t highest = highest_rank();
    for (std::size_t id = 0; id < highest; ++id) {
      if (tokens[id].empty()) {
        throw InputError(path + ": rank " + std::to_string(id) + " is missing (the file ranks " + std::to_string(rank_count) +
                         " tokens up to " + std::to_string(highest) + ", and no special token of " + encoding +
                         " takes the id)");
      }
    }
  }
  std::size_t highest_rank() const {
    std::size_t high = 0;
    for (std::size_t id = 0; id < tokens.size(); ++id) {
      if (!tokens[id].empty() && !special[id]) high = id;
    }
    return high;
  }
};

namespace {

void read_rank_file(TiktokenTokenizer::Impl& impl, std::vector<std::string>& line_of_rank) {
  const std::string contents = read_whole(impl.path);
  std::size_t line = 0;
  std::string bytes;
  for (std::size_t start = 0; start < contents.size();) {
    std::size_t end = contents.find('\n', start);
    if (end == std::string::npos) end = contents.size();
    std::string_view text(contents.data() + start, end - start);
    start = end + 1;
    ++line;
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    if (text.empty()) continue;
    const std::string where = file_line(impl.path, line);
    const auto space = text.find(' ');
    if (space == std::string_view::npos || text.find(' ', space + 1) != std::string_view::npos) {
      throw InputError(where + ": expected 'BASE64 RANK' (a tiktoken rank file has one token a line)");
    }
    if (!decode_base64(text.substr(0, space), bytes)) {
      throw InputError(where + ": '" + std::string(text.substr(0, std::min<std::size_t>(space, 40))) + "' is not base64");
    }
    const std::string_view number = text.substr(space + 1);
    long long rank = 0;
    if (number.empty() || number.size() > 9 ||
        !std::all_of(number.begin(), number.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      throw InputError(where + ": the rank '" + std::string(number.substr(0, 20)) + "' is not a number from 0 to 999999999");
    }
    for (char c : number) rank = rank * 10 + (c - '0');
    if (rank >= (1 << 22)) throw InputError(where + ": rank " + std::to_string(rank) + " is beyond 4,194,303, more than any vocabulary kgpt reads");
    const auto id = static_cast<std::size_t>(rank);
    if (id < line_of_rank.size() && !line_of_rank[id].empty()) {
      throw InputError(where + ": rank " + std::to_string(rank) + " is given twice (first at " + line_of_rank[id] + ")");
    }
    if (id >= line_of_rank.size()) line_of_rank.resize(id + 1);
    line_of_rank[id] = where;
    impl.add_token(bytes, static_cast<int>(rank), where);
  }
  if (impl.rank_count == 0) throw InputError(impl.path + ": no tokens (a tiktoken rank file has one 'BASE64 RANK' a line)");
}

// GPT-2's pair: encoder.json (spelled token -> id) and vocab.bpe (the merges, in rank order).
void read_gpt2_files(TiktokenTokenizer::Impl& impl, const std::string& encoder_path, const std::string& merges_path,
                     std::vector<std::string>& line_of_rank, int& end_of_text) {
  static const ByteSpelling spelling;
  for (int rank = 0; rank < 256; ++rank) {
    impl.add_token(std::string(1, static_cast<char>(spelling.byte_rank_order[static_cast<std::size_t>(rank)])), rank,
                   merges_path);
    line_of_rank.push_back(merges_path + " (byte " + std::to_string(spelling.byte_rank_order[static_cast<std::size_t>(rank)]) + ")");
  }
  std::map<std::string, int> rank_of_bytes;
  for (int rank = 0; rank < 256; ++rank) rank_of_bytes[impl.tokens[static_cast<std::size_t>(rank)]] = rank;
  const std::string merges = read_whole(merges_path);
  std::size_t line = 0;
  std::string first, second;
  for (std::size_t start = 0; start < merges.size();) {
    std::size_t end = merges.find('\n', start);
    if (end == std::string::npos) end = merges.size();
    std::string text = merges.substr(start, end - start);
    start = end + 1;
    ++line;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.empty() || (line == 1 && text.rfind("#version", 0) == 0)) continue;
    const std::string where = file_line(merges_path, line);
    const auto space = text.find(' ');
    if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
      throw InputError(where + ": expected 'FIRST SECOND', the two spelled tokens a merge joins");
    }
    if (!spelling.bytes(text.substr(0, space), first) || !spelling.bytes(text.substr(space + 1), second)) {
      throw InputError(where + ": a character that is not GPT-2's spelling of a byte");
    }
    if (!rank_of_bytes.count(first) || !rank_of_bytes.count(second)) {
      throw InputError(where + ": the merge joins a token no earlier line makes");
    }
    const std::string joined = first + second;
    const int rank = impl.rank_count;
    const auto [it, inserted] = rank_of_bytes.emplace(joined, rank);
    if (!inserted) {
      throw InputError(where + ": the merge makes the token of rank " + std::to_string(it->second) + " again");
    }
    line_of_rank.push_back(where);
    impl.add_token(joined, rank, where);
  }

  nlohmann::json encoder;
  try {
    encoder = nlohmann::json::parse(read_whole(encoder_path));
  } catch (const nlohmann::json::exception& e) {
    throw InputError(encoder_path + ": not JSON (" + e.what() + ")");
  }
  if (!encoder.is_object()) throw InputError(encoder_path + ": not a JSON object of token -> id");
  std::vector<std::uint8_t> seen(impl.tokens.size(), 0);
  std::string bytes;
  for (const auto& [spelled, id_value] : encoder.items()) {
    if (!id_value.is_number_integer()) throw InputError(encoder_path + ": the id of '" + spelled + "' is not an integer");
    const auto id = id_value.get<long long>();
    if (spelled == "<|endoftext|>") {
      end_of_text = static_cast<int>(id);
      continue;
    }
    if (spelled == "<|startoftext|>") continue;  // tiktoken leaves it out too
    if (!spelling.bytes(spelled, bytes)) {
      throw InputError(encoder_path + ": '" + spelled + "' has a character that is not GPT-2's spelling of a byte");
    }
    const auto it = rank_of_bytes.find(bytes);
    if (it == rank_of_bytes.end()) {
      throw InputError(encoder_path + ": '" + spelled + "' (id " + std::to_string(id) + ") is no token that " + merges_path +
                       " makes: the two files disagree");
    }
    if (it->second != id) {
      throw InputError(encoder_path + ": '" + spelled + "' is id " + std::to_string(id) + ", but " +
                       line_of_rank[static_cast<std::size_t>(it->second)] + " makes it rank " + std::to_string(it->second) +
                       ": the two files disagree");
    }
    seen[static_cast<std::size_t>(id)] = 1;
  }
  for (std::size_t rank = 0; rank < seen.size(); ++rank) {
    if (!seen[rank]) {
      throw InputError(line_of_rank[rank] + ": rank " + std::to_string(rank) + " is not in " + encoder_path +
                       ": the two files disagree");
    }
  }
}

const TiktokenEncodingSpec& find_encoding(const std::string& name) {
  for (const auto& e : tiktoken_encodings()) {
    if (e.name == name) return e;
  }
  std::string names;
  for (const auto& n : tiktoken_encoding_names()) names += (names.empty() ? "" : ", ") + n;
  throw InputError("tiktoken encoding '" + name + "' is not one of " + names + " (or auto)");
}

}  // namespace

TiktokenTokenizer::TiktokenTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TiktokenTokenizer::~TiktokenTokenizer() = default;
TiktokenTokenizer::TiktokenTokenizer(TiktokenTokenizer&&) noexcept = default;
TiktokenTokenizer& TiktokenTokenizer::operator=(TiktokenTokenizer&&) noexcept = default;

TiktokenTokenizer TiktokenTokenizer::load(const std::string& path, const std::string& encoding) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  std::vector<std::string> line_of_rank;
  const std::string name = file_name(path);
  const bool gpt2_pair = name == "encoder.json" || name == "vocab.bpe";
  int gpt2_end_of_text = -1;
  if (gpt2_pair) {
    const std::string encoder = sibling(path, "encoder.json"), merges = sibling(path, "vocab.bpe");
    read_gpt2_files(*impl, encoder, merges, line_of_rank, gpt2_end_of_text);
  } else {
    read_rank_file(*impl, line_of_rank);
  }

  std::string chosen = encoding;
  if (chosen.empty() || chosen == "auto") {
    chosen.clear();
    std::string stem = name.substr(0, name.find('.'));
    for (const auto& e : tiktoken_encodings()) {
      if (gpt2_pair ? e.name == "gpt2" : e.name == stem) chosen = e.name;
    }
    for (const auto& e : tiktoken_encodings()) {
      if (chosen.empty() && e.ranks == impl->rank_count) chosen = e.name;
    }
    if (chosen.empty()) {
      throw InputError(path + ": " + std::to_string(impl->rank_count) +
                       " ranks, which is no encoding kgpt knows by its size; name the encoding whose split pattern "
                       "and special tokens go with it (data.tiktoken_encoding, or --encoding)");
    }
  }
  const TiktokenEncodingSpec& spec = find_encoding(chosen);
  impl->encoding = spec.name;
  impl->pattern = std::make_unique<SplitPattern>(spec.pattern);
  std::vector<std::pair<std::string, int>> specials = spec.special_tokens;
  if (gpt2_pair && gpt2_end_of_text >= 0) {
    for (auto& [text, id] : specials) {
      if (text == "<|endoftext|>") id = gpt2_end_of_text;
    }
  }
  line_of_rank.resize(std::max(line_of_rank.size(), impl->tokens.size()));
  impl->add_special_tokens(specials);
  impl->finish(line_of_rank);  // last: the index holds views into `tokens`
  impl->check_no_gaps();
  return TiktokenTokenizer(std::move(impl));
}

const std::string& TiktokenTokenizer::path() const { return impl_->path; }
const std::string& TiktokenTokenizer::encoding() const { return impl_->encoding; }
int TiktokenTokenizer::vocab_size() const { return static_cast<int>(impl_->tokens.size()); }
int TiktokenTokenizer::rank_count() const { return impl_->rank_count; }
int TiktokenTokenizer::end_of_text() const { return impl_->end_of_text; }
bool TiktokenTokenizer::is_special(int id) const {
  return id >= 0 && id < vocab_size() && impl_->special[static_cast<std::size_t>(id)] != 0;
}
std::string_view TiktokenTokenizer::token_bytes(int id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return impl_->tokens[static_cast<std::size_t>(id)];
}

void TiktokenTokenizer::encode_into(const std::string& text, bool allow_special, std::vector<int>& out) const {
  const std::string valid = decode_utf8_replacing(text);
  if (!allow_special || impl_->special_tokens.empty()) {
    impl_->encode_ordinary(valid, out);
    return;
  }
  std::size_t at = 0;
  while (at <= valid.size()) {
    std::size_t next = std::string::npos;
    int id = -1;
    std::size_t length = 0;
    for (const auto& [special, special_id] : impl_->special_tokens) {
      const std::size_t found = valid.find(special, at);
      if (found < next || (found == next && found != std::string::npos && special.size() > length)) {
        next = found, id = special_id, length = special.size();
      }
    }
    impl_->encode_ordinary(valid.substr(at, next == std::string::npos ? std::string::npos : next - at), out);
    if (next == std::string::npos) break;
    out.push_back(id);
    at = next + length;
  }
}

std::vector<int> TiktokenTokenizer::encode(const std::string& text, bool allow_special) const {
  std::vector<int> out;
  encode_into(text, allow_special, out);
  return out;
}

std::string TiktokenTokenizer::decode(const std::vector<int>& ids) const {
  std::string text;
  for (int id : ids) {
    const std::string_view bytes = token_bytes(id);
    if (bytes.empty()) {
      throw InputError("token " + std::to_string(id) + " is no token of " + impl_->path + " (ids 0 to " +
                       std::to_string(vocab_size() - 1) + ")");
    }
    text += bytes;
  }
  return text;
}

TokenByteTable TiktokenTokenizer::byte_table(int vocab_size) const {
  TokenByteTable table;
  const auto n = static_cast<std::size_t>(vocab_size);
  table.base_bytes.assign(n, 0);
  table.has_leading_space.assign(n, 0);
  table.is_boundary.assign(n, 1);
  for (std::size_t id = 0; id < n && id < impl_->tokens.size(); ++id) {
    if (impl_->tokens[id].empty() || impl_->special[id]) continue;
    table.base_bytes[id] = static_cast<std::uint8_t>(std::min<std::size_t>(impl_->tokens[id].size(), 255));
    table.is_boundary[id] = 0;
  }
  table.document_start = impl_->end_of_text < vocab_size ? impl_->end_of_text : -1;
  return table;
}

void refuse_nul_bytes(const std::string& text, const std::string& file) {
  const std::size_t at = text.find('\0');
  if (at == std::string::npos) return;
  const std::size_t line = static_cast<std::size_t>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n')) + 1;
  const std::size_t line_start = text.rfind('\n', at);
  const std::size_t column = at - (line_start == std::string::npos ? 0 : line_start + 1) + 1;
  throw InputError(file + ":" + std::to_string(line) + ":" + std::to_string(column) +
                   ": a NUL byte; the input must be text (is it a binary file?)");
}

}  // namespace kgpt::data
