#!/usr/bin/env bash
# Token counting throughput: engram's counter, tiktoken-go/tokenizer used
# directly, and the reference npm tiktoken, on the same text in one run.
# The corpus is real text: the Go source of net/ from this machine's Go
# tree, plus the chat turns of LongMemEval when ../shared/bench has them.
#
#   scripts/bench-tokens.sh            (needs go and node; installs npm tiktoken)
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
corpus="$tmp/corpus.txt"

find "$(go env GOROOT)/src/net" -name '*.go' -type f | sort | xargs cat > "$corpus"
lme=../shared/bench/longmemeval/longmemeval_oracle.json
if [ -f "$lme" ]; then
	node -e '
		const d = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
		const out = [];
		for (const q of d) for (const s of q.haystack_sessions) for (const t of s) out.push(t.content);
		process.stdout.write(out.join("\n\n"));
	' "$lme" >> "$corpus"
fi
echo "corpus: $(wc -c < "$corpus") bytes ($(find "$(go env GOROOT)/src/net" -name '*.go' | wc -l) Go files of net/$( [ -f "$lme" ] && echo ', LongMemEval chat turns'))"

echo "--- engram (internal/tokens) and tiktoken-go/tokenizer, go test -bench"
ENGRAM_TOKENS_BENCH="$corpus" go test ./internal/tokens -run '^$' -bench 'Count' -benchtime 5x -count 1 | grep Benchmark

echo "--- engram tokens (counts, to compare with the reference)"
go run ./cmd/engram tokens --encoding cl100k_base "$corpus" | cut -f1 | sed 's/^/cl100k_base tokens: /'
go run ./cmd/engram tokens --encoding o200k_base "$corpus" | cut -f1 | sed 's/^/o200k_base tokens: /'

echo "--- npm tiktoken (reference)"
(cd internal/tokens/testdata && npm ci --silent >/dev/null 2>&1 || npm install --silent >/dev/null)
node internal/tokens/testdata/bench.mjs "$corpus" 5
