// toolbus console: one page, a view per route (#/, #/turn/ID, #/workflows,
// #/workflow/AGENT/ID, #/jobs, #/nodes), each fed by the console's live feed while it
// shows. Text reaches the DOM as text only (textContent), never as markup.
'use strict';

const token = document.querySelector('meta[name="toolbus-token"]').content;
const view = document.getElementById('view');
const flashBox = document.getElementById('flash');
const liveDot = document.getElementById('live');

// ---- small helpers ----

// el builds an element: el('td', {class: 'num'}, 'text', child, ...).
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const k of kids.flat()) {
    if (k === undefined || k === null || k === false) continue;
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
}

function svg(tag, attrs, ...kids) {
  const e = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, String(v));
  }
  for (const k of kids.flat()) {
    if (k === undefined || k === null) continue;
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
}

function stateTag(state, id) {
  return el('span', {class: 'state', 'data-state': state || '', id}, state || '–');
}

function ago(t) {
  if (!t) return '–';
  const s = Math.max(0, (Date.now() - new Date(t).getTime()) / 1000);
  if (s < 60) return Math.floor(s) + 's';
  if (s < 3600) return Math.floor(s / 60) + 'm';
  if (s < 86400) return Math.floor(s / 3600) + 'h' + String(Math.floor(s % 3600 / 60)).padStart(2, '0');
  return Math.floor(s / 86400) + 'd';
}

function stamp(t) {
  if (!t || t.startsWith('0001')) return '–';
  const d = new Date(t);
  return d.toLocaleString(undefined, {hour12: false});
}

function ms(ns) {
  if (!ns) return '';
  const v = ns / 1e6;
  if (v < 1) return '<1 ms';
  if (v < 1000) return Math.round(v) + ' ms';
  return (v / 1000).toFixed(v < 10000 ? 2 : 1) + ' s';
}

function pretty(s) {
  if (typeof s !== 'string') return JSON.stringify(s, null, 2);
  try { return JSON.stringify(JSON.parse(s), null, 2); } catch { return s; }
}

const ended = st => st && !['running', 'queued', ''].includes(st);

function flash(kind, text) {
  flashBox.hidden = false;
  flashBox.dataset.kind = kind;
  flashBox.textContent = text;
  clearTimeout(flash.t);
  if (kind === 'ok') flash.t = setTimeout(() => { flashBox.hidden = true; }, 4000);
}

async function getJSON(url) {
  const r = await fetch(url, {headers: {Accept: 'application/json'}});
  const body = await r.json().catch(() => ({error: r.status + ' ' + r.statusText}));
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}

// post sends a state-changing request: JSON, with the console's token.
async function post(url, body) {
  const r = await fetch(url, {
    method: 'POST',
    headers: {'Content-Type': 'application/json', 'X-Toolbus-Console': token},
    body: JSON.stringify(body),
  });
  const out = await r.json().catch(() => ({error: r.status + ' ' + r.statusText}));
  if (!r.ok) throw new Error(out.error || r.statusText);
  return out;
}

// act runs a button's request and says how it went.
async function act(button, url, body) {
  button.disabled = true;
  try {
    const out = await post(url, body);
    flash('ok', out.ok || 'done');
    return out;
  } catch (e) {
    flash('error', e.message);
    return null;
  } finally {
    button.disabled = false;
  }
}

// debounce runs f at most once per wait, after the last call.
function debounce(f, wait) {
  let t = null;
  return () => { clearTimeout(t); t = setTimeout(f, wait); };
}

// ---- the live feed: one EventSource for the view on screen ----

let feed = null;
let viewTimers = [];

function openFeed(params, onMsg, onReady) {
  closeFeed();
  const es = new EventSource('/api/events?' + new URLSearchParams(params));
  feed = es;
  es.addEventListener('ready', () => { liveDot.dataset.live = 'on'; liveDot.title = 'live feed: on'; if (onReady) onReady(); });
  es.addEventListener('msg', e => { try { onMsg(JSON.parse(e.data)); } catch (err) { console.error(err); } });
  es.onerror = () => { liveDot.dataset.live = 'off'; liveDot.title = 'live feed: reconnecting'; };
}

function closeFeed() {
  if (feed) feed.close();
  feed = null;
  liveDot.dataset.live = 'off';
  liveDot.title = 'live feed: off';
}

function every(f, wait) { viewTimers.push(setInterval(f, wait)); }

// ---- routing ----

