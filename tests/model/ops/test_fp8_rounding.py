#!/usr/bin/python3
"""kgpt's FP8 rounding (src/core/fp8.hpp) against an independent numpy implementation.

usage: test_fp8_rounding.py FP8_ROUND_DUMP WORKDIR

numpy has no FP8 type, so the formats are built here from their definition: the 256 codes of each
decoded to their values (e4m3: 4 exponent bits of bias 7, 3 mantissa bits, subnormals, the code
S.1111.111 NaN, largest finite 448; e5m2: 5 exponent bits of bias 15, 2 mantissa bits, the all-ones
exponent infinity and NaN, largest finite 57344). A float rounds to the nearest value of the table,
a tie to the value whose code is even, and beyond the largest finite value to it (a cast after a
clamp to the format's range). kgpt's rounding works on the float's bits instead; the two must give
the same float for every input: every finite bf16 value, every tie between neighbouring FP8 values
and the float32s on either side of it, and random float32s over 50 binades.
"""

import os
import subprocess
import sys

import numpy as np

DUMP, WORKDIR = sys.argv[1:3]


def table(exponent_bits, mantissa_bits):
    bias = 2 ** (exponent_bits - 1) - 1
    values, codes = [], []
    for code in range(128):  # the positive half; the sign is handled apart
        e, m = code >> mantissa_bits, code & (2 ** mantissa_bits - 1)
        if exponent_bits == 4 and e == 15 and m == 7:
            continue
        if exponent_bits == 5 and e == 31:
            continue
        if e == 0:
            value = m * 2.0 ** (1 - bias - mantissa_bits)
        else:
            value = (1 + m / 2 ** mantissa_bits) * 2.0 ** (e - bias)
        values.append(value)
        codes.append(code)
    order = np.argsort(values)
    return np.array(values)[order], np.array(codes)[order]


def round_to(x, values, codes):
    with np.errstate(invalid="ignore"):
        x = x.astype(np.float64)
    magnitude = np.minimum(np.abs(x), values[-1])
    above = np.clip(np.searchsorted(values, magnitude), 1, len(values) - 1)
    low, high = values[above - 1], values[above]
    pick_high = (high - magnitude < magnitude - low) | ((high - magnitude == magnitude - low) & (codes[above] % 2 == 0))
    rounded = np.where(pick_high, high, low)
    out = np.copysign(rounded, x)
    out[np.isnan(x)] = np.nan
    return out.astype(np.float32)


def inputs(values):
    bf16 = (np.arange(65536, dtype=np.uint32) << 16).view(np.float32)
    mids = ((values[1:] + values[:-1]) / 2).astype(np.float32)
    assert np.all(mids.astype(np.float64) == (values[1:] + values[:-1]) / 2), "a midpoint is not a float32"
    around = np.concatenate([mids, np.nextafter(mids, np.float32(0)), np.nextafter(mids, np.float32(np.inf))])
    rng = np.random.default_rng(7)
    random = (rng.uniform(1, 2, 200000) * 2.0 ** rng.integers(-30, 20, 200000)).astype(np.float32)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 3e38], dtype=np.float32)
    pool = np.concatenate([bf16, around, random, special])
    return np.concatenate([pool, -pool])


def main():
    os.makedirs(WORKDIR, exist_ok=True)
    failures = 0
    formats = {"e4m3": table(4, 3), "e5m2": table(5, 2)}
    assert formats["e4m3"][0][-1] == 448 and formats["e5m2"][0][-1] == 57344
    x = np.concatenate([inputs(formats["e4m3"][0]), inputs(formats["e5m2"][0])])
    path_in = os.path.join(WORKDIR, "fp8_inputs.f32")
    outs = {name: os.path.join(WORKDIR, f"fp8_{name}.f32") for name in formats}
    x.tofile(path_in)
    subprocess.run([DUMP, path_in, outs["e4m3"], outs["e5m2"]], check=True, timeout=120)
    for name, (values, codes) in formats.items():
        got = np.fromfile(outs[name], dtype=np.float32)
        want = round_to(x, values, codes)
        same = (got == want) | (np.isnan(got) & np.isnan(want))
        zeros = (want == 0) & same
        same[zeros] = np.signbit(got[zeros]) == np.signbit(want[zeros])
        wrong = np.flatnonzero(~same)
        print(f"{name}: {len(x)} inputs, {len(wrong)} differ")
        for i in wrong[:10]:
            print(f"  {name}({x[i]!r}) = {got[i]!r}, numpy {want[i]!r}")
        failures += len(wrong)
        print(f"{name}: {np.unique(got[np.isfinite(got)]).size} distinct finite results")
    print("passed" if failures == 0 else "failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
