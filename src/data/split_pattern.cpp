#include "data/split_pattern.hpp"

#include <unicode/uchar.h>

#include <array>
#include <memory>
#include <utility>

#include "core/error.hpp"

namespace kgpt::data {

namespace {

// General category (ICU's UCharCategory, 0..29) in the low five bits, White_Space in bit 5.
constexpr std::uint8_t kWhiteSpaceBit = 1u << 5;

std::uint8_t lookup_properties(std::uint32_t c) {
  const auto category = static_cast<std::uint8_t>(u_charType(static_cast<UChar32>(c)));
  return static_cast<std::uint8_t>(category | (u_isUWhiteSpace(static_cast<UChar32>(c)) ? kWhiteSpaceBit : 0));
}

// The Basic Multilingual Plane from a table read once; the rest from ICU each time.
std::uint8_t properties(std::uint32_t c) {
  static const std::unique_ptr<std::array<std::uint8_t, 0x10000>> bmp = [] {
    auto table = std::make_unique<std::array<std::uint8_t, 0x10000>>();
    for (std::uint32_t i = 0; i < 0x10000; ++i) (*table)[i] = lookup_properties(i);
    return table;
  }();
  return c < 0x10000 ? (*bmp)[c] : lookup_properties(c);
}

std::uint32_t fold(std::uint32_t c) { return static_cast<std::uint32_t>(u_foldCase(static_cast<UChar32>(c), U_FOLD_CASE_DEFAULT)); }

}  // namespace

struct SplitPattern::CharClass {
  bool negate = false;
  std::uint32_t categories = 0;  // U_MASK of UCharCategory values
  bool white_space = false, not_white_space = false;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> ranges;

  bool contains(std::uint32_t c) const {
    const std::uint8_t p = properties(c);
    bool in = ((categories >> (p & 0x1Fu)) & 1u) != 0;
    const bool space = (p & kWhiteSpaceBit) != 0;
    in = in || (white_space && space) || (not_white_space && !space);
    for (std::size_t i = 0; !in && i < ranges.size(); ++i) in = c >= ranges[i].first && c <= ranges[i].second;
    return in != negate;
  }
};

struct SplitPattern::Instruction {
  enum Op { set, literal, literal_folded, split, jump, run, not_followed_by, match } op;
  int a = 0, b = 0;       // set/run: class index; split: preferred, other; jump: target; not_followed_by: sub-program
  std::uint32_t code = 0;  // literal (folded for literal_folded)
  std::uint32_t min = 0, max = 0;  // run: greedy repetition of one class, max = UINT32_MAX for none
};

namespace {

constexpr std::uint32_t kUnbounded = 0xFFFFFFFFu;

struct Node {
  enum Kind { alternatives, sequence, repeat, set, literal, not_followed_by } kind;
  std::vector<Node> children;
  int class_index = -1;
  std::uint32_t code = 0;
  bool folded = false;
  std::uint32_t min = 0, max = 0;
};

class Parser {
 public:
  Parser(const std::string& text, std::vector<SplitPattern::CharClass>& classes) : text_(text), classes_(classes) {
    std::vector<std::uint32_t> offsets;
    decode_valid_utf8(decode_utf8_replacing(text), chars_, offsets);
  }

  Node parse() {
    Node node = alternatives(false);
    if (at_ < chars_.size()) fail("an unmatched ')'");
    return node;
  }

 private:
  const std::string& text_;
  std::vector<SplitPattern::CharClass>& classes_;
  std::vector<std::uint32_t> chars_;
  std::size_t at_ = 0;

  [[noreturn]] void fail(const std::string& what) const {
    throw InputError("split pattern '" + text_ + "': " + what + " at character " + std::to_string(at_ + 1) +
                     " (kgpt reads the syntax of tiktoken's encodings: classes, \\p{..}, groups, (?i:..), "
                     "(?!..), ? * + {m,n})");
  }
  bool more() const { return at_ < chars_.size(); }
  std::uint32_t peek() const { return chars_[at_]; }

  Node alternatives(bool folded) {
    Node node{Node::alternatives, {}};
    node.children.push_back(sequence(folded));
    while (more() && peek() == '|') {
      ++at_;
      node.children.push_back(sequence(folded));
    }
    return node.children.size() == 1 ? std::move(node.children[0]) : node;
  }

  Node sequence(bool folded) {
    Node node{Node::sequence, {}};
    while (more() && peek() != '|' && peek() != ')') node.children.push_back(quantified(atom(folded)));
    return node;
  }

