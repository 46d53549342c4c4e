// Encodes texts with npm's tiktoken (the Rust tiktoken compiled to WebAssembly) and js-tiktoken
// (a JavaScript port), the references kgpt's BPE is checked against.
//   node tiktoken_reference.cjs NODE_MODULES JOB.json OUT.json
// JOB: {"encodings": [...], "texts": [{"name", "path" or "text", "allow_special"}]}. Files are read
// as node reads text (invalid UTF-8 becomes U+FFFD). OUT: {encoding: {text name: {"wasm": ids, "js": ids,
// "text": the UTF-8 text both encoded, base64}}}.
"use strict";
const fs = require("fs");
const path = require("path");

const [modules, jobFile, outFile] = process.argv.slice(2);
const wasm = require(path.join(modules, "tiktoken"));
const js = require(path.join(modules, "js-tiktoken"));
const job = JSON.parse(fs.readFileSync(jobFile, "utf8"));

const out = {};
for (const name of job.encodings) {
  const wasmEncoding = wasm.get_encoding(name);
  const jsEncoding = js.getEncoding(name);
  out[name] = {};
  for (const text of job.texts) {
    const content = text.text !== undefined ? text.text : fs.readFileSync(text.path, "utf8");
    const wasmIds = text.allow_special ? wasmEncoding.encode(content, "all") : wasmEncoding.encode_ordinary(content);
    const jsIds = text.allow_special ? jsEncoding.encode(content, "all") : jsEncoding.encode(content, [], []);
    out[name][text.name] = {
      wasm: Array.from(wasmIds),
      js: Array.from(jsIds),
      text: Buffer.from(content, "utf8").toString("base64"),
    };
  }
  wasmEncoding.free();
}
fs.writeFileSync(outFile, JSON.stringify(out));
