// engram's dashboard. Everything it shows comes from the JSON API under
// v1/ (relative, so a project served under /p/NAME/ works as well), and
// all of it is untrusted: agents' tool outputs, pages they fetched, files.
// It reaches the DOM as text only (textContent, attributes set one by
// one), never as markup; the server's Content-Security-Policy forbids
// inline script and style besides.

const views = ['windows', 'savings', 'memory', 'search', 'index'];
const state = { view: 'windows', selected: null, server: null, lost: false, signedOut: false, events: [], windows: [] };

// --- DOM helpers -----------------------------------------------------------

const $ = (sel, root = document) => root.querySelector(sel);

// el makes an element: attrs are attributes (class, text for its text,
// on* keys for listeners), children are nodes or strings (as text).
function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'text') e.textContent = String(v);
    else if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

const fmt = new Intl.NumberFormat('en-US');
const num = (n) => (typeof n === 'number' ? fmt.format(n) : '–');
const pct = (r) => (typeof r === 'number' && isFinite(r) ? `${Math.round(r * 100)} %` : '–');

// value is a number shown formatted, its exact value in data-value.
function value(n, cls) {
  return el('span', { class: cls, 'data-value': n, text: num(n) });
}

function when(t) {
  if (!t) return '';
  const d = new Date(t);
  if (isNaN(d)) return '';
  return d.toLocaleString(undefined, { dateStyle: 'short', timeStyle: 'medium' });
}

const enc = encodeURIComponent;
const windowPath = (w) => `v1/windows/${enc(w.session)}/${enc(w.agent)}`;

// bar is a horizontal bar filled to share (0-1), with an optional mark.
function bar(share, label, mark) {
  const b = el('div', { class: 'bar', role: 'img', 'aria-label': label });
  const fill = el('span');
  fill.style.width = `${Math.max(0, Math.min(1, share || 0)) * 100}%`;
  if (share >= 1) fill.className = 'full';
  b.append(fill);
  if (mark > 0 && mark < 1) {
    const m = el('i', { class: 'mark' });
    m.style.left = `${mark * 100}%`;
    b.append(m);
  }
  return b;
}

// --- the API ---------------------------------------------------------------

class APIError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function api(path, opts = {}) {
  let res;
  try {
    res = await fetch(path, { credentials: 'same-origin', headers: { Accept: 'application/json', ...(opts.headers || {}) }, ...opts });
  } catch (e) {
    throw new APIError(0, 'unreachable', 'the server cannot be reached (stopped or restarting?)');
  }
  let body = null;
  try {
    body = await res.json();
  } catch (e) {
    // not JSON: described by the status below
  }
  if (res.status === 401) {
    signin(body && body.error ? body.error.message : '');
    throw new APIError(401, 'unauthorized', 'not signed in');
  }
  if (!res.ok) {
    const msg = body && body.error ? body.error.message : `${res.status} ${res.statusText}`;
    throw new APIError(res.status, body && body.error ? body.error.code : '', msg);
  }
  signedIn();
  return body;
}

const post = (path, body) => api(path, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });

// signin says the page is not signed in: the banner says how to, the
// event stream stops (it would be refused again and again), and Sign out
// goes. The page tries again when it gets the focus back (a login link
// opened in another tab signs this one in too).
function signin(why) {
  $('#signin').hidden = false;
  $('#signin-why').textContent = signinWhy(why);
  $('.signout').hidden = true;
  state.signedOut = true;
  if (source) {
    source.close();
    source = null;
  }
  setConn('Not signed in', 'lost');
}

// signinWhy is what a person is told of the API's 401: why it refused
// this browser's sign-in (expired, signed out elsewhere, another token),
// or nothing when the page had none. The rest of the API's message
// ("send Authorization: Bearer <token>") is for programs, not people.
function signinWhy(msg) {
  const m = /^the dashboard's sign-in (.+?): send Authorization/s.exec(msg || '');
  return m ? `This browser's sign-in ${m[1]}.` : '';
}

function signedIn() {
  $('#signin').hidden = true;
  $('.signout').hidden = false;
  if (state.signedOut) {
    state.signedOut = false;
    connect();
  }
}

// failed shows an error in a view (or the viewer) and keeps the rest.
function failed(scope, err) {
  const p = $('.error', scope);
  if (!p) return;
  if (!err) {
    p.hidden = true;
    p.textContent = '';
    return;
  }
  if (err.status === 401) return; // the sign-in banner says it
  p.hidden = false;
  p.textContent = err.message || String(err);
}

// guarded runs a view's loader, showing its error in the view.
async function guarded(scope, fn) {
  try {
    await fn();
    failed(scope, null);
  } catch (e) {
    failed(scope, e);
  }
}