  std::uint32_t number() {
    if (!more() || peek() < '0' || peek() > '9') fail("a number expected in {m,n}");
    std::uint32_t value = 0;
    while (more() && peek() >= '0' && peek() <= '9') {
      value = value * 10 + (peek() - '0');
      if (value > 1000) fail("a repetition count over 1000");
      ++at_;
    }
    return value;
  }

  Node quantified(Node atom) {
    if (!more()) return atom;
    std::uint32_t min = 0, max = 0;
    const std::uint32_t c = peek();
    if (c == '?') {
      min = 0, max = 1;
    } else if (c == '*') {
      min = 0, max = kUnbounded;
    } else if (c == '+') {
      min = 1, max = kUnbounded;
    } else if (c == '{') {
      ++at_;
      min = max = number();
      if (more() && peek() == ',') {
        ++at_;
        max = more() && peek() == '}' ? kUnbounded : number();
      }
      if (!more() || peek() != '}') fail("a '}' expected");
      if (max < min) fail("{m,n} with n < m");
    } else {
      return atom;
    }
    ++at_;
    if (more() && (peek() == '?' || peek() == '+')) fail("lazy and possessive quantifiers are not read");
    Node node{Node::repeat, {}};
    node.children.push_back(std::move(atom));
    node.min = min, node.max = max;
    return node;
  }

  int add_class(SplitPattern::CharClass c) {
    classes_.push_back(std::move(c));
    return static_cast<int>(classes_.size()) - 1;
  }

  Node set_node(SplitPattern::CharClass c) {
    Node node{Node::set, {}};
    node.class_index = add_class(std::move(c));
    return node;
  }

  std::uint32_t category_mask(const std::string& name) {
    static const std::vector<std::pair<std::string, std::uint32_t>> names = {
        {"L", U_GC_L_MASK},   {"Lu", U_GC_LU_MASK}, {"Ll", U_GC_LL_MASK}, {"Lt", U_GC_LT_MASK}, {"Lm", U_GC_LM_MASK},
        {"Lo", U_GC_LO_MASK}, {"M", U_GC_M_MASK},   {"Mn", U_GC_MN_MASK}, {"Mc", U_GC_MC_MASK}, {"Me", U_GC_ME_MASK},
        {"N", U_GC_N_MASK},   {"Nd", U_GC_ND_MASK}, {"Nl", U_GC_NL_MASK}, {"No", U_GC_NO_MASK}, {"P", U_GC_P_MASK},
        {"Pc", U_GC_PC_MASK}, {"Pd", U_GC_PD_MASK}, {"Ps", U_GC_PS_MASK}, {"Pe", U_GC_PE_MASK}, {"Pi", U_GC_PI_MASK},
        {"Pf", U_GC_PF_MASK}, {"Po", U_GC_PO_MASK}, {"S", U_GC_S_MASK},   {"Sm", U_GC_SM_MASK}, {"Sc", U_GC_SC_MASK},
        {"Sk", U_GC_SK_MASK}, {"So", U_GC_SO_MASK}, {"Z", U_GC_Z_MASK},   {"Zs", U_GC_ZS_MASK}, {"Zl", U_GC_ZL_MASK},
        {"Zp", U_GC_ZP_MASK}, {"C", U_GC_C_MASK},   {"Cc", U_GC_CC_MASK}, {"Cf", U_GC_CF_MASK}, {"Co", U_GC_CO_MASK},
        {"Cs", U_GC_CS_MASK}, {"Cn", U_GC_CN_MASK}};
    for (const auto& [n, mask] : names) {
      if (n == name) return mask;
    }
    fail("an unknown Unicode category \\p{" + name + "}");
  }

  // After a backslash: a class escape (into `into`, true) or a literal character (`code`, false).
  bool escape(SplitPattern::CharClass& into, std::uint32_t& code) {
    if (!more()) fail("a pattern that ends in a backslash");
    const std::uint32_t c = chars_[at_++];
    switch (c) {
      case 's': into.white_space = true; return true;
      case 'S': into.not_white_space = true; return true;
      case 'd': into.categories |= U_GC_ND_MASK; return true;
      case 'n': code = '\n'; return false;
      case 'r': code = '\r'; return false;
      case 't': code = '\t'; return false;
      case 'f': code = '\f'; return false;
      case 'v': code = '\v'; return false;
      case 'p':
      case 'P': {
        std::string name;
        if (more() && peek() == '{') {
          ++at_;
          while (more() && peek() != '}') name += static_cast<char>(chars_[at_++]);
          if (!more()) fail("a '}' expected after \\p{");
          ++at_;
        } else if (more()) {
          name = static_cast<char>(chars_[at_++]);
        }
        const std::uint32_t mask = category_mask(name);
        const std::uint32_t all = (1u << U_CHAR_CATEGORY_COUNT) - 1;
        into.categories |= c == 'p' ? mask : ~mask & all;
        return true;
      }
      default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
          --at_;
          fail(std::string("an escape \\") + static_cast<char>(c) + " that is not read");
        }
        code = c;  // an escaped punctuation character stands for itself
        return false;
    }
  }

