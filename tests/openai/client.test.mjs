// The official OpenAI client (npm package `openai`, pinned in package.json) drives
// loom-gateway: chat and completions, streamed and not; logprobs read through the
// client's types; n and stop; errors arriving as the client's error classes.
// Run by CTest (tests/openai/CMakeLists.txt) with node's built-in test runner:
//   LOOM_BIN=build/bin LOOM_SHARED=../shared node --test tests/openai/
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
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
  return new Promise((resolve, reject) => {
    const proc = spawn(path.join(BIN, 'loom-gateway'), ['--model', MODEL_FILE, '--port', '0', ...args], {
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