// coalesce runs fn at most once per delay, for bursts of events.
const pending = new Map();
function coalesce(name, fn, delay = 250) {
  if (pending.has(name)) return;
  pending.set(name, setTimeout(() => {
    pending.delete(name);
    fn();
  }, delay));
}

// --- tabs ------------------------------------------------------------------

function show(view, focus) {
  if (!views.includes(view)) view = 'windows';
  state.view = view;
  for (const v of views) {
    const tab = $(`#tab-${v}`);
    const on = v === view;
    tab.setAttribute('aria-selected', on);
    tab.tabIndex = on ? 0 : -1;
    $(`#view-${v}`).hidden = !on;
  }
  if (focus) $(`#tab-${view}`).focus();
  if (location.hash !== `#${view}`) history.replaceState(null, '', `#${view}`);
  load(view);
}

function setupTabs() {
  for (const v of views) $(`#tab-${v}`).addEventListener('click', () => show(v));
  $('#tabs').addEventListener('keydown', (e) => {
    const i = views.indexOf(state.view);
    const next = { ArrowRight: i + 1, ArrowLeft: i - 1, Home: 0, End: views.length - 1 }[e.key];
    if (next === undefined) return;
    e.preventDefault();
    show(views[(next + views.length) % views.length], true);
  });
  window.addEventListener('hashchange', () => show(location.hash.slice(1)));
}

function load(view) {
  const scope = $(`#view-${view}`);
  const loaders = { windows: loadWindows, savings: loadSavings, memory: loadMemory, search: () => {}, index: loadIndex };
  return guarded(scope, loaders[view]);
}

// --- header ----------------------------------------------------------------

async function loadHeader() {
  const s = await api('v1/status');
  const st = s.store || {};
  $('#server-meta').textContent = `engram ${s.version || ''} · ${st.backend || ''} ${st.location || ''} · ${num(s.sessions)} sessions · ${num(s.entries)} entries`;
  return s;
}

function setConn(text, cls) {
  const c = $('#conn');
  c.textContent = text;
  c.className = `conn ${cls || ''}`;
}

// --- windows ---------------------------------------------------------------

// loadWindows lists the windows and, unless detail is false, reads the
// selected one's detail again (its timeline replays its whole ledger: an
// event that does not name it leaves it be).
async function loadWindows(detail = true) {
  const out = await api('v1/windows');
  const ws = (out.windows || []).slice();
  ws.sort((a, b) => b.used / (b.budget || 1) - a.used / (a.budget || 1) || `${a.session}/${a.agent}`.localeCompare(`${b.session}/${b.agent}`));
  state.windows = ws;
  const body = clear($('#windows-table tbody'));
  $('#windows-empty').hidden = ws.length > 0;
  $('#windows-table').hidden = ws.length === 0;
  for (const w of ws) {
    const key = `${w.session}/${w.agent}`;
    const sel = state.selected && state.selected.session === w.session && state.selected.agent === w.agent;
    const open = el('button', { type: 'button', class: 'link', 'aria-pressed': sel ? 'true' : 'false', onclick: () => select(w) },
      el('strong', { text: w.agent }), el('span', { class: 'sub', text: ` ${w.session}` }));
    const fill = w.budget ? w.used / w.budget : 0;
    body.append(el('tr', { 'data-key': key, class: sel ? 'selected' : '' },
      el('td', {}, open),
      el('td', {}, `${w.role || '–'}`, el('span', { class: 'sub', text: ` ${w.model || 'no model'} · ${w.strategy || ''}` })),
      el('td', { class: 'fill' }, bar(fill, `${Math.round(fill * 100)} % full; evicts at ${Math.round((w.evict_at / (w.budget || 1)) * 100)} %`, w.budget ? w.evict_at / w.budget : 0)),
      el('td', { class: 'num' }, value(w.used, 'used'), ' / ', value(w.budget, 'budget')),
      el('td', { class: 'num' }, value(w.evicted, 'evicted'), el('span', { class: 'sub', text: ` · ${num(w.refs)} refs` }))));
  }
  if (!state.selected && ws.length) select(ws[0], true);
  else if (state.selected) {
    const still = ws.find((w) => w.session === state.selected.session && w.agent === state.selected.agent);
    if (still && detail) await loadDetail(still);
    else if (still) return;
    else {
      const d = $('#window-detail');
      failed(d, new Error(`Window ${state.selected.session}/${state.selected.agent} no longer exists.`));
    }
  }
}

function select(w, quiet) {
  state.selected = { session: w.session, agent: w.agent };
  for (const tr of document.querySelectorAll('#windows-table tbody tr')) {
    const on = tr.dataset.key === `${w.session}/${w.agent}`;
    tr.classList.toggle('selected', on);
    const b = $('button', tr);
    if (b) b.setAttribute('aria-pressed', on ? 'true' : 'false');
  }
  const d = $('#window-detail');
  guarded(d, () => loadDetail(w)).then(() => {
    if (!quiet && window.matchMedia('(max-width: 800px)').matches) d.scrollIntoView();
  });
}