  Node bracket() {
    SplitPattern::CharClass c;
    if (more() && peek() == '^') {
      c.negate = true;
      ++at_;
    }
    bool first = true;
    while (more() && (peek() != ']' || first)) {
      first = false;
      std::uint32_t low = chars_[at_++];
      if (low == '[') fail("nested classes are not read");
      if (low == '\\') {
        if (escape(c, low)) continue;
      }
      std::uint32_t high = low;
      if (more() && peek() == '-' && at_ + 1 < chars_.size() && chars_[at_ + 1] != ']') {
        ++at_;
        high = chars_[at_++];
        if (high == '\\') {
          SplitPattern::CharClass unused;
          if (escape(unused, high)) fail("a class escape as the end of a range");
        }
        if (high < low) fail("a range whose end comes before its start");
      }
      c.ranges.emplace_back(low, high);
    }
    if (!more()) fail("a '[' without its ']'");
    ++at_;
    return set_node(std::move(c));
  }

  Node atom(bool folded) {
    const std::uint32_t c = chars_[at_++];
    if (c == '(') {
      Node inner;
      if (more() && peek() == '?') {
        ++at_;
        if (more() && peek() == ':') {
          ++at_;
          inner = alternatives(folded);
        } else if (at_ + 1 < chars_.size() && peek() == 'i' && chars_[at_ + 1] == ':') {
          at_ += 2;
          inner = alternatives(true);
        } else if (more() && peek() == '!') {
          ++at_;
          Node look{Node::not_followed_by, {}};
          look.children.push_back(alternatives(folded));
          inner = std::move(look);
        } else {
          fail("a group kind other than (?: (?i: (?!");
        }
      } else {
        inner = alternatives(folded);
      }
      if (!more() || peek() != ')') fail("a '(' without its ')'");
      ++at_;
      return inner;
    }
    if (c == '[') return bracket();
    if (c == '.' || c == '^' || c == '$') {
      --at_;
      fail("'.', '^' and '$' are not read");
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') {
      --at_;
      fail("a quantifier with nothing before it");
    }
    std::uint32_t code = c;
    if (c == '\\') {
      SplitPattern::CharClass set;
      if (escape(set, code)) return set_node(std::move(set));
    }
    Node node{Node::literal, {}};
    node.folded = folded;
    node.code = folded ? fold(code) : code;
    return node;
  }
};

class Compiler {
 public:
  using Instruction = SplitPattern::Instruction;
  explicit Compiler(std::vector<Instruction>& program) : program_(program) {}

  int emit(Instruction instruction) {
    program_.push_back(instruction);
    return static_cast<int>(program_.size()) - 1;
  }
  int here() const { return static_cast<int>(program_.size()); }

  void compile(const Node& node) {
    switch (node.kind) {
      case Node::set: emit({Instruction::set, node.class_index}); return;
      case Node::literal: {
        Instruction i{node.folded ? Instruction::literal_folded : Instruction::literal};
        i.code = node.code;
        emit(i);
        return;
      }
      case Node::sequence:
        for (const Node& child : node.children) compile(child);
        return;
      case Node::alternatives: {
        std::vector<int> jumps;
        for (std::size_t k = 0; k + 1 < node.children.size(); ++k) {
          const int fork = emit({Instruction::split});
          program_[fork].a = here();
          compile(node.children[k]);
          jumps.push_back(emit({Instruction::jump}));
          program_[fork].b = here();
        }
        compile(node.children.back());
        for (int j : jumps) program_[j].a = here();
        return;
      }
      case Node::not_followed_by: {
        const int look = emit({Instruction::not_followed_by});
        const int skip = emit({Instruction::jump});
        program_[look].a = here();
        compile(node.children[0]);
        emit({Instruction::match});
        program_[skip].a = here();
        return;
      }
      case Node::repeat: {
        const Node& body = node.children[0];
        if (body.kind == Node::set) {
          Instruction i{Instruction::run, body.class_index};
          i.min = node.min, i.max = node.max;
          emit(i);
          return;
        }
        for (std::uint32_t k = 0; k < node.min; ++k) compile(body);
        if (node.max == kUnbounded) {
          const int loop = emit({Instruction::split});
          program_[loop].a = here();
          compile(body);
          emit({Instruction::jump, loop});
          program_[loop].b = here();
          return;
        }
        std::vector<int> forks;
        for (std::uint32_t k = node.min; k < node.max; ++k) {
          const int fork = emit({Instruction::split});
          program_[fork].a = here();
          forks.push_back(fork);
          compile(body);
        }
        for (int f : forks) program_[f].b = here();
        return;
      }
    }
  }

