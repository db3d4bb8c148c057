// The loom playground: sends a streamed chat or completions request to this gateway and
// shows each token as a span shaded by its probability, with its top alternatives, their
// probabilities and the entropy at that position on hover or tap.
//
// Test mode (used by tests/e2e/test_playground.py): /?autorun=1&mode=...&prompt=...&
// temperature=...&max_tokens=...&top_logprobs=...&logprobs_mode=...&allowed=...[&hover=N]
// fills the controls, runs once, then sets document.body.dataset.state to "done" or
// "error" and window.loomResult to {entries, text, error}; hover=N opens token N's tip.
'use strict';

const $ = (id) => document.getElementById(id);
const state = { entries: [], controller: null, started: 0, text: '' };

// ---- rendering -------------------------------------------------------------------

// Background for probability p in [0, 1]: red (0) through yellow (0.5) to green (1).
function shade(p) {
  const stops = [[245, 183, 177], [251, 231, 161], [201, 236, 208]];
  const x = Math.min(1, Math.max(0, p)) * 2;
  const [a, b] = x <= 1 ? [stops[0], stops[1]] : [stops[1], stops[2]];
  const t = x <= 1 ? x : x - 1;
  const c = a.map((v, i) => Math.round(v + (b[i] - v) * t));
  return `rgb(${c[0]}, ${c[1]}, ${c[2]})`;
}

// A token's text made visible: spaces, newlines and tabs get symbols.
function visible(s) {
  return s.replace(/ /g, '\u2423').replace(/\n/g, '\u23ce').replace(/\t/g, '\u21e5') || '\u2205';
}

// Entropy in bits of a position from its top alternatives; the probability they leave
// out counts as one more outcome, so this is a lower bound of the true entropy.
function entropyBits(top) {
  let h = 0;
  let sum = 0;
  for (const t of top) {
    const p = Math.exp(t.logprob);
    sum += p;
    if (p > 0) h -= p * Math.log2(p);
  }
  const rest = Math.max(0, 1 - sum);
  if (rest > 1e-9) h -= rest * Math.log2(rest);
  return h;
}

function addEntry(e) {
  e.index = state.entries.length;
  state.entries.push(e);
  state.text += e.text;
  const span = document.createElement('span');
  span.className = 'tok' + (e.special ? ' special' : '');
  span.textContent = e.text;
  span.dataset.index = String(e.index);
  if (e.logprob !== null && e.logprob !== undefined) {
    span.dataset.logprob = String(e.logprob);
    span.style.background = e.special ? 'none' : shade(Math.exp(e.logprob));
  }
  span.addEventListener('mouseenter', () => showTip(span));
  span.addEventListener('mouseleave', hideTip);
  span.addEventListener('click', (ev) => {
    ev.stopPropagation();
    showTip(span);
  });
  $('out').appendChild(span);
}

function showTip(span) {
  const e = state.entries[Number(span.dataset.index)];
  const tip = $('tip');
  document.querySelectorAll('.tok.active').forEach((s) => s.classList.remove('active'));
  span.classList.add('active');
  tip.replaceChildren();
  const head = document.createElement('div');
  head.className = 'head';
  if (e.logprob === null || e.logprob === undefined) {
    head.textContent = 'no logprob at this position';
  } else {
    const p = Math.exp(e.logprob);
    head.textContent = `p = ${p.toFixed(4)} (logprob ${e.logprob.toFixed(4)})`;
    if (e.top.length) {
      head.textContent += ` · entropy \u2265 ${entropyBits(e.top).toFixed(3)} bits over the top ${e.top.length} + rest`;
    }
  }
  tip.appendChild(head);
  const table = document.createElement('table');
  for (const t of e.top) {
    const tr = document.createElement('tr');
    if (t.token === e.token) tr.className = 'chosen';
    const p = Math.exp(t.logprob);
    const cells = [visible(t.token), (100 * p).toFixed(2) + '%'];
    cells.forEach((c, i) => {
      const td = document.createElement('td');
      td.textContent = c;
      if (i === 1) td.className = 'p';
      tr.appendChild(td);
    });
    const bar = document.createElement('td');
    const fill = document.createElement('div');
    fill.className = 'bar';
    fill.style.width = `${Math.max(2, Math.round(60 * p))}px`;
    bar.appendChild(fill);
    tr.appendChild(bar);
    table.appendChild(tr);
  }
  tip.appendChild(table);
  const r = span.getBoundingClientRect();
  tip.hidden = false;
  tip.style.left = `${Math.min(window.scrollX + r.left, window.scrollX + window.innerWidth - tip.offsetWidth - 8)}px`;
  tip.style.top = `${window.scrollY + r.bottom + 6}px`;
}