async function loadDetail(w) {
  const d = $('#window-detail');
  const key = `${w.session}/${w.agent}`;
  d.hidden = false;
  if (d.dataset.key !== key) {
    // Another window: nothing of the last one may stay under its title.
    delete d.dataset.key;
    for (const sel of ['#wd-facts', '#wd-layers', '#wd-legend', '#wd-timeline', '#wd-context', '#wd-chart']) clear($(sel));
    $('#wd-turn').textContent = '';
    $('#wd-chart-cap').textContent = 'Loading…';
    $('#wd-timeline-more').textContent = '';
  }
  $('#wd-title').textContent = `${w.agent} · ${w.session}`;
  const [st, tl, cx] = await Promise.allSettled([
    api(`${windowPath(w)}/status`),
    api(`${windowPath(w)}/timeline?limit=500`),
    api(`${windowPath(w)}/context`),
  ]);
  const errs = [st, tl, cx].filter((r) => r.status === 'rejected').map((r) => r.reason);
  if (st.status === 'fulfilled') renderStatus(st.value);
  if (tl.status === 'fulfilled') renderTimeline(tl.value);
  if (cx.status === 'fulfilled') renderContext(cx.value);
  d.dataset.key = key; // what the detail shows now, whole
  if (errs.length) {
    const e = errs[0];
    if (e.status === 404) throw new Error(`Window ${w.session}/${w.agent} no longer exists.`);
    throw e;
  }
}

function fact(name, ...val) {
  return [el('dt', { text: name }), el('dd', {}, ...val)];
}

function renderStatus(s) {
  const w = s.window;
  const a = s.assembled;
  const f = clear($('#wd-facts'));
  f.append(...fact('Role', w.role || '–'), ...fact('Model', w.model || '–'), ...fact('Strategy', w.strategy || '–'),
    ...fact('Used', value(w.used, 'wd-used'), ' of ', value(w.budget, 'wd-budget'), ` tokens (${pct(w.budget ? w.used / w.budget : 0)})`),
    ...fact('Evicts at', value(w.evict_at), ' tokens, down to ', value(w.target)),
    ...fact('Messages', value(w.messages, 'wd-messages'), ' in, ', value(w.evicted, 'wd-evicted'), ' evicted under ', value(w.refs, 'wd-refs'), ' refs'));
  if (w.handoff_due) f.append(...fact('Handoff', el('strong', { text: 'due' })));
  if (a) {
    f.append(...fact('Last turn', `snapshot ${a.seq} at ${when(a.at)}`, a.current ? '' : ' (the window changed since)'),
      ...fact('History', a.strategy || '–', ` · sent ${num(a.savings.sent)} of ${num(a.savings.history)} tokens, saved `, value(a.savings.saved, 'wd-saved')));
  }
  const layers = clear($('#wd-layers'));
  const legend = clear($('#wd-legend'));
  if (!a || !a.layers.length) {
    $('#wd-turn').textContent = '(no turn assembled yet)';
    layers.setAttribute('aria-label', 'no turn assembled yet');
    return;
  }
  $('#wd-turn').textContent = `(turn ${a.seq}: ${num(a.tokens)} of ${num(a.budget)} tokens)`;
  layers.setAttribute('aria-label', a.layers.map((l) => `${l.name} ${l.allocated} tokens`).join(', '));
  a.layers.forEach((l, i) => {
    const seg = el('span', { class: `l${i % 8}`, title: `${l.name}: ${l.used} used of ${l.allocated} allocated` });
    seg.style.width = `${(l.allocated / (a.budget || 1)) * 100}%`;
    layers.append(seg);
    legend.append(el('li', { 'data-layer': l.name }, el('i', { class: `l${i % 8}` }), `${l.name} `, value(l.allocated, 'alloc'),
      el('span', { class: 'sub', text: ` allocated · ${num(l.used)} used${l.dropped ? ' · dropped' : ''}` })));
  });
}

