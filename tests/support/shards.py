"""Token shards for the Python tests, in the format kgpt reads (src/data/shard.hpp): a header of
256 little-endian int32 (magic 20240520, version 1, token count) and the tokens as uint16."""

import numpy as np


def write_shard(path, tokens):
    header = np.zeros(256, dtype="<i4")
    header[0], header[1], header[2] = 20240520, 1, len(tokens)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype="<u2").tobytes())
