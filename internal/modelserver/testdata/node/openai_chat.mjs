// Drives the official openai npm client against the modelserver's Chat
// Completions API: a tool call round trip without streaming, one with the
// raw stream of chunks, and one with the client's stream helper, which
// assembles the chunks itself. Prints what the client saw as JSON.
//
// Env: ENGRAM_TEST_NODE_OPENAI, the installed package directory
// (node_modules/openai); MODELSERVER_URL, the server's base URL.
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { default: OpenAI } = require(process.env.ENGRAM_TEST_NODE_OPENAI);

const client = new OpenAI({ baseURL: `${process.env.MODELSERVER_URL}/v1`, apiKey: 'sk-test', maxRetries: 0 });
const model = 'gpt-4o';
const tools = [{
  type: 'function',
  function: {
    name: 'read_file',
    description: 'Read a file of the project.',
    parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
  },
}];
const prompt = () => [
  { role: 'system', content: 'You are a terse coding agent.' },
  { role: 'user', content: 'What is the secret word in notes.txt?' },
];
const toolMessage = (call) => ({ role: 'tool', tool_call_id: call.id, content: 'the secret word is PAPAYA' });
const out = {};

// Without streaming: the tool call, its result, the answer.
{
  const messages = prompt();
  const first = await client.chat.completions.create({ model, messages, tools });
  const msg = first.choices[0].message;
  messages.push(msg, toolMessage(msg.tool_calls[0]));
  const second = await client.chat.completions.create({ model, messages, tools });
  out.json = {
    object: first.object,
    finish: [first.choices[0].finish_reason, second.choices[0].finish_reason],
    call: msg.tool_calls[0],
    callContent: msg.content,
    answer: second.choices[0].message.content,
    usage: second.usage,
  };
}

// The raw stream: the chunks assembled here as a client does.
{
  const messages = prompt();
  const turn = async () => {
    const stream = await client.chat.completions.create({
      model, messages, tools, stream: true, stream_options: { include_usage: true },
    });
    let role = '', content = '', finish = null, usage = null, chunks = 0;
    const calls = [];
    for await (const chunk of stream) {
      chunks++;
      if (chunk.usage) usage = chunk.usage;
      const choice = chunk.choices[0];
      if (!choice) continue;
      if (choice.delta.role) role = choice.delta.role;
      if (choice.delta.content) content += choice.delta.content;
      for (const tc of choice.delta.tool_calls ?? []) {
        calls[tc.index] ??= { id: '', type: '', function: { name: '', arguments: '' } };
        const c = calls[tc.index];
        if (tc.id) c.id = tc.id;
        if (tc.type) c.type = tc.type;
        if (tc.function?.name) c.function.name += tc.function.name;
        if (tc.function?.arguments) c.function.arguments += tc.function.arguments;
      }
      if (choice.finish_reason) finish = choice.finish_reason;
    }
    return { role, content, calls, finish, usage, chunks };
  };
  const first = await turn();
  messages.push({ role: 'assistant', content: first.content || null, tool_calls: first.calls }, toolMessage(first.calls[0]));
  const second = await turn();
  out.stream = { first, second };
}

// The stream helper: the client assembles the chunks into a completion.
{
  const messages = prompt();
  const runner = client.chat.completions.stream({ model, messages, tools, stream_options: { include_usage: true } });
  const first = await runner.finalChatCompletion();
  const msg = first.choices[0].message;
  messages.push(msg, toolMessage(msg.tool_calls[0]));
  const texts = [];
  const second = client.chat.completions.stream({ model, messages, tools });
  second.on('content', (delta) => texts.push(delta));
  const final = await second.finalChatCompletion();
  out.helper = {
    finish: [first.choices[0].finish_reason, final.choices[0].finish_reason],
    call: msg.tool_calls[0],
    usage: first.usage,
    answer: final.choices[0].message.content,
    pieces: texts.length,
  };
}

// A refusal reaches the client as its error class, with the API's fields.
try {
  await client.chat.completions.create({ model, messages: [{ role: 'tool', tool_call_id: 'call_x', content: 'orphan' }] });
  out.refusal = 'accepted';
} catch (err) {
  out.refusal = { name: err.constructor.name, status: err.status, type: err.type, param: err.param, code: err.code, message: err.error?.message };
}

console.log(JSON.stringify(out));