let chart = null;
const chartWidth = (host) => Math.max(220, Math.min(host.parentElement.clientWidth || 600, 900) - 8);
// The chart follows its box (a rotated phone, a resized window).
const resized = new ResizeObserver(() => {
  if (chart) {
    const w = chartWidth($('#wd-chart'));
    if (Math.abs(w - chart.width) > 4) chart.setSize({ width: w, height: 180 });
  }
  if (savingsChart) {
    const w = chartWidth($('#savings-chart'));
    if (Math.abs(w - savingsChart.width) > 4) savingsChart.setSize({ width: w, height: 200 });
  }
});
function renderChart(fill) {
  const host = clear($('#wd-chart'));
  if (chart) {
    chart.destroy();
    chart = null;
  }
  const cap = $('#wd-chart-cap');
  if (!fill.length) {
    cap.textContent = 'No turns yet.';
    return;
  }
  const last = fill[fill.length - 1];
  cap.textContent = `${fill.length} turns; now ${num(last.used)} of ${num(last.budget)} tokens.`;
  if (typeof uPlot !== 'function') return; // the chart's script did not load: the caption says it
  const xs = fill.map((_, i) => i + 1);
  const width = chartWidth(host);
  chart = new uPlot({
    width, height: 180,
    scales: { x: { time: false } },
    axes: [{ label: 'turn', incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000] }, { label: 'tokens', size: 60 }],
    series: [{ label: 'turn' }, { label: 'used', stroke: '#1f4e79', width: 2, fill: 'rgba(31,78,121,0.12)' },
      { label: 'budget', stroke: '#8a5a00', dash: [6, 4] }],
  }, [xs, fill.map((p) => p.used), fill.map((p) => p.budget)], host);
  host.setAttribute('role', 'img');
  host.setAttribute('aria-label', `Fill level over ${fill.length} turns: ${cap.textContent}`);
}

function refButton(id, text) {
  return el('button', { type: 'button', class: 'ref', 'data-ref': id, onclick: () => openRef(id) }, text || `[CTX-REF:${id}]`);
}

function renderTimeline(t) {
  renderChart(t.fill || []);
  const ol = clear($('#wd-timeline'));
  const items = [];
  for (const turn of t.turns || []) items.push({ at: turn.at, version: turn.version, turn });
  for (const ev of t.events || []) items.push({ at: ev.at, version: ev.version || 0, ev });
  items.sort((a, b) => (b.version - a.version) || (String(b.at || '').localeCompare(String(a.at || ''))) || (a.turn ? 1 : -1));
  for (const it of items.slice(0, 300)) {
    if (it.turn) {
      const x = it.turn;
      ol.append(el('li', { class: 'turn' }, el('span', { class: 'when', text: when(x.at) }),
        el('strong', { text: `Turn at version ${x.version}` }), `: ${num(x.messages)} messages, ${num(x.tokens)} tokens`,
        typeof x.used === 'number' ? ` → ${num(x.used)} in the window` : ''));
      continue;
    }
    const e = it.ev;
    const li = el('li', { class: `ev ${e.kind}` }, el('span', { class: 'when', text: when(e.at) }));
    switch (e.kind) {
      case 'evict':
        li.append(el('strong', { text: 'Evicted' }), ` ${num(e.messages)} messages (${num(e.tokens)} tokens) under `, refButton(e.ref_id));
        break;
      case 'readmit':
        li.append(el('strong', { text: 'Readmitted' }), ` ${num(e.messages)} messages of `, refButton(e.ref_id));
        break;
      case 'handoff_in':
        li.append(el('strong', { text: 'Opened by a handoff' }), ` from ${e.agent || '?'}`);
        break;
      case 'handoff_out':
        li.append(el('strong', { text: 'Handed off' }), ` to ${e.agent || '?'}`);
        break;
      case 'assembled':
        li.append(el('strong', { text: 'Turn assembled' }), e.snapshot ? ` (snapshot ${String(e.snapshot).slice(0, 12)})` : '', e.tokens ? `: ${num(e.tokens)} tokens` : '');
        break;
      default:
        li.append(el('strong', { text: e.kind }));
    }
    ol.append(li);
  }
  const total = t.turns_total ?? (t.turns || []).length;
  $('#wd-timeline-more').textContent = total > (t.turns || []).length ? `Showing the newest ${(t.turns || []).length} of ${num(total)} turns.` : '';
}

// messageText is what a message says, as text: its text blocks, tool
// calls and results.
function messageText(m) {
  if (typeof m.content === 'string') return m.content;
  return (m.blocks || []).map((b) => {
    if (b.type === 'tool_use') return `tool call ${b.name || ''} ${b.input ? JSON.stringify(b.input) : ''}`;
    return b.text || (b.raw ? JSON.stringify(b.raw) : `[${b.type}]`);
  }).join('\n');
}

function renderContext(c) {
  const ol = clear($('#wd-context'));
  for (const it of c.items || []) {
    if (it.ref_id) {
      ol.append(el('li', { class: 'marker' }, refButton(it.ref_id, it.marker), it.excerpt ? el('span', { class: 'sub', text: ` ${it.excerpt}` }) : ''));
      continue;
    }
    if (!it.message) {
      ol.append(el('li', { class: 'msg excerpt' }, el('span', { class: 'role', text: 'excerpt' }), ' ', el('span', { class: 'excerpt', text: it.excerpt || '' })));
      continue;
    }
    const m = it.message;
    const text = messageText(m);
    ol.append(el('li', { class: `msg ${m.role || ''}` }, el('span', { class: 'role', text: m.role || '?' }),
      el('span', { class: 'sub', text: ` ${num(it.tokens)} tokens ` }), el('span', { class: 'excerpt', text: text.length > 240 ? `${text.slice(0, 240)}…` : text })));
  }
}

