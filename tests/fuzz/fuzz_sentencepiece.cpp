// SentencePiece tokenizers named by data.vocab_file: the .model (a protocol buffer, read by the
// SentencePiece library behind kgpt's checks) when the input's first byte is even, else the .vocab
// text (one piece and score per line).
#include "data/sentencepiece.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const bool model = data[0] % 2 == 0;
  const std::string path = kgpt::fuzz::as_file(data + 1, size - 1, model ? ".model" : ".vocab");
  kgpt::fuzz::expect_clear_refusal([&] { kgpt::data::load_sentencepiece_table(path, 65536); });
  return 0;
}