function hideTip() {
  $('tip').hidden = true;
  document.querySelectorAll('.tok.active').forEach((s) => s.classList.remove('active'));
}

function setStatus(msg, error = false) {
  $('status').textContent = msg;
  $('status').className = error ? 'error' : '';
}

function showStats() {
  const lps = state.entries.map((e) => e.logprob).filter((v) => typeof v === 'number');
  const secs = (performance.now() - state.started) / 1000;
  let s = `${state.entries.length} tokens in ${secs.toFixed(2)} s`;
  if (lps.length) {
    const mean = lps.reduce((a, b) => a + b, 0) / lps.length;
    s += ` · mean logprob ${mean.toFixed(3)} · perplexity ${Math.exp(-mean).toFixed(2)}`;
  }
  $('stats').textContent = s;
}

// ---- reading the two response shapes ------------------------------------------------

// Chat: logprobs.content entries carry the exact bytes; a TextDecoder in stream mode
// joins a character split over several tokens (the first ones show nothing).
const decoder = { d: new TextDecoder('utf-8') };
function onChatChoice(ch) {
  const content = ch.logprobs?.content;
  if (!content) {
    if (ch.delta?.content) addEntry({ text: ch.delta.content, token: ch.delta.content, logprob: null, top: [] });
    return;
  }
  for (const e of content) {
    const special = e.bytes === null;
    const text = special ? e.token : decoder.d.decode(new Uint8Array(e.bytes), { stream: true });
    addEntry({ text, token: e.token, logprob: e.logprob, special, top: e.top_logprobs ?? [] });
  }
}

// Completions: text plus the legacy arrays; text_offset[i] is where token i starts in
// the choice's text, in characters (code points).
function onCompletionChoice(ch, chunkStart) {
  const lp = ch.logprobs;
  const chars = Array.from(ch.text ?? '');
  if (!lp) {
    if (chars.length) addEntry({ text: ch.text, token: ch.text, logprob: null, top: [] });
    return;
  }
  lp.tokens.forEach((token, i) => {
    const from = lp.text_offset[i] - chunkStart;
    const to = i + 1 < lp.tokens.length ? lp.text_offset[i + 1] - chunkStart : chars.length;
    const top = Object.entries(lp.top_logprobs?.[i] ?? {})
      .map(([t, v]) => ({ token: t, logprob: v }))
      .sort((a, b) => b.logprob - a.logprob);
    addEntry({ text: chars.slice(from, to).join(''), token, logprob: lp.token_logprobs[i], top });
  });
}

// ---- the request ---------------------------------------------------------------------

function requestBody() {
  const mode = document.querySelector('input[name=mode]:checked').value;
  const k = Number($('top_logprobs').value);
  const body = {
    model: state.model,
    stream: true,
    temperature: Number($('temperature').value),
    max_tokens: Number($('max_tokens').value),
    logprobs_mode: $('logprobs_mode').value,
  };
  const allowed = $('allowed').value.split(/[\s,]+/).filter(Boolean).map(Number);
  if (allowed.length) body.allowed_token_ids = allowed;
  if (mode === 'chat') {
    body.messages = [{ role: 'user', content: $('prompt').value }];
    body.logprobs = true;
    body.top_logprobs = k;
  } else {
    body.prompt = $('prompt').value;
    body.logprobs = k;
  }
  return { mode, body };
}