// --- the viewer (refs, files, entries) ---------------------------------------

function viewer(title, sub) {
  const d = $('#viewer');
  $('#viewer-title').textContent = title;
  $('#viewer-sub').textContent = sub || 'Loading…';
  clear($('#viewer-body'));
  failed(d, null);
  if (!d.open) d.showModal();
  return d;
}

async function openRef(id) {
  const d = viewer(`Reference ${id}`);
  try {
    const r = await api(`v1/refs/${enc(id)}`);
    $('#viewer-sub').textContent = `${r.messages.length} messages, ${num(r.tokens)} tokens, from ${r.session}/${r.agent}, byte for byte as stored`;
    const body = $('#viewer-body');
    r.messages.forEach((m, i) => {
      const sec = el('section', { class: 'message', 'data-index': i }, el('h3', { text: `${i + 1}. ${m.role}` }));
      if (typeof m.content === 'string') sec.append(el('pre', { class: 'block text', text: m.content }));
      for (const b of m.blocks || []) {
        if (b.type === 'tool_use') {
          sec.append(el('p', { class: 'sub', text: `tool call ${b.name || ''} (${b.id || ''})` }), el('pre', { class: 'block input', text: JSON.stringify(b.input, null, 2) }));
        } else if (b.type === 'tool_result') {
          sec.append(el('p', { class: 'sub', text: `tool result for ${b.tool_use_id || ''}${b.is_error ? ' (error)' : ''}` }), el('pre', { class: 'block text', text: b.text || '' }));
        } else if (b.raw) {
          sec.append(el('p', { class: 'sub', text: `${b.type} block` }), el('pre', { class: 'block raw', text: JSON.stringify(b.raw) }));
        } else {
          sec.append(el('pre', { class: 'block text', text: b.text || '' }));
        }
      }
      body.append(sec);
    });
    body.append(el('details', {}, el('summary', { text: 'As JSON' }), el('pre', { class: 'json', text: JSON.stringify(r.messages, null, 2) })));
  } catch (e) {
    $('#viewer-sub').textContent = '';
    failed(d, e.status === 404 ? new Error(`Reference ${id} no longer exists (forgotten, or never made).`) : e);
  }
}

// openSpan opens lines of a search hit's entry under the hit's place,
// title. What retrieve says of where the entry was seen is left out: an
// entry is stored once however often it was seen, and retrieve names the
// first sighting, the hit the latest (a tool's output seen in turns 1 to
// 3 would read "turn 3" above "turn 1").
async function openSpan(title, req) {
  const d = viewer(title);
  try {
    const r = await post('v1/retrieve', req);
    const items = r.items || [];
    if (!items.length) {
      $('#viewer-sub').textContent = r.message || 'Nothing is stored there any more.';
      return;
    }
    $('#viewer-sub').textContent = items.map((s) => `Lines ${s.start_line}–${s.end_line}${s.truncated ? ' (cut)' : ''}`).join('; ');
    for (const s of items) {
      const text = s.content_base64 ? `(${s.end_byte - s.start_byte} bytes that are not text)` : s.content;
      $('#viewer-body').append(el('pre', { class: 'block text', text }));
    }
  } catch (e) {
    $('#viewer-sub').textContent = '';
    failed(d, e);
  }
}

// --- savings ---------------------------------------------------------------

function card(label, node, note) {
  return el('div', { class: 'card' }, el('div', { class: 'label', text: label }), el('div', { class: 'big' }, node), note ? el('div', { class: 'sub', text: note }) : '');
}