const routes = [
  [/^#\/?$/, 'turns', () => showTurns()],
  [/^#\/turn\/([^/]+)$/, 'turns', m => showTurn(decodeURIComponent(m[1]))],
  [/^#\/workflows$/, 'workflows', () => showWorkflows()],
  [/^#\/workflow\/([^/]+)\/([^/]+)$/, 'workflows', m => showWorkflow(decodeURIComponent(m[1]), decodeURIComponent(m[2]))],
  [/^#\/jobs$/, 'jobs', () => showJobs()],
  [/^#\/nodes$/, 'nodes', () => showNodes()],
];

function route() {
  closeFeed();
  viewTimers.forEach(clearInterval);
  viewTimers = [];
  const hash = location.hash || '#/';
  for (const [re, nav, show] of routes) {
    const m = hash.match(re);
    if (!m) continue;
    document.querySelectorAll('nav a').forEach(a => a.classList.toggle('here', a.dataset.nav === nav));
    view.replaceChildren();
    show(m);
    return;
  }
  view.replaceChildren(el('p', {class: 'empty'}, 'No such view: ' + hash));
}


// ---- turns ----

const turnFilters = {state: '', agent: '', kind: ''};

function showTurns() {
  const rows = new Map();
  const tbody = el('tbody');
  const count = el('span', {class: 'dim'});
  const agents = el('datalist', {id: 'agents'});
  const filter = (name, node) => {
    node.value = turnFilters[name];
    node.addEventListener('input', () => { turnFilters[name] = node.value; render(); });
    return node;
  };
  const states = ['', 'running', 'queued', 'completed', 'terminated', 'step_limit', 'aborted', 'failed'];
  view.append(
    el('h1', {}, 'Turns'),
    el('div', {class: 'toolbar'},
      filter('state', el('select', {id: 'f-state', 'aria-label': 'state'}, states.map(s => el('option', {value: s}, s || 'any state')))),
      filter('kind', el('select', {id: 'f-kind', 'aria-label': 'kind'}, ['', 'main', 'job', 'task', 'mcp'].map(s => el('option', {value: s}, s || 'any kind')))),
      filter('agent', el('input', {id: 'f-agent', placeholder: 'agent', list: 'agents', 'aria-label': 'agent'})),
      agents, count),
    el('table', {id: 'turns'},
      el('thead', {}, el('tr', {}, ['turn', 'agent', 'kind', 'state', 'node', 'steps', 'calls', 'age', ''].map((h, i) => el('th', {class: i === 5 || i === 6 ? 'num' : ''}, h)))),
      tbody));

  function render() {
    const list = [...rows.values()].sort((a, b) => (b.created || '').localeCompare(a.created || ''));
    const shown = list.filter(r => (!turnFilters.state || r.state === turnFilters.state) &&
      (!turnFilters.kind || r.kind === turnFilters.kind) &&
      (!turnFilters.agent || (r.agent || '').includes(turnFilters.agent)));
    tbody.replaceChildren(...shown.map(r => el('tr', {class: 'link', 'data-turn': r.turn_id, 'data-state': r.state, onclick: () => { location.hash = '#/turn/' + encodeURIComponent(r.turn_id); }},
      el('td', {class: 'id'}, el('a', {href: '#/turn/' + encodeURIComponent(r.turn_id)}, r.turn_id)),
      el('td', {}, r.agent || '–'),
      el('td', {}, r.kind || 'main'),
      el('td', {}, stateTag(r.state)),
      el('td', {class: 'mono'}, r.node || '–'),
      el('td', {class: 'num'}, r.step ?? ''),
      el('td', {class: 'num'}, r.calls ?? '–'),
      el('td', {class: 'age', 'data-t': r.created}, ago(r.created)),
      el('td', {class: 'dim wrap'}, r.workflow_id ? 'workflow ' + r.workflow_id : (r.error || '')))));
    if (!shown.length) tbody.append(el('tr', {}, el('td', {colspan: 9, class: 'dim'}, rows.size ? 'No turn matches the filters.' : 'No turns on this bus yet.')));
    count.textContent = shown.length + ' of ' + rows.size;
    agents.replaceChildren(...[...new Set(list.map(r => r.agent).filter(Boolean))].map(a => el('option', {value: a})));
  }

  const load = () => getJSON('/api/turns').then(list => {
    for (const r of list) rows.set(r.turn_id, Object.assign(rows.get(r.turn_id) || {}, r));
    render();
  }).catch(e => flash('error', e.message));

  openFeed({scope: 'turns'}, m => {
    if (m.kind !== 'status' || !m.status || m.name === 'beat') return;
    const st = m.status;
    let r = rows.get(m.turn_id);
    if (!r) { r = {turn_id: m.turn_id, created: st.time || m.time, calls: 0}; rows.set(m.turn_id, r); }
    Object.assign(r, {state: st.state, step: st.step, updated: st.time});
    if (st.node) r.node = st.node;
    if (st.agent) r.agent = st.agent;
    if (st.kind) r.kind = st.kind;
    if (m.name === 'done') r.calls = (st.calls || []).length + (st.calls_omitted || 0);
    else if (st.calls && st.calls.length && typeof r.calls === 'number') r.calls += st.calls.length;
    if (st.error) r.error = st.error.split('\n')[0];
    render();
  }, load);
  every(() => tbody.querySelectorAll('td.age').forEach(td => { td.textContent = ago(td.dataset.t); }), 1000);
}

// ---- one turn ----

// maxStreamed bounds the text a page keeps of one step as it streams (the console's
// bound on a text it serves).
const maxStreamed = 32 << 10;

function showTurn(id) {
  // streams holds, per model step not in the transcript yet, the text heard as the
  // model writes it; the step's whole text from the transcript replaces it once stored.
  const T = {id, record: null, items: [], modes: {}, held: new Map(), live: new Map(), order: new Map(), status: null, done: null, nodes: [], open: new Set(), stepNodes: new Map(),
    streams: new Map(), stored: 0, final: false};
  const head = el('div');
  const heldBox = el('div', {id: 'held'});
  const timeline = el('div', {id: 'timeline'});
  view.append(head, heldBox, timeline);

  let loading = false, again = false;
  const load = async () => {
    if (loading) { again = true; return; }
    loading = true;
    const over = ended(turnState()); // read after the end, the transcript is final
    try {
      const v = await getJSON('/api/turn?id=' + encodeURIComponent(id));
      T.final = over;
      T.record = v.record; T.items = v.items || []; T.modes = v.modes || {};
      // How each call ran, stored with its output (its "ran"), and the repair rungs its
      // arguments needed, with the call: what a page open while the turn ran learned from
      // its statuses, for a page opened after (its bars, durations, labels and repair
      // marks). A record heard live is kept.
      const rungs = new Map(T.items.filter(it => it.kind === 'function_call' && it.rungs).map(it => [it.call_id, it.rungs]));
      for (const it of T.items) {
        if (it.kind !== 'function_call_output' || !it.ran) continue;
        const f = fact(it.call_id);
        if (!f.record) f.record = {call_id: it.call_id, ...it.ran, rungs: rungs.get(it.call_id)};
      }
      for (const h of v.held || []) if (!T.live.get(h.call_id)?.decided) T.held.set(h.call_id, h);
      render();
      for (const n of T.streams.keys()) if (n <= T.stored) T.streams.delete(n); // in the transcript now
    } catch (e) {
      if (!T.record && !T.live.size) timeline.replaceChildren(el('p', {class: 'empty', id: 'turn-missing'}, e.message + ' (yet: this page shows it once it starts)'));
      else if (T.record) flash('error', 'reading the turn: ' + e.message);
    } finally {
      loading = false;
      if (again) { again = false; load(); }
    }
  };
  const reload = debounce(load, 120);
  const fact = id => { let f = T.live.get(id); if (!f) { f = {}; T.live.set(id, f); } return f; };
  const known = id => T.items.some(it => it.call_id === id && it.kind === 'function_call');

  openFeed({scope: 'turn', id}, m => {
    switch (m.kind) {
    case 'status': {
      const st = m.status;
      if (m.name === 'beat') { T.status = Object.assign({}, T.status || {}, {node: st.node}); renderHead(); return; }
      T.status = st;
      // A step's status names the node that ran it (a resumed turn's started status
      // names the node that takes it on, at the step it resumes from).
      if (st.node && m.name === 'step' && st.step > 0) T.stepNodes.set(st.step, st.node);
      // A status lists its calls in the model's order: the calls heard of first (a
      // host's events of parallel calls come in any order) take their places by it.
      for (const c of st.calls || []) {
        Object.assign(fact(c.call_id), {record: c, outcome: c.outcome});
        if (!T.order.has(c.call_id)) T.order.set(c.call_id, T.order.size);
      }
      if (m.name === 'done') T.done = st;
      if (st.resumed) T.nodes.push(st.resumed);
      reload();
      break;
    }
    case 'evt': {
      const f = fact(m.call_id), ev = m.event;
      if (ev.kind === 'started') { f.started = ev.time; f.label = ev.label || f.label; if (!f.outcome || f.outcome === 'held') f.outcome = 'running'; }
      else if (ev.kind === 'completed') { f.label = ev.label || f.label; f.ended = f.ended || ev.time; }
      else if (ev.label) f.progress = ev.label;
      if (!known(m.call_id)) reload();
      break;
    }
    case 'res': {
      const f = fact(m.call_id);
      f.outcome = m.reply.outcome; f.error = m.reply.error; f.ended = f.ended || m.time;
      if (m.reply.label) f.label = m.reply.label;
      T.held.delete(m.call_id);
      break;
    }
    case 'approval':
      T.held.set(m.call_id, m.approval);
      fact(m.call_id).outcome = 'held';
      if (!known(m.call_id)) reload();
      break;
    case 'approve':
      if (m.decision && m.decision.decision) { T.held.delete(m.call_id); fact(m.call_id).decided = m.decision; }
      break;
    case 'abort':
      T.abort = m.abort;
      break;
    case 'text':
      streamed(m.text);
      return;
    }
    render();
  }, load);

  // streamed adds a piece of a step's text as the model writes it: appended in place to
  // the step's text on the page, once that is there; the timeline is built again only
  // for a step's first piece. Pieces of the next message of the same response go on a
  // line of their own, as the transcript joins them; a piece missed (its seq skipped)
  // is marked. A seq that goes back is the step written again, by the node that took
  // the turn over (its pieces are counted afresh): what streamed before is dropped.
  function streamed(d) {
    if (!d || !(d.step > T.stored)) return; // a step the transcript read has already
    let s = T.streams.get(d.step);
    if (s && d.seq <= s.seq) { s.node = null; s = null; }
    if (!s) { s = {text: '', item: d.item, seq: 0, clipped: false, node: null}; T.streams.set(d.step, s); }
    if (s.clipped) return;
    let piece = d.text || '';
    if (s.text && d.item !== s.item) piece = '\n' + piece;
    if (s.seq && d.seq !== s.seq + 1) piece = ' … ' + piece;
    s.item = d.item; s.seq = d.seq;
    if (s.text.length + piece.length > maxStreamed) {
      piece = piece.slice(0, Math.max(0, maxStreamed - s.text.length)) + '\n… (more as the model writes it)';
      s.clipped = true;
    }
    s.text += piece;
    if (s.node && s.node.isConnected) s.node.append(piece);
    else renderTimeline();
  }
  // Bars of running calls grow with the clock; nothing else changes between messages.
  // A selection in the timeline (someone copying a result) is left alone.
  every(() => {
    const growing = !ended(turnState()) && [...T.live.values()].some(f => f.outcome === 'running');
    const sel = window.getSelection();
    if (growing && T.record && !(sel && !sel.isCollapsed && timeline.contains(sel.anchorNode))) renderTimeline();
    renderHead();
  }, 500);

  function turnState() {
    if (T.done) return T.done.state;
    if (T.status && T.status.state) return T.status.state;
    return T.record ? T.record.state : '';
  }

  function render() { renderHead(); renderHeld(); renderTimeline(); }

  // The head and the held calls are built once and updated in place, so that a
  // reason being typed survives the live updates.
  const title = el('h1', {}, 'Turn ', el('span', {class: 'id'}, id), ' ');
  const facts = el('dl', {class: 'facts'});
  const abortReason = el('input', {class: 'reason', id: 'abort-reason', placeholder: 'reason (recorded with the abort)'});
  const actions = el('div', {class: 'toolbar'}, abortReason,
    el('button', {class: 'danger', id: 'abort', onclick: e => act(e.target, '/api/abort', {turn_id: id, reason: abortReason.value})}, 'Abort'));
  head.append(title, facts, actions);

  function renderHead() {
    const rec = T.record, spec = rec ? rec.spec : {};
    const state = turnState();
    const node = (T.status && T.status.node) || (rec && rec.owner) || '';
    title.replaceChildren('Turn ', el('span', {class: 'id'}, id), ' ', stateTag(state, 'turn-state'));
    facts.replaceChildren(...[['agent', spec.agent || '–'], ['kind', spec.kind || 'main'], ['node', node || '–'],
      ['step', (T.status ? T.status.step : rec && rec.step) ?? '–'], ['model', spec.model || (spec.kind === 'mcp' ? "the MCP client's" : 'script')],
      ['created', stamp(rec && rec.created)], ['age', ago(rec && rec.created)],
      ...(spec.workflow_id ? [['workflow', el('a', {href: '#/workflow/' + encodeURIComponent(spec.agent) + '/' + encodeURIComponent(spec.workflow_id)}, spec.workflow_id + ' / ' + spec.task_id)]] : []),
      ...(spec.parent_turn_id ? [['parent', el('a', {href: '#/turn/' + encodeURIComponent(spec.parent_turn_id)}, spec.parent_turn_id)]] : []),
    ].map(([k, v]) => el('div', {}, el('dt', {}, k), el('dd', {class: 'mono'}, v))));
    actions.hidden = ended(state);
  }

  const heldBoxes = new Map();
  function renderHeld() {
    for (const [cid, box] of heldBoxes) if (!T.held.has(cid)) { box.remove(); heldBoxes.delete(cid); }
    for (const req of T.held.values()) {
      if (heldBoxes.has(req.call_id)) continue;
      const reason = el('input', {class: 'reason', placeholder: 'reason (told to the model on a refusal)'});
      const decide = (decision, b) => act(b, '/api/approve', {turn_id: id, call_id: req.call_id, decision, reason: reason.value})
        .then(out => { if (out) { T.held.delete(req.call_id); fact(req.call_id).decided = {decision}; const f = fact(req.call_id); if (decision === 'approve' && (!f.outcome || f.outcome === 'held')) f.outcome = 'running'; render(); } });
      const box = el('div', {class: 'held', 'data-call': req.call_id},
        el('div', {class: 'what'}, el('b', {}, 'Held for approval: '), el('span', {class: 'mono'}, (req.namespace ? req.namespace + '.' : '') + req.tool),
          ' (', req.destructive ? 'destructive' : 'changes things', ')', req.label ? ': ' + req.label : '',
          el('span', {class: 'dim'}, ' · until ' + stamp(req.deadline))),
        el('pre', {class: 'json'}, pretty(req.arguments)),
        el('div', {class: 'toolbar'}, reason,
          el('button', {class: 'go approve', 'data-call': req.call_id, onclick: e => decide('approve', e.target)}, 'Approve'),
          el('button', {class: 'danger refuse', 'data-call': req.call_id, onclick: e => decide('refuse', e.target)}, 'Refuse')));
      heldBoxes.set(req.call_id, box);
      heldBox.append(box);
    }
  }

  // steps reads the transcript into model steps (each with its text and calls),
  // resumes between them, the prompt, and the outputs of the calls.
  function steps() {
    const out = [], outputs = new Map();
    let cur = null, prompt = '', usage = null;
    for (const it of T.items) {
      if (it.kind === 'note') {
        const n = it.note || {};
        if (n.type === 'toolbus.resume') { out.push({resume: n}); cur = null; }
        if (n.type === 'toolbus.usage') usage = n;
        continue;
      }
      if (it.kind === 'message' && it.role === 'user') { if (!prompt) prompt = it.text; continue; }
      if (it.kind === 'function_call_output') { outputs.set(it.call_id, it); if (cur) cur.closed = true; continue; }
      if (it.kind === 'message' || it.kind === 'function_call' || it.kind === 'reasoning') {
        if (!cur || cur.closed) { cur = {text: '', calls: [], usage}; usage = null; out.push(cur); }
        if (it.kind === 'message' && it.text) cur.text += (cur.text ? '\n' : '') + it.text;
        if (it.kind === 'function_call') cur.calls.push(it);
      }
    }
    T.stored = out.filter(s => !s.resume).length; // the model steps in the transcript
    // Calls heard on the feed that the transcript read has not caught up with.
    const inT = new Set(out.flatMap(s => (s.calls || []).map(c => c.call_id)));
    const extra = [...T.live.entries()].filter(([cid, f]) => !inT.has(cid) && (f.started || f.outcome === 'held' || f.record));
    const rank = cid => T.order.has(cid) ? T.order.get(cid) : Infinity;
    extra.sort((a, b) => rank(a[0]) - rank(b[0])); // stable: calls no status named yet keep the order heard
    let pend = null;
    if (extra.length) {
      pend = {text: '', calls: [], pending: true};
      for (const [cid, f] of extra) pend.calls.push({call_id: cid, name: (f.record && f.record.tool) || (T.held.get(cid) || {}).tool || f.label || 'call'});
      out.push(pend);
    }
    // Text of steps not stored yet, as it streams: the next step's goes with the calls
    // it has started.
    const live = [...T.streams.entries()].filter(([n]) => n > T.stored).sort((a, b) => a[0] - b[0]);
    for (const [n, st] of live) {
      if (pend && n === T.stored + 1) Object.assign(pend, {text: st.text, stream: st});
      else out.push({text: st.text, calls: [], pending: true, stream: st});
    }
    if (!live.length && T.status && T.status.text && !ended(turnState())) {
      const last = out.filter(s => !s.resume).pop();
      if (!last || (last.closed && !last.text.includes(T.status.text))) out.push({text: T.status.text, calls: [], pending: true});
    }
    return {steps: out, outputs, prompt};
  }

  function outcomeOf(call, outputs) {
    const f = T.live.get(call.call_id) || {};
    if (f.outcome) return f.outcome;
    if (T.held.has(call.call_id)) return 'held';
    const b = T.record && (T.record.batch || []).find(c => c.call_id === call.call_id);
    if (b && b.outcome) return b.outcome;
    const o = outputs.get(call.call_id);
    if (o) return o.is_error ? 'error' : 'ok';
    return ended(turnState()) ? 'not_started' : 'waiting';
  }

  function renderTimeline() {
    const {steps: list, outputs, prompt} = steps();
    const rec = T.record;
    // Before the first resume the turn ran on that resume's previous owner (unknown
    // after a hand-back, which goes through the intake), or on its owner if it never moved.
    const moves = (rec && rec.resumes) || [];
    let node = rec ? (moves.length ? (moves[0].from || '') : (rec.owner || '')) : '';
    const kids = [];
    if (prompt) kids.push(el('div', {class: 'prompt'}, prompt));
    let n = 0;
    for (const s of list) {
      if (s.resume) {
        node = s.resume.node;
        kids.push(el('div', {class: 'resume'}, '⟳ resumed on ', el('b', {class: 'mono'}, s.resume.node),
          s.resume.from ? ' (from ' + s.resume.from + ')' : '', s.resume.why ? ': ' + s.resume.why : '', el('span', {class: 'dim'}, ' · ' + stamp(s.resume.at))));
        continue;
      }
      n++;
      const stepNode = T.stepNodes.get(n) || node;
      const tokens = s.usage ? s.usage.input_tokens + ' in · ' + s.usage.output_tokens + ' out' : '';
      const box = el('section', {class: 'step', 'data-step': n, 'data-pending': s.pending ? '' : null},
        el('div', {class: 'step-head'}, el('b', {}, 'step ' + n),
          s.pending ? el('span', {}, s.stream && T.final ? 'cut off: not in the transcript' : s.stream ? 'streaming' : 'in progress') : null,
          stepNode ? el('span', {class: 'mono'}, 'on ' + stepNode) : null,
          s.calls.length ? el('span', {}, s.calls.length + (s.calls.length === 1 ? ' call' : ' calls')) : null,
          tokens ? el('span', {}, tokens) : null));
      if (s.stream) {
        // Built with the text so far; the pieces to come are appended to it in place.
        s.stream.node = el('div', {class: 'say', 'data-streaming': ''}, s.text);
        box.append(s.stream.node);
      } else if (s.text) box.append(el('div', {class: 'say'}, s.text));
      if (s.calls.length) {
        const r = runs(s.calls, outputs);
        if (r.span) box.firstChild.append(el('span', {class: 'axis', title: 'the bars\' time axis'}, 'axis 0–' + ms(r.span * 1e6)));
        box.append(...r.nodes);
      }
      kids.push(box);
    }
    const st = T.done || (ended(turnState()) ? {state: turnState(), error: rec && rec.error} : null);
    if (st) kids.push(el('div', {class: 'end', id: 'turn-end'}, el('b', {}, 'ended: '), stateTag(st.state), st.error ? '\n' + st.error : ''));
    if (!kids.length) kids.push(el('p', {class: 'empty'}, 'Nothing yet: the turn has not answered.'));
    timeline.replaceChildren(...kids);
  }

  // runs lays out one step's calls: consecutive parallel calls make one run, on a lane
  // each; a sequential call is a run of its own, a barrier before and after it. The
  // transcript records each call's run (c.run); today's tool modes place the calls of
  // a transcript that does not (an earlier build's) and refused calls. Bars
  // sit on the batch's time axis: from the feed's start and end times when the page
  // saw the calls run, otherwise from their latencies (a run starts when the one
  // before it ended).
  function runs(calls, outputs) {
    const groups = [];
    for (const c of calls) {
      // The record names the tool that ran (a bare name the model gave may be namespaced).
      const ns = c.namespace || (c.run || {}).namespace || (T.live.get(c.call_id)?.record || {}).namespace;
      const name = (ns ? ns + '.' : '') + c.name;
      const seq = c.run ? !!c.run.sequential : T.modes[name] === 'sequential';
      const last = groups[groups.length - 1];
      const same = c.run && last && last.n ? c.run.n === last.n : !seq && last && !last.seq;
      if (same) last.calls.push(c);
      else groups.push({seq, n: c.run ? c.run.n : 0, calls: [c]});
    }
    const now = Date.now();
    const live = calls.map(c => T.live.get(c.call_id) || {});
    const timed = live.every(f => f.started);
    const span = new Map();
    if (timed) {
      const t0 = Math.min(...live.map(f => new Date(f.started).getTime()));
      for (const [i, c] of calls.entries()) {
        const f = live[i];
        const a = new Date(f.started).getTime() - t0;
        const dur = f.record && f.record.latency_ns ? f.record.latency_ns / 1e6 : null;
        const b = f.ended ? new Date(f.ended).getTime() - t0 : (dur !== null ? a + dur : (ended(turnState()) ? a : now - t0));
        span.set(c.call_id, [a, Math.max(b, a)]);
      }
    } else {
      let start = 0;
      for (const g of groups) {
        let longest = 0;
        for (const c of g.calls) {
          const f = T.live.get(c.call_id) || {};
          const d = f.record ? (f.record.latency_ns || f.record.duration_ns || 0) / 1e6 : 0;
          const len = d || 1;
          span.set(c.call_id, [start, start + len]);
          longest = Math.max(longest, len);
        }
        start += longest;
      }
    }
    const total = Math.max(1, ...[...span.values()].map(s => s[1]));
    // An axis in milliseconds when the bars are timed; calls laid out by order alone have none.
    const measured = timed || calls.some(c => (T.live.get(c.call_id) || {}).record);
    return {span: measured ? total : 0, nodes: groups.map(g => el('div', {class: 'run ' + (g.seq ? 'sequential' : 'parallel')},
      el('div', {class: 'run-label'}, g.seq ? 'sequential · barrier' : (g.calls.length > 1 ? 'parallel × ' + g.calls.length : 'parallel')),
      g.calls.map(c => lane(c, outputs, span.get(c.call_id), total))))};
  }

  function lane(c, outputs, [a, b], total) {
    const f = T.live.get(c.call_id) || {};
    const r = f.record || {};
    const outcome = outcomeOf(c, outputs);
    const bar = el('div', {class: 'bar'});
    bar.style.left = (100 * a / total).toFixed(2) + '%';
    bar.style.width = Math.max(0.4, 100 * (b - a) / total).toFixed(2) + '%';
    const ns = c.namespace || (c.run || {}).namespace || r.namespace;
    const name = (ns ? ns + '.' : '') + c.name;
    const rungs = (r.rungs || c.rungs || []).filter(x => x !== 'as_is'); // as_is: nothing to repair
    const dur = r.duration_ns ? ms(r.duration_ns) : (f.started && !f.ended && outcome === 'running' ? ms((Date.now() - new Date(f.started).getTime()) * 1e6) : '');
    const toggle = () => { T.open.has(c.call_id) ? T.open.delete(c.call_id) : T.open.add(c.call_id); renderTimeline(); document.querySelector(`.lane[data-call="${CSS.escape(c.call_id)}"]`)?.focus(); };
    const row = el('div', {class: 'lane', 'data-call': c.call_id, 'data-outcome': outcome, title: 'call ' + c.call_id + ': arguments and result',
      tabindex: 0, role: 'button', 'aria-expanded': T.open.has(c.call_id) ? 'true' : 'false',
      onclick: e => { if (!e.target.closest('.detail')) toggle(); },
      onkeydown: e => { if ((e.key === 'Enter' || e.key === ' ') && e.target === e.currentTarget) { e.preventDefault(); toggle(); } }},
      el('span', {class: 'lname'}, name),
      el('div', {class: 'track'}, bar),
      el('span', {class: 'lmeta'}, el('span', {class: 'outcome', 'data-outcome': outcome}, outcome),
        // One call, the turn going on: toolbus abort -call.
        (outcome === 'running' || outcome === 'held') && !ended(turnState()) ? el('button', {class: 'cancel', 'data-call': c.call_id, title: 'cancel this call; the turn goes on',
          onclick: e => { e.stopPropagation(); act(e.target, '/api/abort', {turn_id: id, call_id: c.call_id}); }}, 'Cancel') : null,
        dur ? dur + ' · ' : '',
        r.label || f.label || f.progress || (T.held.has(c.call_id) ? 'waiting for approval: ' + (T.held.get(c.call_id).label || c.name) : ''), rungs.length ? el('span', {class: 'rung', title: 'repair rungs'}, '⚒ ' + rungs.join(', ')) : null,
        c.truncated ? el('span', {class: 'rung'}, 'truncated') : null));
    if (T.open.has(c.call_id)) {
      const o = outputs.get(c.call_id);
      row.append(el('div', {class: 'detail'},
        el('div', {class: 'k'}, 'call ', el('span', {class: 'mono'}, c.call_id), r.latency_ns ? ' · latency ' + ms(r.latency_ns) : ''),
        el('div', {class: 'k'}, 'arguments'), el('pre', {class: 'json'}, c.arguments !== undefined ? pretty(c.arguments || '{}') : '(not read yet)'),
        c.repaired ? [el('div', {class: 'k'}, 'arguments as repaired (what the tool got)'), el('pre', {class: 'json repaired'}, pretty(c.repaired))] : null,
        el('div', {class: 'k'}, 'result'), el('pre', {}, o ? (o.output || '(no text)') + (o.media ? '\n[' + o.media + ' non-text part(s)]' : '') : (f.error || '(none yet)')),
        (r.error || f.error) ? [el('div', {class: 'k'}, 'error'), el('pre', {}, r.error || f.error)] : null));
    }
    return row;
  }
}

// ---- workflows ----

function showWorkflows() {
  const tbody = el('tbody');
  view.append(el('h1', {}, 'Workflows'),
    el('table', {id: 'workflows'},
      el('thead', {}, el('tr', {}, ['workflow', 'agent', 'state', 'tasks', 'created', 'took', 'title'].map(h => el('th', {}, h)))),
      tbody));
  const load = () => getJSON('/api/workflows').then(list => {
    tbody.replaceChildren(...list.map(wf => {
      const done = wf.tasks.filter(t => t.state === 'done').length;
      const href = '#/workflow/' + encodeURIComponent(wf.agent) + '/' + encodeURIComponent(wf.workflow_id);
      const took = wf.ended ? ms((new Date(wf.ended) - new Date(wf.created)) * 1e6) : '';
      return el('tr', {class: 'link', 'data-workflow': wf.workflow_id, 'data-state': wf.state, onclick: () => { location.hash = href; }},
        el('td', {class: 'id'}, el('a', {href}, wf.workflow_id)), el('td', {}, wf.agent), el('td', {}, stateTag(wf.state)),
        el('td', {}, done + ' / ' + wf.tasks.length + ' done'), el('td', {}, stamp(wf.created)), el('td', {}, took), el('td', {class: 'wrap'}, wf.title));
    }));
    if (!list.length) tbody.append(el('tr', {}, el('td', {colspan: 7, class: 'dim'}, 'No workflows on this bus yet.')));
  }).catch(e => flash('error', e.message));
  const reload = debounce(load, 250);
  // A task turn's start or end is a workflow's step: read the list again.
  openFeed({scope: 'turns'}, m => { if (m.kind === 'status' && m.status.kind === 'task' && m.name !== 'beat') reload(); }, load);
}

function showWorkflow(agent, id) {
  let wf = null;
  const turns = new Map(); // task turn id -> latest status
  const head = el('div'), graph = el('div', {class: 'graph', id: 'graph'}), tasks = el('div');
  view.append(head, graph, el('h2', {}, 'Tasks'), tasks);
  const load = () => getJSON('/api/workflow?agent=' + encodeURIComponent(agent) + '&id=' + encodeURIComponent(id))
    .then(doc => { take(doc); render(); }).catch(e => view.replaceChildren(el('h1', {}, 'Workflow ' + id), el('p', {class: 'empty'}, e.message)));
  // take keeps the newest revision: the read the feed's ready starts may answer after
  // the feed brought a later one (the workflow's end), which it must not undo.
  const take = doc => {
    const older = wf && (new Date(doc.updated) < new Date(wf.updated) || (ended(wf.state) && !ended(doc.state)));
    if (!older) wf = doc;
  };
  openFeed({scope: 'workflow', agent, id}, m => {
    if (m.kind === 'workflow') { take(m.workflow); render(); return; }
    if (m.kind === 'status' && m.name !== 'beat') { turns.set(m.turn_id, m.status); render(); }
  }, load);

  // The cancel's reason and button are made once, so that a revision arriving while a
  // reason is typed leaves it be.
  const reason = el('input', {class: 'reason', placeholder: 'reason (recorded with the workflow)'});
  const actions = el('div', {class: 'toolbar'}, reason,
    el('button', {class: 'danger', id: 'wf-cancel', onclick: e => act(e.target, '/api/workflow/cancel', {agent, workflow_id: id, reason: reason.value})
      .then(out => { if (out && out.workflow_id) { take(out); render(); } })}, 'Cancel workflow'));
  const title = el('h1', {}, 'Workflow ', el('span', {class: 'id'}, id)), facts = el('dl', {class: 'facts'});
  actions.hidden = true; // until the document says it runs
  head.append(title, facts, actions);

  function render() {
    if (!wf) return;
    const done = wf.tasks.filter(t => t.state === 'done').length;
    title.replaceChildren('Workflow ', el('span', {class: 'id'}, wf.workflow_id), ' ', stateTag(wf.state, 'wf-state'));
    facts.replaceChildren(...[['title', wf.title], ['agent', wf.agent], ['tasks', done + ' / ' + wf.tasks.length + ' done'],
      ['created', stamp(wf.created)], ['ended', stamp(wf.ended)], ...(wf.parent_turn_id ? [['parent', el('a', {href: '#/turn/' + wf.parent_turn_id}, wf.parent_turn_id)]] : []),
      ...(wf.error ? [['error', wf.error]] : [])].map(([k, v]) => el('div', {}, el('dt', {}, k), el('dd', {}, v))));
    actions.hidden = ended(wf.state);
    drawGraph();
    tasks.replaceChildren(el('table', {id: 'tasks'},
      el('thead', {}, el('tr', {}, ['task', 'state', 'depends on', 'attempts', 'result or error'].map(h => el('th', {}, h)))),
      el('tbody', {}, wf.tasks.map(t => el('tr', {'data-task': t.task_id, 'data-state': t.state, id: 'task-' + t.task_id},
        el('td', {class: 'id'}, t.task_id), el('td', {}, stateTag(t.state)), el('td', {class: 'mono'}, (t.depends_on || []).join(', ') || '–'),
        el('td', {class: 'wrap'}, (t.attempts || []).map(a => el('div', {},
          el('a', {class: 'mono', href: '#/turn/' + encodeURIComponent(a.turn_id)}, '#' + a.attempt), ' ',
          a.outcome ? el('span', {class: 'outcome', 'data-outcome': a.outcome === 'accepted' ? 'ok' : 'error'}, a.outcome) : liveAttempt(a.turn_id),
          a.reason ? el('span', {class: 'dim'}, ' ' + a.reason) : null))),
        el('td', {class: 'wrap'}, t.result ? el('pre', {class: 'json'}, pretty(t.result)) : (t.error || '')))))));
  }

  function liveAttempt(turn) {
    const st = turns.get(turn);
    if (!st) return el('span', {class: 'outcome', 'data-outcome': 'running'}, 'running');
    return el('span', {class: 'outcome', 'data-outcome': ended(st.state) ? 'ok' : 'running'}, st.state + ' · step ' + st.step + (st.node ? ' · ' + st.node : ''));
  }

  // drawGraph lays the tasks out in columns by depth (a task one column right of its
  // deepest dependency), edges from each dependency to its dependents.
  function drawGraph() {
    const byId = new Map(wf.tasks.map(t => [t.task_id, t]));
    const depth = new Map();
    const d = t => {
      if (depth.has(t.task_id)) return depth.get(t.task_id);
      depth.set(t.task_id, 0);
      const v = Math.max(-1, ...(t.depends_on || []).map(x => byId.has(x) ? d(byId.get(x)) : -1)) + 1;
      depth.set(t.task_id, v);
      return v;
    };
    wf.tasks.forEach(d);
    const cols = [];
    for (const t of wf.tasks) (cols[depth.get(t.task_id)] ||= []).push(t);
    const W = 180, H = 46, GX = 60, GY = 16, P = 8;
    const pos = new Map();
    cols.forEach((col, i) => col.forEach((t, j) => pos.set(t.task_id, {x: P + i * (W + GX), y: P + j * (H + GY)})));
    const width = P * 2 + cols.length * W + (cols.length - 1) * GX;
    const height = P * 2 + Math.max(...cols.map(c => c.length)) * (H + GY) - GY;
    const edges = [], boxes = [];
    for (const t of wf.tasks) {
      const b = pos.get(t.task_id);
      for (const dep of t.depends_on || []) {
        const a = pos.get(dep);
        if (!a) continue;
        const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2, mx = (x1 + x2) / 2;
        edges.push(svg('path', {class: 'edge', d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2 - 6},${y2}`, 'marker-end': 'url(#arrow)'}));
      }
      const attempts = (t.attempts || []).length;
      boxes.push(svg('g', {class: 'task', 'data-task': t.task_id, 'data-state': t.state, transform: `translate(${b.x},${b.y})`,
        onclick: () => document.getElementById('task-' + t.task_id)?.scrollIntoView({block: 'center'})},
        svg('rect', {class: 'box', width: W, height: H, rx: 4}),
        svg('text', {x: 10, y: 19}, t.task_id.length > 22 ? t.task_id.slice(0, 21) + '…' : t.task_id),
        svg('text', {class: 'sub', x: 10, y: 36}, t.state + (attempts ? ' · ' + attempts + (attempts === 1 ? ' attempt' : ' attempts') : ''))));
    }
    graph.replaceChildren(svg('svg', {width, height, viewBox: `0 0 ${width} ${height}`},
      svg('defs', {}, svg('marker', {id: 'arrow', viewBox: '0 0 10 10', refX: 4, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse'},
        svg('path', {d: 'M 0 0 L 10 5 L 0 10 z', class: 'arrowhead', fill: 'currentColor'}))),
      edges, boxes));
  }
}

// ---- jobs and schedules ----

function showJobs() {
  const jobsBody = el('tbody'), schedBody = el('tbody');
  view.append(el('h1', {}, 'Jobs & schedules'), el('h2', {}, 'Background jobs'),
    el('table', {id: 'jobs'}, el('thead', {}, el('tr', {}, ['job', 'agent', 'state', 'node', 'created', 'ended', 'steps', 'calls', 'prompt', ''].map(h => el('th', {}, h)))), jobsBody),
    el('h2', {}, 'Schedules'),
    el('table', {id: 'schedules'}, el('thead', {}, el('tr', {}, ['schedule', 'agent', 'when', 'next firing', 'fired', 'skipped', 'last turn', 'prompt', ''].map(h => el('th', {}, h)))), schedBody));
  const load = () => Promise.all([
    getJSON('/api/jobs').then(list => {
      jobsBody.replaceChildren(...list.map(j => el('tr', {'data-job': j.job_id, 'data-state': j.state},
        el('td', {class: 'id'}, el('a', {href: '#/turn/' + encodeURIComponent(j.job_id)}, j.job_id)), el('td', {}, j.agent), el('td', {}, stateTag(j.state)),
        el('td', {class: 'mono'}, j.node || '–'), el('td', {}, stamp(j.created)), el('td', {}, stamp(j.ended)), el('td', {}, j.steps || ''),
        el('td', {class: 'mono'}, (j.calls || []).map(c => c.tool + (c.outcome !== 'ok' ? ' ' + c.outcome : '') + (c.n > 1 ? ' ×' + c.n : '')).join(', ')),
        el('td', {class: 'wrap'}, (j.prompt || '').slice(0, 120)),
        el('td', {}, ended(j.state) ? '' : el('button', {class: 'danger', onclick: e => act(e.target, '/api/job/cancel', {job_id: j.job_id, reason: 'cancelled from the console'}).then(load)}, 'Cancel')))));
      if (!list.length) jobsBody.append(el('tr', {}, el('td', {colspan: 10, class: 'dim'}, 'No background jobs.')));
    }),
    getJSON('/api/schedules').then(list => {
      schedBody.replaceChildren(...list.map(s => el('tr', {'data-schedule': s.schedule_id},
        el('td', {class: 'id'}, s.schedule_id), el('td', {}, s.agent), el('td', {}, s.when), el('td', {}, s.next ? stamp(s.next) : '–'),
        el('td', {}, s.fired), el('td', {}, s.skipped), el('td', {class: 'id'}, s.last_turn_id ? el('a', {href: '#/turn/' + encodeURIComponent(s.last_turn_id)}, s.last_turn_id) : '–'),
        el('td', {class: 'wrap'}, (s.prompt || '').slice(0, 120)),
        el('td', {}, s.done ? '' : el('button', {class: 'danger', onclick: e => act(e.target, '/api/schedule/remove', {schedule_id: s.schedule_id}).then(load)}, 'Remove')))));
      if (!list.length) schedBody.append(el('tr', {}, el('td', {colspan: 9, class: 'dim'}, 'No schedules.')));
    }),
  ]).catch(e => flash('error', e.message));
  const reload = debounce(load, 300);
  openFeed({scope: 'turns'}, m => { if (m.kind === 'status' && (m.name === 'started' || m.name === 'done')) reload(); }, load);
}

// ---- nodes and categories ----

function showNodes() {
  const body = el('div');
  view.append(el('h1', {}, 'Nodes & categories'), el('div', {class: 'toolbar'}, el('button', {onclick: () => load()}, 'Refresh'),
    el('span', {class: 'dim'}, 'from the categories\' $SRV info and the turn records')), body);
  const load = () => Promise.all([getJSON('/api/nodes'), getJSON('/api/turns').catch(() => [])]).then(([cats, turns]) => {
    const nodes = new Map();
    const node = n => { if (!nodes.has(n)) nodes.set(n, {cats: new Set(), running: 0, turns: 0}); return nodes.get(n); };
    for (const c of cats) for (const h of c.hosts) node(h.node || '(instance ' + h.id + ')').cats.add(c.name);
    for (const t of turns) if (t.node) { const n = node(t.node); n.turns++; if (t.state === 'running') n.running++; }
    body.replaceChildren(
      el('h2', {}, 'Nodes'),
      el('table', {id: 'nodes'}, el('thead', {}, el('tr', {}, ['node', 'hosts', 'running turns', 'turns on record'].map(h => el('th', {}, h)))),
        el('tbody', {}, [...nodes.entries()].sort().map(([n, v]) => el('tr', {'data-node': n}, el('td', {class: 'mono'}, n),
          el('td', {}, el('div', {class: 'chips'}, [...v.cats].sort().map(c => el('span', {class: 'chip'}, c)))), el('td', {class: 'num'}, v.running), el('td', {class: 'num'}, v.turns))))),
      el('h2', {}, 'Categories'),
      el('table', {id: 'categories'}, el('thead', {}, el('tr', {}, ['category', 'hosts', 'tools'].map(h => el('th', {}, h)))),
        el('tbody', {}, cats.map(c => el('tr', {'data-category': c.name}, el('td', {class: 'mono'}, c.name),
          el('td', {class: 'mono'}, c.hosts.map(h => h.node || h.id).join(', ')),
          el('td', {class: 'wrap'}, c.error ? el('div', {class: 'outcome', 'data-outcome': 'error'}, c.error) : null,
            el('div', {class: 'chips'}, c.tools.map(t => el('span', {class: 'chip' + (t.mode === 'sequential' ? ' seq' : '') + (t.destructive ? ' destructive' : '') + (t.read_only ? ' ro' : ''),
              title: t.mode + (t.read_only ? ', read-only' : '') + (t.destructive ? ', destructive' : '') + (t.deferred ? ', deferred' : '') + (t.about ? ': ' + t.about : '')}, t.name)))))))));
  }).catch(e => flash('error', e.message));
  load();
  // Hosts come and go, and one that answers discovery late (a loaded machine) is missed
  // by a read: the page reads again while it is on screen.
  every(load, nodesRefresh);
}

// nodesRefresh is how often the nodes page reads the categories again, in ms.
const nodesRefresh = 5000;

// ---- start ----

window.addEventListener('hashchange', route);
getJSON('/api/info').then(i => { document.getElementById('bus').textContent = i.bus; }).catch(() => {});
route();
