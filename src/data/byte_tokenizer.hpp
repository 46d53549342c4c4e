#pragma once
// The byte tokenizer of `kgpt prepare`: token b (0..255) is the byte b, and token 256 marks the
// start of a document, as GPT-2's end-of-text token does between documents. The boundary
// stands for no bytes of text when val_bpb counts bytes.

namespace kgpt::data {

constexpr int kByteDocumentBoundary = 256;
constexpr int kByteVocabSize = 257;

}  // namespace kgpt::data