async function loadSavings() {
  const s = await api('v1/status');
  const sv = s.savings || {};
  const c = s.counters || {};
  const cards = clear($('#savings-cards'));
  cards.append(
    card('Tokens stored', value(s.tokens_stored, 'tokens-stored'), 'everything agents saw, once each'),
    card('History of the windows', value(sv.history, 'savings-history'), 'tokens of their whole conversations'),
    card('Sent in their latest turns', value(sv.sent, 'savings-sent'), `${pct(sv.ratio)} of the history`),
    card('Saved', value(sv.saved, 'savings-saved'), 'tokens not sent again'),
    card('Refs expanded', value(c.refs_expanded, 'refs-expanded'), c.since ? `since ${when(c.since)}` : ''),
    card('Pre-fetch hits', value(c.prefetch_hits, 'prefetch-hits'), `of ${num(c.prefetches)} pre-fetches`));
  const rows = s.per_window || [];
  const body = clear($('#savings-table tbody'));
  $('#savings-empty').hidden = rows.some((r) => r.history > 0);
  for (const r of rows) {
    body.append(el('tr', { 'data-key': `${r.session}/${r.agent}` }, el('td', {}, el('strong', { text: r.agent }), el('span', { class: 'sub', text: ` ${r.session}` })),
      el('td', { class: 'num' }, value(r.history, 'history')), el('td', { class: 'num' }, value(r.sent, 'sent')), el('td', { class: 'num' }, value(r.saved, 'saved')),
      el('td', { class: 'num', text: r.history ? pct(r.saved / r.history) : '–' })));
  }
  $('#savings-note').textContent = s.more ? 'Only the first windows are listed.' : '';
  renderSavingsChart(rows.filter((r) => r.history > 0));
}

// barNames labels each window's bars on the savings chart: its agent,
// and under it its session where another window has the same agent (the
// proxy names the agent of every session's window "proxy" unless told
// otherwise). A long session is cut in its middle, where IDs differ least
// (a UUID at its start, "run-1" and "run-2" at their end), unless that
// makes two labels the same.
function barNames(rows) {
  const count = (xs) => xs.reduce((m, x) => m.set(x, (m.get(x) || 0) + 1), new Map());
  const agents = count(rows.map((r) => r.agent));
  const cut = (s) => (s.length > 11 ? `${s.slice(0, 5)}…${s.slice(-5)}` : s);
  const names = rows.map((r) => (agents.get(r.agent) > 1 ? `${r.agent}\n${cut(r.session)}` : r.agent));
  const same = count(names);
  return names.map((n, i) => (same.get(n) > 1 ? `${rows[i].agent}\n${rows[i].session}` : n));
}

// renderSavingsChart draws, for each window with an assembled turn, its
// whole history and what its latest turn sent, side by side (the table
// under it says the same in numbers).
let savingsChart = null;
function renderSavingsChart(rows) {
  const host = clear($('#savings-chart'));
  if (savingsChart) {
    savingsChart.destroy();
    savingsChart = null;
  }
  const saved = rows.reduce((a, r) => a + r.saved, 0);
  const whole = rows.reduce((a, r) => a + r.history, 0);
  $('#savings-chart-cap').textContent = rows.length
    ? `${rows.length} ${rows.length === 1 ? 'window' : 'windows'}: ${num(saved)} of ${num(whole)} tokens of history not sent in their latest turns (${pct(whole ? saved / whole : 0)}).`
    : '';
  if (!rows.length || typeof uPlot !== 'function') return;
  const xs = rows.map((_, i) => i);
  const names = barNames(rows);
  const bars = (offset) => uPlot.paths.bars({ size: [0.35, 48], align: offset });
  savingsChart = new uPlot({
    width: Math.max(260, Math.min(host.parentElement.clientWidth || 600, 900) - 8), height: 200,
    scales: { x: { time: false, range: [-0.5, rows.length - 0.5] } },
    axes: [{ values: (u, ticks) => ticks.map((t) => names[t] ?? ''), incrs: [1], gap: 4 }, { label: 'tokens', size: 60 }],
    series: [{ label: 'window', value: (u, i) => (rows[i] ? `${rows[i].agent} · ${rows[i].session}` : '') },
      { label: 'history', fill: '#d0d7de', stroke: '#57606a', paths: bars(-1), points: { show: false } },
      { label: 'sent', fill: '#1f4e79', stroke: '#1f4e79', paths: bars(1), points: { show: false } }],
  }, [xs, rows.map((r) => r.history), rows.map((r) => r.sent)], host);
  host.setAttribute('role', 'img');
  host.setAttribute('aria-label', $('#savings-chart-cap').textContent);
}

// --- memory ----------------------------------------------------------------

function recordItem(r) {
  const meta = el('div', { class: 'sub', text: [r.category, r.agent && `by ${r.agent}`, when(r.created_at)].filter(Boolean).join(' · ') });
  let main = r.id;
  let extra = null;
  if (r.pattern) {
    main = r.pattern.pattern;
    extra = r.pattern.description;
  } else if (r.failure) {
    main = `${r.failure.approach}: ${r.failure.reason}`;
    const res = r.failure.resolution || r.resolution;
    extra = res ? `Resolved (${res.outcome}): ${res.approach}` : (r.failure.error || 'No resolution yet');
  } else if (r.insight) {
    main = r.insight.insight;
    extra = r.insight.evidence;
  } else if (r.decision) {
    main = r.decision.decision;
    extra = r.decision.rationale;
  } else if (r.intent) {
    main = r.intent.description;
    extra = (r.intent.paths || []).join(', ');
  }
  return el('li', { 'data-id': r.id }, el('div', { class: 'main', text: main }), extra ? el('div', { class: 'extra', text: extra }) : '', meta);
}