 private:
  std::vector<Instruction>& program_;
};

}  // namespace

namespace {

// The characters a node's matches can start with (as classes and literals), and whether it can
// match nothing. A lookahead consumes nothing, so it adds no first character; what follows does.
struct FirstCharacters {
  std::vector<int> classes;
  std::vector<std::pair<std::uint32_t, bool>> literals;
  bool nullable = false;
};

void first_characters(const Node& node, FirstCharacters& into, bool& nullable) {
  switch (node.kind) {
    case Node::set: into.classes.push_back(node.class_index); nullable = false; return;
    case Node::literal: into.literals.emplace_back(node.code, node.folded); nullable = false; return;
    case Node::not_followed_by: nullable = true; return;
    case Node::repeat: {
      bool child = false;
      first_characters(node.children[0], into, child);
      nullable = node.min == 0 || child;
      return;
    }
    case Node::alternatives: {
      nullable = false;
      for (const Node& c : node.children) {
        bool child = false;
        first_characters(c, into, child);
        nullable = nullable || child;
      }
      return;
    }
    case Node::sequence:
      for (const Node& c : node.children) {
        bool child = false;
        first_characters(c, into, child);
        if (!child) {
          nullable = false;
          return;
        }
      }
      nullable = true;
      return;
  }
}

}  // namespace

SplitPattern::SplitPattern(const std::string& pattern) : text_(pattern) {
  if (pattern.empty()) throw InputError("split pattern: empty");
  Parser parser(pattern, classes_);
  const Node root = parser.parse();
  Compiler compiler(program_);
  const std::vector<Node> top = root.kind == Node::alternatives ? root.children : std::vector<Node>{root};
  for (const Node& node : top) {
    Alternative a;
    a.start = compiler.here();
    compiler.compile(node);
    compiler.emit({Instruction::match});
    FirstCharacters first;
    first_characters(node, first, a.nullable);
    a.first_classes = std::move(first.classes);
    a.first_literals = std::move(first.literals);
    alternatives_.push_back(std::move(a));
  }
  for (Alternative& a : alternatives_) {
    for (std::uint32_t c = 0; c < 128; ++c) {
      bool can = a.nullable;
      for (int k : a.first_classes) can = can || classes_[static_cast<std::size_t>(k)].contains(c);
      for (const auto& [code, folded] : a.first_literals) can = can || (folded ? fold(c) : c) == code;
      if (can) a.ascii_starts[c >> 6] |= std::uint64_t(1) << (c & 63);
    }
  }
}

bool SplitPattern::may_start(const Alternative& a, std::uint32_t c) const {
  if (c < 128) return ((a.ascii_starts[c >> 6] >> (c & 63)) & 1u) != 0;
  if (a.nullable) return true;
  for (int k : a.first_classes) {
    if (classes_[static_cast<std::size_t>(k)].contains(c)) return true;
  }
  for (const auto& [code, folded] : a.first_literals) {
    if ((folded ? fold(c) : c) == code) return true;
  }
  return false;
}

SplitPattern::~SplitPattern() = default;
SplitPattern::SplitPattern(SplitPattern&&) noexcept = default;
SplitPattern& SplitPattern::operator=(SplitPattern&&) noexcept = default;

