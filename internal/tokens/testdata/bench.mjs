// Token counting throughput of the reference tokenizer (npm tiktoken, the
// Rust core compiled to WASM) on one file, for BENCHMARKS.md:
//
//   node internal/tokens/testdata/bench.mjs FILE [REPS]
//
// Prints, per encoding, the token count, MB/s and tokens/s of
// encode_ordinary over the whole file, best of REPS runs after a warm-up.
import fs from "node:fs";
import { get_encoding } from "tiktoken";

const [file, repsArg] = process.argv.slice(2);
if (!file) {
  console.error("usage: node bench.mjs FILE [REPS]");
  process.exit(2);
}
const reps = Number(repsArg ?? 5);
const text = new TextDecoder("utf-8").decode(fs.readFileSync(file));
const bytes = Buffer.byteLength(text, "utf8");
for (const name of ["cl100k_base", "o200k_base"]) {
  const enc = get_encoding(name);
  let tokens = enc.encode_ordinary(text).length; // warm-up
  let best = Infinity;
  for (let i = 0; i < reps; i++) {
    const t0 = process.hrtime.bigint();
    tokens = enc.encode_ordinary(text).length;
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
  }
  enc.free();
  console.log(JSON.stringify({ encoding: name, bytes, tokens, seconds: +best.toFixed(4),
    mb_per_s: +(bytes / 1e6 / best).toFixed(2), tokens_per_s: Math.round(tokens / best) }));
}
