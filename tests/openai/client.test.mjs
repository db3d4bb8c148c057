// The official OpenAI client (npm package `openai`, pinned in package.json) drives
// loom-gateway: chat and completions, streamed and not; logprobs read through the
// client's types; n and stop; errors arriving as the client's error classes; the
// Responses API (responses.create, streamed and not, with logprobs); echo scoring;
// vLLM's prompt_logprobs and return_token_ids; content parts on a templated model;
// chat.completions.parse with a JSON schema and a strict tool (message.parsed, parsed_arguments);
// the Responses API's structured output and function tools (responses.parse with a zod
// schema, the AI SDK's generateObject, function_call items streamed and not); LangChain's
// ChatOpenAI (@langchain/openai: withStructuredOutput, bindTools) on a reasoning template,
// with structured output after </think> and forced calls cut by max_tokens.
// Run by CTest (tests/openai/CMakeLists.txt) with node's built-in test runner:
//   LOOM_BIN=build/bin LOOM_SHARED=../shared node --test tests/openai/
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { readFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const BIN = process.env.LOOM_BIN ?? path.join(HERE, '..', '..', 'build', 'bin');
const SHARED = process.env.LOOM_SHARED ?? path.join(HERE, '..', '..', '..', 'shared');
const MODEL_FILE = path.join(SHARED, 'models', 'stories260K.gguf');
const FAKE_ENGINE = path.join(HERE, '..', 'e2e', 'fake_engine.py');
const REF = JSON.parse(readFileSync(path.join(SHARED, 'reference', 'stories260K.json'), 'utf8')).cases[0];
const MODEL = 'stories260K';
const KEY = 'sk-loom-client-test';
const REF_TOL = 2e-2; // as in tests/e2e/test_walking_skeleton.py
const PROMPT = REF.prompt; // "Once upon a time"
const messages = (content = PROMPT) => [{ role: 'user', content }];

// Starts loom-gateway on a free port; resolves to {proc, port} once it listens.
function startGateway(args) {
  return startGatewayOn(MODEL_FILE, args);
}

// The same on another model file.
function startGatewayOn(modelFile, args) {
  return new Promise((resolve, reject) => {
    const proc = spawn(path.join(BIN, 'loom-gateway'), ['--model', modelFile, '--port', '0', ...args], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let log = '';
    let port = 0;
    const timer = setTimeout(() => {
      proc.kill();
      reject(new Error('loom-gateway did not start:\n' + log));
    }, 60000);
    proc.stderr.setEncoding('utf8');
    proc.stderr.on('data', (d) => {
      log += d; // keep draining, so that the gateway never blocks on stderr
      const m = !port && log.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) {
        port = Number(m[1]);
        clearTimeout(timer);
        resolve({ proc, port, log: () => log });
      }
    });
    proc.on('exit', (code) => {
      clearTimeout(timer);
      if (!port) reject(new Error(`loom-gateway exited (${code}):\n${log}`));
    });
  });
}

// Waits until GET /health answers 200 (the engine said HELLO).
async function waitReady(port) {
  const deadline = Date.now() + 60000;
  while (Date.now() < deadline) {
    try {
      if ((await fetch(`http://127.0.0.1:${port}/health`)).status === 200) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error('the engine did not become ready');
}

// Ends the gateway (SIGTERM); fails when it reported a sanitizer error (ASan builds).
async function stopGateway(gw) {
  if (!gw) return;
  if (gw.proc.exitCode === null && gw.proc.signalCode === null) {
    const exited = new Promise((resolve) => gw.proc.on('close', resolve));
    gw.proc.kill('SIGTERM');
    await exited;
  }
  for (const mark of ['ERROR: AddressSanitizer', 'ERROR: LeakSanitizer', 'runtime error:']) {
    assert.ok(!gw.log().includes(mark), 'loom-gateway reported a sanitizer error:\n' + gw.log().slice(-6000));
  }
}

const joinedBytes = (entries) => Buffer.from(entries.flatMap((e) => e.bytes ?? []));
const clientFor = (port, apiKey = KEY) =>
  new OpenAI({ apiKey, baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0, timeout: 60000 });

// For a describe block: a gateway on the model file that make(dir) writes (and returns the
// path of) in a fresh folder, removed after the block. Returns {gw, client}, set once started.
function gatewayOnModelFrom(prefix, make) {
  const ctx = {};
  let dir;
  before(async () => {
    dir = mkdtempSync(path.join(tmpdir(), prefix));
    ctx.gw = await startGatewayOn(make(dir), []);
    await waitReady(ctx.gw.port);
    ctx.client = clientFor(ctx.gw.port, 'unused');
  });
  after(async () => {
    await stopGateway(ctx.gw);
    rmSync(dir, { recursive: true, force: true });
  });
  return ctx;
}

describe('loom-gateway through the openai client', () => {
  let gw;
  let client;
  before(async () => {
    gw = await startGateway(['--api-key', KEY]);
    await waitReady(gw.port);
    client = clientFor(gw.port);
  });
  after(() => stopGateway(gw));

  test('models.list and models.retrieve', async () => {
    const page = await client.models.list();
    assert.deepEqual(
      page.data.map((m) => [m.id, m.object, m.owned_by]),
      [[MODEL, 'model', 'loom']],
    );
    const m = await client.models.retrieve(MODEL);
    assert.equal(m.id, MODEL);
    assert.equal(typeof m.created, 'number');
  });

  test('chat.completions.parse: message.parsed and parsed_arguments under a grammar', async () => {
    // stories260K cannot follow instructions, so only the grammar makes these parse.
    const schema = {
      type: 'object',
      properties: {
        mood: { enum: ['happy', 'sad', 'sleepy'] },
        age: { type: 'integer', minimum: 1, maximum: 99 },
      },
      required: ['mood', 'age'],
      additionalProperties: false,
    };
    for (const seed of [1, 2]) {
      const r = await client.chat.completions.parse({
        model: MODEL, messages: messages('How is the cat?'), max_tokens: 300, temperature: 1, seed, logprobs: true,
        response_format: { type: 'json_schema', json_schema: { name: 'cat', strict: true, schema } },
      });
      const c = r.choices[0];
      assert.equal(c.finish_reason, 'stop', c.message.content);
      assert.deepEqual(c.message.parsed, JSON.parse(c.message.content));
      assert.deepEqual(Object.keys(c.message.parsed).sort(), ['age', 'mood']);
      assert.ok(['happy', 'sad', 'sleepy'].includes(c.message.parsed.mood), c.message.content);
      assert.ok(Number.isInteger(c.message.parsed.age) && c.message.parsed.age >= 1 && c.message.parsed.age <= 99);
      assert.deepEqual(joinedBytes(c.logprobs.content), Buffer.from(c.message.content, 'utf8'));
    }
    // parse() accepts only strict function tools; a named tool_choice enforces the arguments.
    const tool = {
      type: 'function',
      function: { name: 'pet', strict: true, parameters: schema },
    };
    const r = await client.chat.completions.parse({
      model: MODEL, messages: messages('Pet the cat.'), max_tokens: 300, temperature: 1, seed: 3,
      tools: [tool], tool_choice: { type: 'function', function: { name: 'pet' } },
    });
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'tool_calls');
    assert.equal(c.message.tool_calls.length, 1);
    const call = c.message.tool_calls[0];
    assert.equal(call.function.name, 'pet');
    assert.deepEqual(call.function.parsed_arguments, JSON.parse(call.function.arguments));
    assert.ok(['happy', 'sad', 'sleepy'].includes(call.function.parsed_arguments.mood), call.function.arguments);
  });

  test('chat completion: content, logprobs and usage', async () => {
    const r = await client.chat.completions.create({
      model: MODEL, messages: messages(), max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 3,
    });
    assert.equal(r.object, 'chat.completion');
    assert.match(r.id, /^chatcmpl-/);
    assert.equal(r.choices.length, 1);
    const c = r.choices[0];
    assert.equal(c.index, 0);
    assert.equal(c.message.role, 'assistant');
    assert.equal(c.message.content, ', there was a little girl');
    assert.equal(c.finish_reason, 'length');
    const content = c.logprobs.content;
    assert.equal(content.length, 8);
    assert.deepEqual(joinedBytes(content), Buffer.from(c.message.content, 'utf8'));
    content.forEach((e, k) => {
      assert.equal(Buffer.from(e.bytes).toString('utf8'), e.token);
      assert.ok(Math.abs(e.logprob - REF.steps[k].logprob) < REF_TOL, `position ${k}`);
      assert.equal(e.top_logprobs.length, 3);
      assert.equal(e.top_logprobs[0].token, e.token); // greedy: the top alternative
      const lps = e.top_logprobs.map((t) => t.logprob);
      assert.deepEqual(lps, [...lps].sort((a, b) => b - a));
    });
    assert.deepEqual(r.usage.prompt_tokens, 5);
    assert.deepEqual(r.usage.completion_tokens, 8);
    assert.deepEqual(r.usage.total_tokens, 13);
  });

  test('chat completion streamed: the same text and logprobs, then usage', async () => {
    const body = { model: MODEL, messages: messages(), max_tokens: 12, temperature: 0, logprobs: true, top_logprobs: 2 };
    const whole = await client.chat.completions.create(body);
    const stream = await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
    let text = '';
    let role;
    let finish;
    let usage;
    const entries = [];
    for await (const chunk of stream) {
      assert.equal(chunk.object, 'chat.completion.chunk');
      if (chunk.usage) usage = chunk.usage;
      for (const ch of chunk.choices) {
        role ??= ch.delta.role;
        const delta = ch.delta.content ?? '';
        const part = ch.logprobs?.content ?? [];
        assert.deepEqual(joinedBytes(part), Buffer.from(delta, 'utf8')); // each chunk spells its delta
        text += delta;
        entries.push(...part);
        finish = ch.finish_reason ?? finish;
      }
    }
    assert.equal(role, 'assistant');
    assert.equal(text, whole.choices[0].message.content);
    assert.deepEqual(entries, whole.choices[0].logprobs.content);
    assert.equal(finish, 'length');
    assert.deepEqual(usage, whole.usage);
  });

  test('completion: legacy logprobs', async () => {
    const r = await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 6, temperature: 0, logprobs: 2 });
    assert.equal(r.object, 'text_completion');
    const c = r.choices[0];
    assert.equal(c.text, ', there was a little g');
    assert.deepEqual(c.logprobs.tokens, [',', ' there', ' was', ' a', ' little', ' g']);
    assert.deepEqual(c.logprobs.text_offset, [0, 1, 7, 11, 13, 20]);
    c.logprobs.token_logprobs.forEach((lp, k) => assert.ok(Math.abs(lp - REF.steps[k].logprob) < REF_TOL));
    for (const [k, top] of c.logprobs.top_logprobs.entries()) {
      assert.equal(Object.keys(top).length, 2);
      assert.equal(top[c.logprobs.tokens[k]], c.logprobs.token_logprobs[k]);
    }
  });

  test('completion streamed', async () => {
    const stream = await client.completions.create({
      model: MODEL, prompt: PROMPT, max_tokens: 6, temperature: 0, logprobs: 1, stream: true,
    });
    let text = '';
    const tokens = [];
    for await (const chunk of stream) {
      for (const ch of chunk.choices) {
        text += ch.text;
        tokens.push(...(ch.logprobs?.tokens ?? []));
      }
    }
    assert.equal(text, ', there was a little g');
    assert.equal(tokens.join(''), text);
  });

  test('echo scores a prompt: the first token has no logprob', async () => {
    const r = await client.completions.create({ model: MODEL, prompt: REF.prompt_ids, echo: true, logprobs: 1, max_tokens: 0 });
    const lp = r.choices[0].logprobs;
    assert.deepEqual(lp.tokens, ['<s>', ' Once', ' upon', ' a', ' time']);
    assert.equal(lp.token_logprobs[0], null);
    assert.equal(lp.top_logprobs[0], null);
    assert.ok(lp.token_logprobs.slice(1).every((v) => typeof v === 'number' && v < 0));
    assert.equal(r.choices[0].text, lp.tokens.join(''));
    assert.equal(r.usage.completion_tokens, 0);
  });

  test('n=2 and stop', async () => {
    const r = await client.chat.completions.create({
      model: MODEL, messages: messages(), n: 2, stop: [' little', 'zzz'], temperature: 0, max_tokens: 20, logprobs: true,
    });
    assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
    for (const c of r.choices) {
      assert.equal(c.message.content, ', there was a');
      assert.equal(c.finish_reason, 'stop');
      assert.deepEqual(c.logprobs.content.map((e) => e.token), [',', ' there', ' was', ' a']);
    }
    const stream = await client.completions.create({
      model: MODEL, prompt: PROMPT, n: 2, stop: 'irl', temperature: 1, seed: 3, max_tokens: 30, stream: true,
    });
    const texts = ['', ''];
    for await (const chunk of stream) for (const ch of chunk.choices) texts[ch.index] += ch.text;
    for (const t of texts) assert.ok(!t.includes('irl'), t);
    assert.notEqual(texts[0], texts[1]); // each choice its own draws
  });

  test('characters split across byte tokens', async () => {
    // Only the byte tokens of "😀" (F0 9F 98 80) are allowed, biased in that order;
    // the repetition penalty pushes each down once used.
    const ids = [0xf0, 0x9f, 0x98, 0x80].map((b) => b + 3);
    const r = await client.chat.completions.create({
      model: MODEL, messages: messages('Hello'), temperature: 0, max_tokens: 4, logprobs: true,
      allowed_token_ids: ids, logit_bias: Object.fromEntries(ids.map((id, k) => [String(id), 90 - 10 * k])),
      repetition_penalty: 100,
    });
    const c = r.choices[0];
    assert.equal(c.message.content, '😀');
    assert.deepEqual(c.logprobs.content.map((e) => e.bytes), [[0xf0], [0x9f], [0x98], [0x80]]);
    assert.deepEqual(c.logprobs.content.map((e) => e.token), ['bytes:\\xf0', 'bytes:\\x9f', 'bytes:\\x98', 'bytes:\\x80']);
    assert.deepEqual(joinedBytes(c.logprobs.content), Buffer.from('😀', 'utf8'));
  });

  test('errors arrive as the client error classes', async () => {
    await assert.rejects(
      client.chat.completions.create({ model: MODEL, messages: messages(), logprobs: true, top_logprobs: 21 }),
      (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'top_logprobs',
    );
    await assert.rejects(
      client.completions.create({ model: MODEL, prompt: PROMPT, n: 0, stream: true }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'n',
    );
    await assert.rejects(
      client.completions.create({ model: MODEL, prompt: 'x'.repeat(3000).split('').join(' ') }),
      (e) => e instanceof OpenAI.BadRequestError && e.code === 'context_length_exceeded',
    );
    await assert.rejects(
      client.chat.completions.create({ model: 'gpt-4o', messages: messages() }),
      (e) => e instanceof OpenAI.NotFoundError && e.status === 404 && e.code === 'model_not_found',
    );
    await assert.rejects(
      client.embeddings.create({ model: MODEL, input: 'x' }),
      (e) => e instanceof OpenAI.NotFoundError,
    );
    await assert.rejects(
      clientFor(gw.port, 'sk-wrong').chat.completions.create({ model: MODEL, messages: messages() }),
      (e) => e instanceof OpenAI.AuthenticationError && e.status === 401 && e.code === 'invalid_api_key',
    );
    await assert.rejects(clientFor(gw.port, 'sk-wrong').models.list(), OpenAI.AuthenticationError);
  });
});

describe('an engine that dies mid-stream', () => {
  let gw;
  let dir;
  before(async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'loom-openai-'));
    gw = await startGateway([
      '--engine', FAKE_ENGINE, '--engine-arg=--die-after-gens', '--engine-arg=1',
      '--engine-arg=--tokens-before-death', '--engine-arg=2', '--engine-arg=--state', `--engine-arg=${path.join(dir, 'n')}`,
    ]);
    await waitReady(gw.port);
  });
  after(async () => {
    await stopGateway(gw);
    rmSync(dir, { recursive: true, force: true });
  });

  test('the stream ends with an APIError; the restarted engine serves the next request', async () => {
    const client = clientFor(gw.port, 'unused');
    const stream = await client.chat.completions.create({ model: MODEL, messages: messages(), max_tokens: 5, stream: true });
    let text = '';
    await assert.rejects(
      (async () => {
        for await (const chunk of stream) for (const ch of chunk.choices) text += ch.delta.content ?? '';
      })(),
      (e) => e instanceof OpenAI.APIError && /engine/.test(e.message),
    );
    assert.ok(text.length > 0, 'the tokens before the death arrived');
    await waitReady(gw.port);
    const r = await client.chat.completions.create({ model: MODEL, messages: messages(), max_tokens: 3 });
    assert.equal(r.usage.completion_tokens, 3);
    assert.equal(r.choices[0].finish_reason, 'length');
  });
});