long SplitPattern::match(const std::vector<std::uint32_t>& chars, std::uint32_t begin, int pc,
                         std::vector<Backtrack>& stack) const {
  const std::size_t floor = stack.size();
  std::uint32_t at = begin;
  const auto n = static_cast<std::uint32_t>(chars.size());
  for (;;) {
    const Instruction& i = program_[static_cast<std::size_t>(pc)];
    bool ok = true;
    switch (i.op) {
      case Instruction::set:
        ok = at < n && classes_[static_cast<std::size_t>(i.a)].contains(chars[at]);
        ++at, ++pc;
        break;
      case Instruction::literal:
        ok = at < n && chars[at] == i.code;
        ++at, ++pc;
        break;
      case Instruction::literal_folded:
        ok = at < n && fold(chars[at]) == i.code;
        ++at, ++pc;
        break;
      case Instruction::split:
        stack.push_back({i.b, at, at});
        pc = i.a;
        break;
      case Instruction::jump: pc = i.a; break;
      case Instruction::run: {
        const CharClass& set = classes_[static_cast<std::size_t>(i.a)];
        std::uint32_t count = 0;
        while (count < i.max && at + count < n && set.contains(chars[at + count])) ++count;
        if (count < i.min) {
          ok = false;
          break;
        }
        if (count > i.min) stack.push_back({pc + 1, at + count - 1, at + i.min});
        at += count, ++pc;
        break;
      }
      case Instruction::not_followed_by: {
        // Runs on the same stack above this match's entries, which it leaves as it found them.
        ok = match(chars, at, i.a, stack) < 0;
        ++pc;
        break;
      }
      case Instruction::match: stack.resize(floor); return at;
    }
    if (ok) continue;
    if (stack.size() == floor) return -1;
    Backtrack& top = stack.back();
    pc = top.pc;
    at = top.position;
    if (top.position > top.lowest) {
      --top.position;
    } else {
      stack.pop_back();
    }
  }
}

void SplitPattern::split(const std::string& text, std::vector<Piece>& pieces) const {
  pieces.clear();
  std::vector<std::uint32_t> chars, offsets;
  decode_valid_utf8(text, chars, offsets);
  std::vector<Backtrack> stack;
  const auto n = static_cast<std::uint32_t>(chars.size());
  for (std::uint32_t at = 0; at < n;) {
    long end = -1;
    for (const Alternative& a : alternatives_) {
      if (!may_start(a, chars[at])) continue;
      end = match(chars, at, a.start, stack);
      if (end >= 0) break;  // the first alternative that matches, as leftmost-first takes it
    }
    if (end <= static_cast<long>(at)) {  // no match, or an empty one: the character is not in any piece
      ++at;
      continue;
    }
    pieces.push_back({offsets[at], offsets[static_cast<std::size_t>(end)]});
    at = static_cast<std::uint32_t>(end);
  }
}

void decode_valid_utf8(const std::string& text, std::vector<std::uint32_t>& chars, std::vector<std::uint32_t>& offsets) {
  chars.clear();
  offsets.clear();
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  for (std::size_t i = 0; i < n;) {
    offsets.push_back(static_cast<std::uint32_t>(i));
    const unsigned char lead = bytes[i];
    std::uint32_t c;
    std::size_t length;
    if (lead < 0x80) {
      c = lead, length = 1;
    } else if (lead < 0xE0) {
      c = lead & 0x1Fu, length = 2;
    } else if (lead < 0xF0) {
      c = lead & 0x0Fu, length = 3;
    } else {
      c = lead & 0x07u, length = 4;
    }
    if (i + length > n) throw Error(ExitCode::failure, "split pattern: text that is not valid UTF-8");
    for (std::size_t k = 1; k < length; ++k) c = (c << 6) | (bytes[i + k] & 0x3Fu);
    chars.push_back(c);
    i += length;
  }
  offsets.push_back(static_cast<std::uint32_t>(n));
}

std::string decode_utf8_replacing(const std::string& bytes) {
  static const char kReplacement[] = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(bytes.size());
  const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
  const std::size_t n = bytes.size();
  for (std::size_t i = 0; i < n;) {
    const unsigned char lead = b[i];
    if (lead < 0x80) {
      out += static_cast<char>(lead);
      ++i;
      continue;
    }
    std::size_t length = 0;
    unsigned char low = 0x80, high = 0xBF;  // the second byte's bounds
    if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
      if (lead == 0xE0) low = 0xA0;
      if (lead == 0xED) high = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
      if (lead == 0xF0) low = 0x90;
      if (lead == 0xF4) high = 0x8F;
    }
    if (length == 0) {
      out += kReplacement;
      ++i;
      continue;
    }
    std::size_t k = 1;
    for (; k < length && i + k < n; ++k) {
      const unsigned char c = b[i + k];
      const bool fits = k == 1 ? (c >= low && c <= high) : (c >= 0x80 && c <= 0xBF);
      if (!fits) break;
    }
    if (k == length) {
      out.append(bytes, i, length);
    } else {
      out += kReplacement;  // the maximal subpart b[i, i + k) stands as one U+FFFD
    }
    i += k;
  }
  return out;
}

}  // namespace kgpt::data
