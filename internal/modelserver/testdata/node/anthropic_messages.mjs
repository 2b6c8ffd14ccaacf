// Drives the official @anthropic-ai/sdk npm client against the
// modelserver's Messages API: a tool use round trip without streaming and
// one with the client's stream helper, which assembles the events itself.
// Prints what the client saw as JSON.
//
// Env: ENGRAM_TEST_NODE_ANTHROPIC, the installed package directory
// (node_modules/@anthropic-ai/sdk); MODELSERVER_URL, the server's base URL.
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { default: Anthropic } = require(process.env.ENGRAM_TEST_NODE_ANTHROPIC);

const client = new Anthropic({ baseURL: process.env.MODELSERVER_URL, apiKey: 'sk-ant-test', maxRetries: 0 });
const model = 'claude-sonnet-4-6';
const tools = [{
  name: 'read_file',
  description: 'Read a file of the project.',
  input_schema: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
}];
const prompt = () => [{ role: 'user', content: 'What is the secret word in notes.txt?' }];
const result = (use) => ({
  role: 'user',
  content: [{ type: 'tool_result', tool_use_id: use.id, content: 'the secret word is PAPAYA' }],
});
const out = {};

// Without streaming.
{
  const messages = prompt();
  const first = await client.messages.create({ model, max_tokens: 1024, system: 'You are terse.', messages, tools });
  const use = first.content.find((b) => b.type === 'tool_use');
  messages.push({ role: 'assistant', content: first.content }, result(use));
  const second = await client.messages.create({ model, max_tokens: 1024, system: 'You are terse.', messages, tools });
  out.json = {
    stop: [first.stop_reason, second.stop_reason],
    types: first.content.map((b) => b.type),
    use: { id: use.id, name: use.name, input: use.input },
    answer: second.content[0].text,
    usage: second.usage,
  };
}

// The stream helper.
{
  const messages = prompt();
  const first = await client.messages.stream({ model, max_tokens: 1024, messages, tools }).finalMessage();
  const use = first.content.find((b) => b.type === 'tool_use');
  messages.push({ role: 'assistant', content: first.content }, result(use));
  const texts = [];
  const stream = client.messages.stream({ model, max_tokens: 1024, messages, tools });
  stream.on('text', (delta) => texts.push(delta));
  const second = await stream.finalMessage();
  out.stream = {
    stop: [first.stop_reason, second.stop_reason],
    types: first.content.map((b) => b.type),
    use: { id: use.id, name: use.name, input: use.input },
    answer: second.content[0].text,
    pieces: texts.length,
    usage: second.usage,
  };
}

// A refusal reaches the client as its error class.
try {
  await client.messages.create({ model, max_tokens: 1024, messages: [result({ id: 'toolu_x' })] });
  out.refusal = 'accepted';
} catch (err) {
  out.refusal = { name: err.constructor.name, status: err.status, type: err.error?.error?.type, message: err.error?.error?.message };
}

console.log(JSON.stringify(out));