async function run() {
  hideTip();
  $('out').replaceChildren();
  $('stats').textContent = '';
  state.entries = [];
  state.text = '';
  decoder.d = new TextDecoder('utf-8');
  const { mode, body } = requestBody();
  const path = mode === 'chat' ? '/v1/chat/completions' : '/v1/completions';
  const headers = { 'Content-Type': 'application/json' };
  const key = $('api_key').value;
  if (key) headers.Authorization = `Bearer ${key}`;
  localStorage.setItem('loom-api-key', key);
  state.controller = new AbortController();
  $('run').disabled = true;
  $('stop').disabled = false;
  state.started = performance.now();
  setStatus('generating…');
  let error = null;
  try {
    const resp = await fetch(path, { method: 'POST', headers, body: JSON.stringify(body), signal: state.controller.signal });
    if (!resp.ok) {
      const j = await resp.json().catch(() => ({}));
      throw new Error(`HTTP ${resp.status}: ${j.error?.message ?? resp.statusText}`);
    }
    const reader = resp.body.getReader();
    const text = new TextDecoder('utf-8');
    let buf = '';
    let offset = 0; // completions: characters of the choice already shown
    let finish = null;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += text.decode(value, { stream: true });
      let cut;
      while ((cut = buf.indexOf('\n\n')) >= 0) {
        const event = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        if (!event.startsWith('data: ')) continue;
        const data = event.slice(6);
        if (data === '[DONE]') continue;
        const j = JSON.parse(data);
        if (j.error) throw new Error(j.error.message);
        for (const ch of j.choices ?? []) {
          if (mode === 'chat') onChatChoice(ch);
          else {
            onCompletionChoice(ch, offset);
            offset += Array.from(ch.text ?? '').length;
          }
          finish = ch.finish_reason ?? finish;
        }
        showStats();
      }
    }
    setStatus(`finished: ${finish ?? 'stopped'}`);
  } catch (e) {
    error = e.name === 'AbortError' ? null : String(e.message ?? e);
    setStatus(error ?? 'stopped', Boolean(error));
  } finally {
    $('run').disabled = false;
    $('stop').disabled = true;
    state.controller = null;
    showStats();
  }
  return error;
}

// ---- start ---------------------------------------------------------------------------

async function loadModel() {
  const key = $('api_key').value;
  const resp = await fetch('/v1/models', { headers: key ? { Authorization: `Bearer ${key}` } : {} });
  const j = await resp.json();
  if (!resp.ok) throw new Error(j.error?.message ?? `HTTP ${resp.status}`);
  state.model = j.data[0].id;
  $('model').textContent = `${state.model} · context ${j.data[0].max_model_len ?? '?'}`;
}

async function autorun(q) {
  for (const id of ['prompt', 'temperature', 'max_tokens', 'top_logprobs', 'logprobs_mode', 'allowed', 'api_key']) {
    if (q.has(id)) $(id).value = q.get(id);
  }
  if (q.has('mode')) document.querySelector(`input[name=mode][value=${q.get('mode')}]`).checked = true;
  let error = null;
  try {
    await loadModel();
    error = await run();
  } catch (e) {
    error = String(e.message ?? e);
  }
  window.loomResult = { entries: state.entries, text: state.text, error };
  if (!error && q.has('hover')) {
    const span = document.querySelector(`.tok[data-index="${q.get('hover')}"]`);
    if (span) showTip(span);
  }
  document.body.dataset.state = error ? 'error' : 'done';
}

window.addEventListener('DOMContentLoaded', () => {
  $('api_key').value = localStorage.getItem('loom-api-key') ?? '';
  $('run').addEventListener('click', () => run());
  $('stop').addEventListener('click', () => state.controller?.abort());
  document.addEventListener('click', hideTip);
  const q = new URLSearchParams(location.search);
  if (q.get('autorun') === '1') {
    autorun(q);
    return;
  }
  loadModel().catch((e) => setStatus(`cannot list the models: ${e.message}; set the API key`, true));
  $('api_key').addEventListener('change', () => loadModel().then(() => setStatus('')).catch(() => {}));
});