describe('the Responses API, echo scoring and vLLM extensions through the openai client', () => {
  let gw;
  let client;
  before(async () => {
    gw = await startGateway([]);
    await waitReady(gw.port);
    client = clientFor(gw.port, 'unused');
  });
  after(() => stopGateway(gw));

  test('responses.create: text, status and usage', async () => {
    const r = await client.responses.create({ model: MODEL, input: PROMPT, max_output_tokens: 8, temperature: 0 });
    assert.equal(r.object, 'response');
    assert.match(r.id, /^resp_/);
    assert.equal(r.output_text, ', there was a little girl'); // the SDK's own join of output[].content[].text
    assert.equal(r.status, 'incomplete');
    assert.deepEqual(r.incomplete_details, { reason: 'max_output_tokens' });
    assert.equal(r.output.length, 1);
    assert.equal(r.output[0].type, 'message');
    assert.equal(r.output[0].role, 'assistant');
    assert.equal(r.usage.input_tokens, 5);
    assert.equal(r.usage.output_tokens, 8);
    assert.equal(r.usage.total_tokens, 13);
    // instructions become a system message; messages as input items work too.
    const m = await client.responses.create({
      input: [{ role: 'user', content: [{ type: 'input_text', text: PROMPT }] }], max_output_tokens: 4, temperature: 0,
    });
    assert.equal(m.output_text, ', there was a');
    assert.equal(m.model, MODEL); // `model` left out: the one served
  });

  test('responses.create streamed: the event sequence, deltas that join to the text', async () => {
    const stream = await client.responses.create({
      model: MODEL, input: PROMPT, max_output_tokens: 8, temperature: 0, stream: true,
      include: ['message.output_text.logprobs'], top_logprobs: 2,
    });
    const types = [];
    let text = '';
    let seq = -1;
    let final;
    const entries = [];
    for await (const ev of stream) {
      assert.equal(ev.sequence_number, seq + 1);
      seq = ev.sequence_number;
      if (types.at(-1) !== ev.type) types.push(ev.type);
      if (ev.type === 'response.output_text.delta') {
        assert.deepEqual(joinedBytes(ev.logprobs), Buffer.from(ev.delta, 'utf8')); // each delta spelled by its entries
        text += ev.delta;
        entries.push(...ev.logprobs);
      }
      if (ev.type === 'response.output_text.done') assert.equal(ev.text, text);
      if (ev.type === 'response.incomplete' || ev.type === 'response.completed') final = ev.response;
    }
    assert.deepEqual(types, [
      'response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added',
      'response.output_text.delta', 'response.output_text.done', 'response.content_part.done',
      'response.output_item.done', 'response.incomplete',
    ]);
    assert.equal(text, ', there was a little girl');
    assert.equal(final.output[0].content[0].text, text);
    assert.deepEqual(final.output[0].content[0].logprobs, entries);
    // Only the end-of-sequence token allowed (vLLM's allowed_token_ids): the model stops at
    // once, so the response is completed rather than incomplete.
    const stop = await client.responses.create({ input: PROMPT, allowed_token_ids: [2], stream: true });
    const last = [];
    for await (const ev of stop) last.push(ev);
    assert.equal(last.at(-1).type, 'response.completed');
    assert.equal(last.at(-1).response.status, 'completed');
    assert.equal(last.at(-1).response.output[0].status, 'completed');
    assert.equal(last.at(-1).response.output_text ?? last.at(-1).response.output[0].content[0].text, '');
  });

  test('responses.create with logprobs: OpenAI shape, bytes that spell the text, reference values', async () => {
    const r = await client.responses.create({
      model: MODEL, input: PROMPT, max_output_tokens: 8, temperature: 0,
      include: ['message.output_text.logprobs'], top_logprobs: 3,
    });
    const part = r.output[0].content[0];
    assert.equal(part.logprobs.length, 8);
    assert.deepEqual(joinedBytes(part.logprobs), Buffer.from(part.text, 'utf8'));
    part.logprobs.forEach((e, k) => {
      assert.ok(Math.abs(e.logprob - REF.steps[k].logprob) < REF_TOL, `position ${k}`);
      assert.equal(e.top_logprobs.length, 3);
      assert.equal(e.top_logprobs[0].token, e.token);
      assert.deepEqual(Buffer.from(e.bytes).toString('utf8'), e.token);
    });
  });

  test('responses.create refuses what a stateless server cannot do', async () => {
    await assert.rejects(
      client.responses.create({ model: MODEL, input: PROMPT, previous_response_id: 'resp_123' }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'previous_response_id',
    );
    await assert.rejects(
      client.responses.create({ model: MODEL, input: PROMPT, store: true }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'store',
    );
    await assert.rejects(
      client.responses.create({ model: 'gpt-4o', input: PROMPT }),
      (e) => e instanceof OpenAI.NotFoundError && e.code === 'model_not_found',
    );
  });

  test('echo scoring: the text is the prompt as sent; text_offset finds the continuation', async () => {
    const gen = await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 8, temperature: 0, logprobs: 1 });
    const cont = gen.choices[0].text;
    const scored = await client.completions.create({
      model: MODEL, prompt: PROMPT + cont, echo: true, max_tokens: 0, logprobs: 1,
    });
    const c = scored.choices[0];
    assert.equal(c.text, PROMPT + cont); // starts with the prompt exactly as sent
    const lp = c.logprobs;
    assert.equal(lp.tokens[0], ''); // BOS is a token (logprob null) that adds no text
    assert.equal(lp.token_logprobs[0], null);
    assert.equal(lp.text_offset[0], 0);
    assert.equal(lp.tokens[1], 'Once'); // the first word without its dummy-prefix space
    assert.equal(lp.text_offset[1], 0);
    assert.equal(lp.tokens.join(''), c.text); // the tokens, joined, spell the text
    const first = lp.text_offset.findIndex((o) => o >= PROMPT.length);
    assert.deepEqual(lp.tokens.slice(first), gen.choices[0].logprobs.tokens);
    lp.tokens.forEach((t, i) => {
      const end = i + 1 < lp.tokens.length ? lp.text_offset[i + 1] : c.text.length;
      assert.equal(c.text.slice(lp.text_offset[i], end), t);
    });
    lp.token_logprobs.slice(first).forEach((v, k) =>
      assert.ok(Math.abs(v - gen.choices[0].logprobs.token_logprobs[k]) < 1e-3, `token ${k}: ${v}`));
  });

  test('prompt_logprobs and return_token_ids (vLLM)', async () => {
    const r = await client.completions.create({
      model: MODEL, prompt: PROMPT, max_tokens: 4, temperature: 0, prompt_logprobs: 2, return_token_ids: true,
    });
    const c = r.choices[0];
    assert.deepEqual(c.prompt_token_ids, REF.prompt_ids);
    assert.equal(c.token_ids.length, 4);
    assert.equal(c.prompt_logprobs.length, 5);
    assert.equal(c.prompt_logprobs[0], null);
    const echo = await client.completions.create({ model: MODEL, prompt: REF.prompt_ids, echo: true, max_tokens: 0, logprobs: 2 });
    for (let i = 1; i < 5; ++i) {
      const d = c.prompt_logprobs[i];
      const mine = d[String(REF.prompt_ids[i])];
      assert.ok(mine, `position ${i} has the prompt token`);
      assert.equal(mine.logprob, echo.choices[0].logprobs.token_logprobs[i]);
      assert.equal(mine.decoded_token, echo.choices[0].logprobs.tokens[i]);
      const ranks = Object.values(d).map((x) => x.rank).filter((x) => x !== null).sort();
      assert.ok(ranks.includes(1) && ranks.includes(2), JSON.stringify(d));
    }
    const detok = await fetch(`http://127.0.0.1:${gw.port}/detokenize`, {
      method: 'POST', body: JSON.stringify({ tokens: c.token_ids }),
    }).then((x) => x.json());
    assert.equal(detok.prompt, c.text);
    const chat = await client.chat.completions.create({
      model: MODEL, messages: messages(), max_tokens: 3, temperature: 0, prompt_logprobs: 1, return_token_ids: true,
    });
    assert.equal(chat.prompt_logprobs.length, chat.usage.prompt_tokens);
    assert.equal(chat.prompt_token_ids.length, chat.usage.prompt_tokens);
    assert.equal(chat.choices[0].token_ids.length, 3);
  });
});

