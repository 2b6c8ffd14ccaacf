// Regenerates the expected token counts and IDs that internal/tokens is
// tested against, from OpenAI's reference tokenizer (the npm tiktoken
// package, the Rust core compiled to WASM).
//
//   cd internal/tokens/testdata && npm ci && node gen.mjs
//
// Writes expected.json (counts per fixture file), cases.json (short
// generated strings with their token IDs) and long.json (counts of pieces
// longer than 64 KiB, described rather than written out; the reference
// takes seconds for each, its merge being quadratic in a piece's length).
// All are committed; the script is deterministic, so running it again
// changes nothing unless the fixtures or the reference change.
import fs from "node:fs";
import path from "node:path";
import { get_encoding } from "tiktoken";

const encodings = ["cl100k_base", "o200k_base"];
const here = path.dirname(new URL(import.meta.url).pathname);

// mulberry32: a small seeded PRNG, so cases.json is reproducible.
function rng(seed) {
  return () => {
    seed |= 0; seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// Atoms the generated cases are made of: whitespace of every kind (the
// pre-tokenizer's hardest part), letters of each case class, marks, digits of
// several scripts, contractions, punctuation and emoji.
const atoms = [
  " ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r", "\u000b", "\u000c",
  "\u0085", "\u00a0", "\u1680", "\u2000", "\u2028", "\u2029", "\u202f", "\u3000",
  "\u200b", "\ufeff", "a", "xyz", "Hello", "HTTP", "ParseHTTPRequest", "snake_case",
  "ǅ", "ʰ", "ß", "É", "é", "e\u0301", "\u0301", "\u20dd", "ꙮ", "漢字", "ひらがな",
  "カタカナ", "한국어", "Ελληνικά", "русский", "עברית", "العربية", "हिन्दी", "ไทย",
  "0", "7", "42", "12345", "٣", "१२", "Ⅻ", "½", "²", "'s", "'S", "'re", "'LL",
  "'ve", "'d", "'m", "'t", "'ſ", "'x", "'", "\"", "(", ")", "{", "}", ";", ".",
  "...", ",", "/", "//", "/*", "*/", "->", "=>", ":=", "!=", "#", "@", "$", "%",
  "&&", "||", "`", "~", "😀", "👍🏽", "👨‍👩‍👧", "🇫🇷", "1️⃣", "🏳️‍🌈", "\u0000", "\u007f", "<|endoftext|>",
];

function generate(n, seed) {
  const r = rng(seed);
  const out = [];
  for (let i = 0; i < n; i++) {
    const len = 1 + Math.floor(r() * 16);
    let s = "";
    for (let j = 0; j < len; j++) s += atoms[Math.floor(r() * atoms.length)];
    out.push(s);
  }
  // Long pieces exercise the heap merge path (pieces of 128 bytes and more).
  for (const unit of ["a", "ab", "Zz", "é", "漢", "😀", "=", "/", " ", "\n", "\t \n", "0"]) {
    out.push(unit.repeat(300));
  }
  return out;
}

const encs = Object.fromEntries(encodings.map((name) => [name, get_encoding(name)]));
const decoder = new TextDecoder("utf-8", { fatal: true });

// Fixture files: counted whole, as UTF-8 text.
const fixtureDir = path.join(here, "fixtures");
const expected = {};
for (const file of fs.readdirSync(fixtureDir).sort()) {
  const text = decoder.decode(fs.readFileSync(path.join(fixtureDir, file)));
  expected[file] = Object.fromEntries(
    encodings.map((name) => [name, encs[name].encode_ordinary(text).length]),
  );
}
fs.writeFileSync(path.join(here, "expected.json"), JSON.stringify(expected, null, 2) + "\n");

// Generated cases: every token ID, so a mismatch shows where it starts.
const cases = generate(4000, 20261121).map((text) => ({
  text,
  ...Object.fromEntries(encodings.map((name) => [name, Array.from(encs[name].encode_ordinary(text))])),
}));
fs.writeFileSync(path.join(here, "cases.json"), "[\n" + cases.map((c) => JSON.stringify(c)).join(",\n") + "\n]\n");

// Long pieces: a unit repeated to at least `bytes` bytes, or `chars`
// characters drawn from `alphabet` by rng(seed). long_test.go builds the
// same texts.
function longText(c) {
  if (c.unit !== undefined) {
    const n = Math.ceil(c.bytes / Buffer.byteLength(c.unit, "utf8"));
    return c.unit.repeat(n);
  }
  const r = rng(c.seed);
  const chars = Array.from(c.alphabet);
  let s = "";
  for (let i = 0; i < c.chars; i++) s += chars[Math.floor(r() * chars.length)];
  return s;
}
const longSpecs = [
  ...["a", "A", "=", "-=", " ", "\n", "ab", "é", "漢", "😀"].map((unit) => ({ unit, bytes: 70000 })),
  { alphabet: "abcdefghijklmnopqrstuvwxyz", seed: 1, chars: 70000 },
  { alphabet: "的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出而要于就下得可你年生自会", seed: 2, chars: 24000 },
];
const long = longSpecs.map((c) => {
  const text = longText(c);
  return { ...c, ...Object.fromEntries(encodings.map((name) => [name, encs[name].encode_ordinary(text).length])) };
});
fs.writeFileSync(path.join(here, "long.json"), "[\n" + long.map((c) => JSON.stringify(c)).join(",\n") + "\n]\n");

for (const e of Object.values(encs)) e.free();
console.log(`wrote expected.json (${Object.keys(expected).length} fixtures), cases.json (${cases.length} cases) and long.json (${long.length} pieces)`);
