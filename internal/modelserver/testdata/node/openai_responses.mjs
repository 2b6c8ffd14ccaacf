// Drives the official openai npm client against the modelserver's
// Responses API (what Codex speaks): a function call round trip without
// streaming, one with the raw stream of events, and one with the
// client's stream helper, which assembles the events itself; then a
// request the API refuses. Prints what the client saw as JSON.
//
// Env: ENGRAM_TEST_NODE_OPENAI, the installed package directory
// (node_modules/openai); MODELSERVER_URL, the server's base URL.
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { default: OpenAI } = require(process.env.ENGRAM_TEST_NODE_OPENAI);

const client = new OpenAI({ baseURL: `${process.env.MODELSERVER_URL}/v1`, apiKey: 'sk-test', maxRetries: 0 });
const model = 'gpt-5-codex';
const instructions = 'You are a terse coding agent.';
const tools = [{
  type: 'function',
  name: 'read_file',
  description: 'Read a file of the project.',
  parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'], additionalProperties: false },
  strict: true,
}];
const prompt = () => [{ role: 'user', content: 'What is the secret word in notes.txt?' }];
const callOf = (response) => response.output.find((it) => it.type === 'function_call');
const outputOf = (call) => ({ type: 'function_call_output', call_id: call.call_id, output: 'the secret word is PAPAYA' });
// The text of a response's messages, read from its output: a streamed
// response has no output_text, which the client adds to the others.
const textOf = (response) => response.output.filter((it) => it.type === 'message')
  .flatMap((it) => it.content).filter((c) => c.type === 'output_text').map((c) => c.text).join('');
const brief = (call) => call && { type: call.type, name: call.name, arguments: call.arguments, callID: call.call_id };
const out = {};

// Without streaming: the call, its output, the answer.
{
  const input = prompt();
  const first = await client.responses.create({ model, instructions, input, tools });
  const call = callOf(first);
  input.push(...first.output, outputOf(call));
  const second = await client.responses.create({ model, instructions, input, tools });
  out.json = {
    object: first.object,
    status: [first.status, second.status],
    call: brief(call),
    answer: second.output_text,
    usage: second.usage,
  };
}

// The raw stream: the events assembled here as a client does.
{
  const input = prompt();
  const turn = async () => {
    const stream = await client.responses.create({ model, instructions, input, tools, stream: true });
    const types = [];
    let text = '', args = '', completed = null;
    for await (const ev of stream) {
      types.push(ev.type);
      if (ev.type === 'response.output_text.delta') text += ev.delta;
      if (ev.type === 'response.function_call_arguments.delta') args += ev.delta;
      if (ev.type === 'response.completed') completed = ev.response;
    }
    return { types, text, args, completed };
  };
  const first = await turn();
  const call = callOf(first.completed);
  input.push(...first.completed.output, outputOf(call));
  const second = await turn();
  out.stream = {
    first: { call: brief(call), args: first.args, text: first.text, status: first.completed.status, events: first.types.length,
      begins: first.types[0], ends: first.types[first.types.length - 1] },
    second: { text: second.text, answer: textOf(second.completed), status: second.completed.status, usage: second.completed.usage,
      ends: second.types[second.types.length - 1] },
  };
}

// The stream helper: the client assembles the events into a response.
{
  const input = prompt();
  const first = await client.responses.stream({ model, instructions, input, tools }).finalResponse();
  const call = callOf(first);
  input.push(...first.output, outputOf(call));
  const pieces = [];
  const second = client.responses.stream({ model, instructions, input, tools });
  second.on('response.output_text.delta', (ev) => pieces.push(ev.delta));
  const final = await second.finalResponse();
  out.helper = { call: brief(call), answer: final.output_text, pieces: pieces.length, usage: final.usage };
}

// A refusal reaches the client as its error class, with the API's fields.
try {
  await client.responses.create({ model, input: [{ type: 'function_call_output', call_id: 'call_orphan', output: 'orphan' }] });
  out.refusal = 'accepted';
} catch (err) {
  out.refusal = { name: err.constructor.name, status: err.status, type: err.type, param: err.param, message: err.error?.message };
}

console.log(JSON.stringify(out));