describe('content parts on a model with a chat template', () => {
  const served = gatewayOnModelFrom('loom-openai-tmpl-', (dir) => {
    const model = path.join(dir, 'qwen-templated.gguf');
    execFileSync(path.join(BIN, 'loom-make-model'), [
      '--out', model, '--chat-template', path.join(SHARED, 'models', 'templates', 'Qwen-Qwen2.5-7B-Instruct.jinja'),
    ]);
    return model;
  });

  test('text parts render as the same text given as a string; /tokenize counts what chat renders', async () => {
    const { gw, client } = served;
    const parts = [{ role: 'user', content: [{ type: 'text', text: 'Hello' }, { type: 'text', text: 'there' }] }];
    const a = await client.chat.completions.create({ model: 'qwen-templated', messages: parts, max_tokens: 2, temperature: 0 });
    const b = await client.chat.completions.create({
      model: 'qwen-templated', messages: [{ role: 'user', content: 'Hello\nthere' }], max_tokens: 2, temperature: 0,
    });
    assert.equal(a.usage.prompt_tokens, b.usage.prompt_tokens);
    assert.equal(a.choices[0].message.content, b.choices[0].message.content);
    const tools = [{ type: 'function', function: { name: 'get_time', description: 'the time', parameters: { type: 'object' } } }];
    const withTools = await client.chat.completions.create({ model: 'qwen-templated', messages: parts, tools, max_tokens: 1 });
    const count = await fetch(`http://127.0.0.1:${gw.port}/tokenize`, {
      method: 'POST', body: JSON.stringify({ messages: parts, tools }),
    }).then((x) => x.json());
    assert.equal(count.count, withTools.usage.prompt_tokens);
    assert.ok(withTools.usage.prompt_tokens > a.usage.prompt_tokens); // the template rendered the tools
  });
});

