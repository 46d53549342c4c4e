// Walks TFRecord files with npm's @roboflow/tfrecords framing helpers (its readInt64, crc32c and
// maskCrc) and prints one JSON line per record: the file, its offset, length and base64 data.
// Exits 1 naming the file and offset when a checksum does not match or a record is cut short.
//   node tfrecord_framing.cjs NODE_MODULES FILE...
"use strict";
const fs = require("fs");
const path = require("path");

const [modules, ...files] = process.argv.slice(2);
const helpers = require(path.join(modules, "@roboflow", "tfrecords", "src", "tensorFlowHelpers.js"));

for (const file of files) {
  const data = fs.readFileSync(file);
  let at = 0;
  while (at < data.length) {
    if (data.length - at < 12) {
      console.error(`${file}: record at byte ${at} is cut short in its header`);
      process.exit(1);
    }
    const lengthBytes = data.subarray(at, at + 8);
    const length = helpers.readInt64(lengthBytes);
    if (helpers.maskCrc(helpers.crc32c(lengthBytes)) !== data.readUInt32LE(at + 8)) {
      console.error(`${file}: record at byte ${at}: the length's checksum does not match`);
      process.exit(1);
    }
    if (data.length - at - 12 < length + 4) {
      console.error(`${file}: record at byte ${at} is cut short`);
      process.exit(1);
    }
    const record = data.subarray(at + 12, at + 12 + length);
    if (helpers.maskCrc(helpers.crc32c(record)) !== data.readUInt32LE(at + 12 + length)) {
      console.error(`${file}: record at byte ${at}: the data's checksum does not match`);
      process.exit(1);
    }
    console.log(JSON.stringify({ file, offset: at, length, data: record.toString("base64") }));
    at += 16 + length;
  }
}