async function loadMemory() {
  const kinds = ['patterns', 'failures', 'insights', 'decisions', 'intents'];
  const results = await Promise.allSettled([...kinds.map((k) => api(`v1/${k}?limit=50`)), api('v1/sessions?limit=50'), api('v1/events?limit=100')]);
  const errs = [];
  kinds.forEach((k, i) => {
    const r = results[i];
    const ul = clear($(`#m-${k}`));
    if (r.status === 'rejected') return errs.push(r.reason);
    const recs = r.value.records || [];
    $(`#n-${k}`).textContent = `(${recs.length}${r.value.more ? '+' : ''})`;
    if (!recs.length) ul.append(el('li', { class: 'empty', text: 'None yet.' }));
    for (const rec of recs) ul.append(recordItem(rec));
  });
  const ss = results[kinds.length];
  const ul = clear($('#m-sessions'));
  if (ss.status === 'rejected') errs.push(ss.reason);
  else {
    for (const s of ss.value.sessions || []) {
      const r = s.resume;
      ul.append(el('li', { 'data-session': s.session }, el('div', { class: 'main', text: s.name ? `${s.name} (${s.session})` : s.session }),
        r ? el('div', { class: 'extra', text: [r.task && `Task: ${r.task}`, r.current && `Now: ${r.current}`, r.next && r.next.length && `Next: ${r.next.join('; ')}`].filter(Boolean).join(' · ') }) : el('div', { class: 'extra', text: 'No resume point.' }),
        el('div', { class: 'sub', text: [`${num(s.agents)} agents`, `${num(s.windows)} windows`, s.last_seen && `seen ${when(s.last_seen)}`].filter(Boolean).join(' · ') })));
    }
    if (!(ss.value.sessions || []).length) ul.append(el('li', { class: 'empty', text: 'No sessions yet.' }));
  }
  const ev = results[kinds.length + 1];
  if (ev.status === 'rejected') errs.push(ev.reason);
  else {
    state.events = (ev.value.events || []).slice().reverse();
    renderEvents();
  }
  if (errs.length) throw errs[0];
}

function renderEvents() {
  const body = clear($('#events-table tbody'));
  for (const e of state.events.slice(0, 300)) {
    body.append(el('tr', { 'data-seq': e.seq }, el('td', { class: 'num', text: e.seq }), el('td', { text: when(e.at) }), el('td', { text: e.type }),
      el('td', { text: [e.session, e.agent].filter(Boolean).join(' · ') }), el('td', { class: 'wrap', text: e.detail || e.record || '' })));
  }
}

// --- search ----------------------------------------------------------------

async function search(e) {
  e.preventDefault();
  const scope = $('#view-search');
  const q = $('#search-q').value.trim();
  const hits = clear($('#search-hits'));
  failed(scope, null);
  if (!q) {
    $('#search-status').textContent = 'Type what to find.';
    return;
  }
  $('#search-status').textContent = 'Searching…';
  try {
    const hist = $('#search-history').checked ? '&history=true' : '';
    const r = await api(`v1/search?q=${enc(q)}&limit=20${hist}`);
    const hs = r.hits || [];
    $('#search-status').textContent = hs.length ? `${hs.length} ${hs.length === 1 ? 'result' : 'results'} for “${q}”${r.degraded ? ' (lexical only: ' + (r.faults || []).join('; ') + ')' : ''}.` : `Nothing matches “${q}”.`;
    for (const h of hs) {
      const where = h.where;
      const open = el('button', { type: 'button', class: 'link', onclick: () => openSpan(where, { content_ids: [h.entry], start_line: h.start_line || 1, end_line: h.end_line || 200 }) }, where);
      // A signal's score is there only when it found the hit (the API
      // leaves out a BM25 that rounds to zero too): none is shown as 0.
      const scores = el('div', { class: 'scores' }, 'score ', value(Number(h.score.toFixed(4)), 'score'));
      if (typeof h.lexical === 'number') scores.append(' · lexical ', value(Number(h.lexical.toFixed(4)), 'lexical'));
      if (typeof h.vector === 'number') scores.append(' · vector ', value(Number(h.vector.toFixed(4)), 'vector'));
      hits.append(el('li', { 'data-entry': h.entry }, el('div', { class: 'main' }, open, el('span', { class: 'sub', text: ` ${h.type}` })),
        scores,
        el('pre', { class: 'snippet', text: (h.text || '').split('\n').slice(0, 6).join('\n') })));
    }
  } catch (err) {
    $('#search-status').textContent = '';
    failed(scope, err);
  }
}