// The Responses API's structured output and function tools, through the openai client's
// responses.parse (a zod schema) and the AI SDK's default provider (openai(model) speaks
// the Responses API): a copy of stories260K with Qwen2.5's template (hermes tool calls),
// served by the CPU engine, whose grammar shapes the output.
describe('structured output and tools on the Responses API (openai responses.parse, AI SDK generateObject)', () => {
  const model = 'qwen-responses';
  const served = gatewayOnModelFrom('loom-openai-resp-', (dir) => {
    const file = path.join(dir, `${model}.gguf`);
    execFileSync(path.join(BIN, 'loom-make-model'), [
      '--out', file, '--chat-template', path.join(SHARED, 'models', 'templates', 'Qwen-Qwen2.5-7B-Instruct.jinja'),
    ]);
    return file;
  });

  test('responses.parse with a zod schema: output_parsed follows it, text.format is echoed', async () => {
    const { client } = served;
    const { z } = await import('zod');
    const { zodTextFormat } = await import('openai/helpers/zod');
    const Mood = z.object({ mood: z.enum(['happy', 'sad']), count: z.number().int().min(0).max(9) });
    const r = await client.responses.parse({
      model, input: 'How do you feel?', max_output_tokens: 200, temperature: 0.7, seed: 1,
      text: { format: zodTextFormat(Mood, 'mood') },
    });
    assert.equal(r.status, 'completed');
    assert.ok(['happy', 'sad'].includes(r.output_parsed.mood), JSON.stringify(r.output_parsed));
    assert.ok(Number.isInteger(r.output_parsed.count) && r.output_parsed.count >= 0 && r.output_parsed.count <= 9);
    assert.deepEqual(JSON.parse(r.output_text), r.output_parsed);
    assert.equal(r.text.format.type, 'json_schema');
    assert.equal(r.text.format.name, 'mood');
    // json_object: some JSON object (this seed's object ends within the budget).
    const o = await client.responses.create({
      model, input: 'JSON please', max_output_tokens: 200, seed: 3, text: { format: { type: 'json_object' } },
    });
    assert.equal(o.status, 'completed');
    assert.equal(o.text.format.type, 'json_object');
    assert.equal(typeof JSON.parse(o.output_text), 'object');
  });

  test('generateObject through the AI SDK default provider (the Responses API)', async () => {
    const baseURL = `http://127.0.0.1:${served.gw.port}/v1`;
    const { z } = await import('zod');
    const { generateObject } = await import('ai');
    const { createOpenAI } = await import('@ai-sdk/openai');
    const openai = createOpenAI({ baseURL, apiKey: 'unused' });
    const { object, finishReason, usage } = await generateObject({
      model: openai(model),
      schema: z.object({ answer: z.enum(['yes', 'no']), confidence: z.number().int().min(1).max(5) }),
      prompt: 'Is the sky blue?',
      maxOutputTokens: 200,
      temperature: 0,
      maxRetries: 0,
    });
    assert.ok(['yes', 'no'].includes(object.answer), JSON.stringify(object));
    assert.ok(object.confidence >= 1 && object.confidence <= 5);
    assert.equal(finishReason, 'stop');
    assert.ok(usage.outputTokens > 0);
  });

  test('function tools: a forced call as a function_call item, streamed and not, and its result sent back', async () => {
    const { client } = served;
    const tools = [{
      type: 'function', name: 'get_time', description: 'the time in a zone', strict: true,
      parameters: { type: 'object', properties: { tz: { type: 'string', enum: ['UTC', 'CET'] } }, required: ['tz'],
        additionalProperties: false },
    }];
    const r = await client.responses.create({
      model, input: 'What time is it?', tools, tool_choice: 'required', parallel_tool_calls: false,
      max_output_tokens: 200, seed: 4,
    });
    assert.equal(r.status, 'completed');
    const calls = r.output.filter((o) => o.type === 'function_call');
    assert.equal(calls.length, 1);
    assert.equal(calls[0].name, 'get_time');
    assert.ok(['UTC', 'CET'].includes(JSON.parse(calls[0].arguments).tz));
    assert.match(calls[0].call_id, /^call_[A-Za-z0-9]{24}$/);
    // Streamed: the client's own accumulation of the events gives the same call.
    const stream = client.responses.stream({
      model, input: 'What time is it?', tools, tool_choice: { type: 'function', name: 'get_time' },
      max_output_tokens: 200, seed: 4,
    });
    const deltas = [];
    stream.on('response.function_call_arguments.delta', (e) => deltas.push(e.delta));
    const final = await stream.finalResponse();
    const call = final.output.find((o) => o.type === 'function_call');
    assert.equal(call.name, 'get_time');
    assert.equal(deltas.join(''), call.arguments);
    assert.ok(['UTC', 'CET'].includes(JSON.parse(call.arguments).tz));
    // The round trip: the call and its output as input items; the model answers in text.
    // ("strict" tools need a forced tool_choice: loom cannot enforce calls under "auto".)
    const next = await client.responses.create({
      model, tools, tool_choice: 'none', max_output_tokens: 4, temperature: 0,
      input: [{ role: 'user', content: 'What time is it?' }, call,
        { type: 'function_call_output', call_id: call.call_id, output: '12:00' }],
    });
    assert.equal(next.status, 'incomplete');
    assert.ok(next.usage.input_tokens > r.usage.input_tokens);
  });
});

