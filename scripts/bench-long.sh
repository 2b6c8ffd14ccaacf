#!/usr/bin/env bash
# Records without whitespace: time and peak memory of `engram add` of one
# JSON Lines record holding 1, 5 and 20 MiB of one letter, 5 MiB of random
# base64 and, as the baseline, 5 MiB of prose (this repository's Markdown
# repeated), each into a new store; then six records of 4,000,000 bytes
# of one letter posted at once to `engram serve`, and its peak memory.
# Each binary given runs every case in turn, so builds can be compared in
# one run:
#
#   git checkout OLD && go build -o /tmp/engram-old ./cmd/engram && git checkout -
#   go build -o /tmp/engram-new ./cmd/engram
#   scripts/bench-long.sh /tmp/engram-old /tmp/engram-new
#
# Needs node (to write the inputs), curl and GNU time (/usr/bin/time).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 ENGRAM_BINARY..." >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

node - "$tmp" <<'EOF'
const fs = require("fs");
const path = require("path");
const dir = process.argv[2];
const MiB = 1 << 20;
const rec = (name, content) =>
  fs.writeFileSync(path.join(dir, name), JSON.stringify({ session: "s", role: "user", content }) + "\n");
// mulberry32, as in internal/tokens/testdata/gen.mjs: the same bytes every run.
function rng(seed) {
  return () => {
    seed |= 0; seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const r = rng(1);
const raw = Buffer.alloc(Math.ceil((5 * MiB * 3) / 4));
for (let i = 0; i < raw.length; i++) raw[i] = Math.floor(r() * 256);
let prose = fs.readdirSync(".").filter((f) => f.endsWith(".md")).sort().map((f) => fs.readFileSync(f, "utf8")).join("\n");
while (Buffer.byteLength(prose) < 5 * MiB) prose += prose;
rec("prose-5MiB.jsonl", Buffer.from(prose).subarray(0, 5 * MiB).toString("utf8").replace(/\uFFFD+$/, ""));
rec("letter-1MiB.jsonl", "a".repeat(MiB));
rec("letter-5MiB.jsonl", "a".repeat(5 * MiB));
rec("letter-20MiB.jsonl", "a".repeat(20 * MiB));
rec("base64-5MiB.jsonl", raw.toString("base64").slice(0, 5 * MiB));
for (let i = 0; i < 6; i++) {
  fs.writeFileSync(path.join(dir, `post${i}.json`), JSON.stringify({ type: "tool_result", content: "abcdef"[i].repeat(4000000) }));
}
EOF

echo "--- engram add, one record into a new store (embedding included)"
for input in prose-5MiB letter-1MiB letter-5MiB letter-20MiB base64-5MiB; do
	for bin in "$@"; do
		d=$(mktemp -d -p "$tmp")
		/usr/bin/time -o "$d/time" -f "$input $(basename "$bin"): %e s, %U s user, peak RSS %M KB" \
			env ENGRAM_DATA_DIR="$d" "$bin" --store "$d/engram.db" add -q "$tmp/$input.jsonl" >/dev/null 2>"$d/log"
		echo "$(cat "$d/time"), $(grep -o '[0-9,]* chunks' "$d/log" | tail -1)"
		rm -rf "$d"
	done
done

echo "--- engram serve, six records of 4,000,000 bytes posted at once"
port=7491
for bin in "$@"; do
	d=$(mktemp -d -p "$tmp")
	mkdir "$d/project"
	(cd "$d/project" && exec env ENGRAM_DATA_DIR="$d" "$bin" --store "$d/engram.db" serve --no-index --yes --addr "127.0.0.1:$port" >"$d/serve.log" 2>&1) &
	pid=$!
	until curl -s "http://127.0.0.1:$port/healthz" >/dev/null; do sleep 0.2; done
	start=$(date +%s.%N)
	posts=()
	for i in 0 1 2 3 4 5; do
		curl -s -o /dev/null -w "%{http_code} " -X POST -H 'Content-Type: application/json' -H 'X-Engram-Agent: a' \
			--data-binary "@$tmp/post$i.json" "http://127.0.0.1:$port/v1/sessions/s$i/records" &
		posts+=($!)
	done
	wait "${posts[@]}"
	end=$(date +%s.%N)
	sleep 20 # embedding goes on in the background
	echo "$(basename "$bin"): answered in $(echo "$end - $start" | bc) s, server peak RSS $(awk '/VmHWM/ {print $2, $3}' /proc/$pid/status)"
	kill "$pid"
	wait "$pid" || true
	port=$((port + 1))
done