// --- index -----------------------------------------------------------------

async function loadIndex() {
  const s = await api('v1/index');
  const files = s.files || {};
  const e = s.embeddings || {};
  const cards = clear($('#index-cards'));
  const indexed = Object.values(files).reduce((a, b) => a + b, 0);
  cards.append(card('Files', value(indexed, 'files'), Object.entries(files).map(([k, v]) => `${v} ${k}`).join(', ')),
    card('Chunks', value(e.chunks ?? s.chunks, 'chunks'), ''),
    card('Embedding queue', value(e.pending, 'pending'), e.model ? `model ${e.model}` : `${e.provider || 'no embedder'}: no model yet, search is lexical`),
    card('Watching', el('span', { text: s.watching ? 'yes' : 'no' }), s.watching ? `${num((s.live || {}).pending || 0)} paths pending` : 'this server does not index'));
  const cover = e.chunks ? e.embedded / e.chunks : 0;
  const b = $('#index-cover span');
  b.style.width = `${cover * 100}%`;
  $('#index-cover').setAttribute('role', 'img');
  $('#index-cover').setAttribute('aria-label', `${pct(cover)} of chunks embedded`);
  $('#index-cover-label').textContent = `${num(e.embedded)} of ${num(e.chunks)} chunks embedded (${pct(cover)})`;
  const act = s.live || {};
  const last = act.last;
  $('#index-last').textContent = last ? `${when(last.at)}: ${num(last.new)} new, ${num(last.changed)} changed, ${num(last.deleted)} deleted in ${num(last.took_ms)} ms${last.error ? ` — failed: ${last.error}` : ''}` : (s.watching ? 'None since the server started.' : 'This server does not index (--no-index).');
  const ul = clear($('#index-errors'));
  for (const er of act.errors || []) ul.append(el('li', {}, el('div', { class: 'main', text: er.path ? `${er.path}: ${er.message}` : er.message }), el('div', { class: 'sub', text: when(er.at) })));
  if (!(act.errors || []).length) ul.append(el('li', { class: 'empty', text: 'None.' }));
}

// --- live ------------------------------------------------------------------

let source = null;
function connect() {
  if (source) source.close();
  source = new EventSource('v1/events/stream');
  source.addEventListener('hello', (e) => {
    const h = JSON.parse(e.data);
    const restarted = state.server && state.server !== h.server;
    state.server = h.server;
    setConn(restarted ? 'Live (the server restarted; reloaded)' : 'Live', 'live');
    state.lost = false;
    refreshAll();
  });
  source.addEventListener('windows', (e) => {
    const d = JSON.parse(e.data);
    const sel = state.selected;
    const named = (w) => sel && w.session === sel.session && w.agent === sel.agent;
    if ((d.windows || []).some(named) || (d.removed || []).some(named)) state.detailStale = true;
    if (state.view === 'windows') {
      coalesce('windows', () => {
        const detail = state.detailStale;
        state.detailStale = false;
        guarded($('#view-windows'), () => loadWindows(detail));
      }, 500);
    }
    if (state.view === 'savings') coalesce('savings', () => guarded($('#view-savings'), loadSavings));
    coalesce('header', () => loadHeader().catch(() => {}), 5000); // counts for the header: no hurry
  });
  source.addEventListener('archive', (e) => {
    const d = JSON.parse(e.data);
    state.events = [...(d.events || []).slice().reverse(), ...state.events].slice(0, 500);
    if (state.view === 'memory') {
      renderEvents();
      coalesce('memory', () => guarded($('#view-memory'), loadMemory), 500);
    }
  });
  source.addEventListener('index', () => {
    if (state.view === 'index') coalesce('index', () => guarded($('#view-index'), loadIndex));
  });
  source.addEventListener('error', () => {
    state.lost = true;
    if (source.readyState === EventSource.CLOSED) {
      // Refused (signed out, or too many streams): a read says which.
      // Signed out, it says so (signin) and asks no more.
      setConn('Disconnected: retrying…', 'lost');
      const retry = () => setTimeout(() => state.signedOut || connect(), 5000);
      loadHeader().then(retry, (err) => err.status === 401 || retry());
    } else {
      setConn('Reconnecting to the server…', 'lost');
    }
  });
}

function refreshAll() {
  loadHeader().catch(() => {});
  load(state.view);
}

function init() {
  setupTabs();
  resized.observe($('#window-detail'));
  resized.observe($('#view-savings'));
  $('#search-form').addEventListener('submit', search);
  $('#viewer-close').addEventListener('click', () => $('#viewer').close());
  window.addEventListener('focus', () => state.signedOut && refreshAll());
  show(location.hash.slice(1) || 'windows');
  loadHeader().catch(() => {});
  connect();
}

init();
