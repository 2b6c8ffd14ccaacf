// Drives the official openai npm client against the Chat Completions API
// with a recording: a user's message of text and input_audio (a WAV), then
// two more questions about it, streamed, each request carrying the whole
// conversation as the client keeps it. Prints the answers as JSON.
//
// Env: ENGRAM_TEST_NODE_OPENAI, the installed package directory
// (node_modules/openai); MODELSERVER_URL, the server's base URL;
// AUDIO_FILE, a WAV to send.
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';

const require = createRequire(import.meta.url);
const { default: OpenAI } = require(process.env.ENGRAM_TEST_NODE_OPENAI);

const client = new OpenAI({ baseURL: `${process.env.MODELSERVER_URL}/v1`, apiKey: 'sk-test', maxRetries: 0 });
const data = readFileSync(process.env.AUDIO_FILE).toString('base64');
const messages = [{
  role: 'user',
  content: [
    { type: 'text', text: 'What is in this recording?' },
    { type: 'input_audio', input_audio: { data, format: 'wav' } },
  ],
}];
const answers = [];
for (const ask of ['How many times?', 'Is it a large dog?', null]) {
  const stream = client.chat.completions.stream({ model: 'gpt-4o-audio-preview', modalities: ['text'], messages });
  const done = await stream.finalChatCompletion();
  const msg = done.choices[0].message;
  answers.push(msg.content);
  messages.push({ role: 'assistant', content: msg.content });
  if (ask) messages.push({ role: 'user', content: ask });
}
console.log(JSON.stringify({ answers }));