// LangChain's ChatOpenAI (npm @langchain/openai) and the openai client on a reasoning
// template (issue 40, items 1 and 2): a copy of stories260K with DeepSeek R1's template
// whose "." token is renamed </think> (user-defined, as in DeepSeek's vocabulary), so the
// story model closes its reasoning where it ends its first sentence.
describe('a reasoning template: withStructuredOutput after </think>, and a cut forced call', () => {
  const R1 = 'r1-think';
  const served = gatewayOnModelFrom('loom-openai-r1-', (dir) => {
    const model = path.join(dir, `${R1}.gguf`);
    execFileSync('python3', ['-c', [
      'import sys',
      'sys.path.insert(0, sys.argv[1])',
      'import gguf_edit as g',
      'g.edit(sys.argv[2], sys.argv[3], chat_template=open(sys.argv[4], encoding="utf-8").read(),',
      '       replace_tokens={".": ("</think>", g.USER_DEFINED)},',
      '       set_kv={"tokenizer.ggml.add_space_prefix": (g.BOOL, False), "llama.context_length": (g.U32, 8192)})',
    ].join('\n'), path.join(HERE, '..', 'e2e'), MODEL_FILE, model,
    path.join(SHARED, 'models', 'templates', 'deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja')]);
    return model;
  });

  test('LangChain withStructuredOutput parses what follows the reasoning (json schema, function calling)', async () => {
    const { gw, client } = served;
    const { ChatOpenAI } = await import('@langchain/openai');
    const { z } = await import('zod');
    const Pet = z.object({ kind: z.enum(['cat', 'dog']), legs: z.number().int().min(0).max(8) });
    const llm = new ChatOpenAI({
      model: R1, apiKey: 'unused', configuration: { baseURL: `http://127.0.0.1:${gw.port}/v1` }, maxRetries: 0,
      temperature: 1, maxTokens: 300, modelKwargs: { seed: 1, chat_template_kwargs: { enable_thinking: true } },
    });
    for (const method of ['jsonSchema', 'functionCalling']) {
      const { raw, parsed } = await llm.withStructuredOutput(Pet, { method, includeRaw: true, name: 'pet' })
        .invoke('Tell me about a cat');
      assert.ok(['cat', 'dog'].includes(parsed.kind), JSON.stringify(raw));
      assert.ok(Number.isInteger(parsed.legs) && parsed.legs >= 0 && parsed.legs <= 8, JSON.stringify(raw));
    }
    // The same request through the openai client: the reasoning is its own part, the JSON the content.
    const r = await client.chat.completions.create({
      model: R1, messages: messages('Tell me about a cat'), max_tokens: 300, temperature: 1, seed: 1, logprobs: true,
      chat_template_kwargs: { enable_thinking: true },
      response_format: { type: 'json_object' },
    });
    const m = r.choices[0].message;
    assert.equal(r.choices[0].finish_reason, 'stop');
    assert.ok(m.reasoning_content.length > 3 && !m.reasoning_content.includes('</think>'), m.reasoning_content);
    assert.equal(typeof JSON.parse(m.content), 'object');
    assert.deepEqual(joinedBytes(r.choices[0].logprobs.content), Buffer.from(m.content, 'utf8'));
    assert.deepEqual(joinedBytes(r.choices[0].logprobs.reasoning_content), Buffer.from(m.reasoning_content, 'utf8'));
  });

  test('a forced call cut by max_tokens never comes back as content, streamed or not', async () => {
    const { gw, client } = served;
    const tools = [{ type: 'function', function: { name: 'get_time', parameters: {
      type: 'object', properties: { tz: { enum: ['UTC', 'CET'] } }, required: ['tz'] } } }];
    let named = 0; // the first max_tokens that cut after the name
    for (let n = 1; n <= 120; n += 7) {
      const body = {
        model: R1, messages: messages('What time is it?'), tools, tool_choice: 'required', max_tokens: n, temperature: 0,
      };
      const r = await client.chat.completions.create(body);
      const c = r.choices[0];
      assert.equal(c.finish_reason, 'length', JSON.stringify(c));
      assert.equal(c.message.content ?? '', '', `max_tokens ${n}: ${c.message.content}`); // null with a call
      for (const t of c.message.tool_calls ?? []) assert.equal(t.function.name, 'get_time');
      if (!named && c.message.tool_calls?.length) named = n;
      let streamed = '';
      for await (const chunk of await client.chat.completions.create({ ...body, stream: true })) {
        streamed += chunk.choices[0]?.delta?.content ?? '';
      }
      assert.equal(streamed, '', `max_tokens ${n}, streamed`);
    }
    assert.ok(named > 0); // some cuts fell after the name: a call, with what arguments there were
    // LangChain's bindTools with tool_choice "any" (required), cut there and before: no text.
    const { ChatOpenAI } = await import('@langchain/openai');
    for (const [maxTokens, calls] of [[named, 1], [named - 7, 0]]) {
      const llm = new ChatOpenAI({
        model: R1, apiKey: 'unused', configuration: { baseURL: `http://127.0.0.1:${gw.port}/v1` }, maxRetries: 0,
        maxTokens, temperature: 0,
      });
      const msg = await llm.bindTools(tools, { tool_choice: 'any' }).invoke('What time is it?');
      assert.equal(msg.content, '');
      assert.equal(msg.tool_calls.length + msg.invalid_tool_calls.length, calls, JSON.stringify(msg));
      if (calls) assert.equal((msg.tool_calls[0] ?? msg.invalid_tool_calls[0]).name, 'get_time');
    }
  });
});
