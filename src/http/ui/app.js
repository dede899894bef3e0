// teamster web UI: a single-page application over the agent's HTTP API (/v1/...).
// Pages are routed by path under /ui/ (the agent answers every /ui/... path with this shell),
// kept live with blocking queries (lists) or the event stream (job, allocation and node
// pages), and rendered one table at a time with a single innerHTML assignment.
'use strict';

const TOKEN_KEY = 'teamster.token';
const main = document.getElementById('main');
const banner = document.getElementById('banner');
const liveEl = document.getElementById('live');

// ---------- small helpers ----------

const ESC = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
function esc(v) {
  return v === undefined || v === null ? '' : String(v).replace(/[&<>"']/g, (c) => ESC[c]);
}
function enc(v) { return encodeURIComponent(v); }
function short(id) { return esc(String(id || '').slice(0, 8)); }
function when(ns) {
  if (!ns) return '';
  const d = new Date(Number(ns) / 1e6);
  return isNaN(d) ? '' : d.toISOString().replace('T', ' ').slice(0, 19);
}
function whenIso(s) {
  if (typeof s !== 'string' || !s || s.startsWith('0001-')) return '';
  return s.replace('T', ' ').slice(0, 19);
}
const OK = ['running', 'ready', 'complete', 'successful', 'alive', 'eligible', 'started'];
const WARN = ['pending', 'blocked', 'initializing', 'draining', 'paused', 'ineligible', 'queued', 'starting'];
const BAD = ['failed', 'lost', 'down', 'dead', 'canceled', 'cancelled', 'left', 'unknown', 'disconnected'];
function badge(text, kind) {
  const t = String(text || '');
  const l = t.toLowerCase();
  const k = kind || (OK.includes(l) ? 'ok' : WARN.includes(l) ? 'warn' : BAD.includes(l) ? 'bad' : '');
  return `<span class="badge ${k}">${esc(t)}</span>`;
}
function jobLink(id, ns) {
  const q = ns && ns !== 'default' ? `?namespace=${enc(ns)}` : '';
  return `<a href="/ui/jobs/${enc(id)}${q}" data-nav>${esc(id)}</a>`;
}
function allocLink(id) { return `<a class="mono" href="/ui/allocations/${enc(id)}" data-nav>${short(id)}</a>`; }
function nodeLink(id, name) { return `<a href="/ui/nodes/${enc(id)}" data-nav>${esc(name || String(id).slice(0, 8))}</a>`; }
function table(head, rows, empty) {
  if (!rows.length) return `<p class="muted">${esc(empty || 'None.')}</p>`;
  return `<table><thead><tr>${head.map((h) => `<th>${esc(h)}</th>`).join('')}</tr></thead><tbody>${rows.join('')}</tbody></table>`;
}
function bar(used, total, unit) {
  const pct = total > 0 ? Math.min(100, (100 * used) / total) : 0;
  return `<span class="bar${pct > 85 ? ' high' : ''}" title="${pct.toFixed(0)}%"><i style="width:${pct.toFixed(1)}%"></i></span>` +
    `<span class="barl">${esc(used)} / ${esc(total)} ${esc(unit)}</span>`;
}
// A definition list of `obj`'s keys (sorted unless `inOrder`); a value `{ html }` is markup.
function kv(obj, inOrder) {
  const keys = Object.keys(obj || {});
  if (!inOrder) keys.sort();
  if (!keys.length) return '<p class="muted">None.</p>';
  const val = (v) => (v && typeof v === 'object' && 'html' in v ? v.html : esc(v));
  return `<dl class="kv">${keys.map((k) => `<dt>${esc(k)}</dt><dd class="mono">${val(obj[k])}</dd>`).join('')}</dl>`;
}
function setSection(id, html) {
  const el = document.getElementById(id);
  if (el) el.innerHTML = html;
}
function delay(ms, signal) {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    if (signal) signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
  });
}

// ---------- the API ----------

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

function token() { return localStorage.getItem(TOKEN_KEY) || ''; }

function showBanner(html, error) {
  banner.innerHTML = html;
  banner.className = error ? 'banner error' : 'banner';
  banner.hidden = false;
}
function hideBanner() { banner.hidden = true; }

async function api(path, opts) {
  const o = opts || {};
  const headers = {};
  const t = token();
  if (t) headers['X-Nomad-Token'] = t;
  if (o.body !== undefined) headers['Content-Type'] = 'application/json';
  const r = await fetch(path, {
    method: o.method || 'GET',
    headers,
    body: o.body === undefined ? undefined : JSON.stringify(o.body),
    signal: o.signal,
  });
  if (r.status === 403) {
    const msg = (await r.text()).trim() || 'Permission denied';
    showBanner(`<b>${esc(msg)}</b> (403) for <code>${esc(path.split('?')[0])}</code>. ` +
      (t ? 'The saved ACL token does not allow this: enter another one above.'
        : 'ACLs are on: enter an ACL token (its secret ID) in the field above and press Save.'), true);
    main.querySelectorAll('.loading').forEach((el) => { el.textContent = 'Not shown: the API refused this request (see above).'; });
    throw new ApiError(403, msg);
  }
  if (!r.ok) throw new ApiError(r.status, (await r.text()).trim() || r.statusText);
  const index = Number(r.headers.get('X-Nomad-Index') || 0);
  const ct = r.headers.get('Content-Type') || '';
  const text = await r.text();
  const data = ct.includes('json') && text ? JSON.parse(text) : text;
  return { data, index };
}
async function get(path, signal) { return (await api(path, { signal })).data; }

// Calls `onData` with `path`'s answer now and each time it changes, through blocking queries
// (`?index=N&wait=`), until `signal` aborts. Routes without an index are polled.
async function watch(path, onData, signal) {
  let index = 0;
  let failures = 0;
  while (!signal.aborted) {
    try {
      const sep = path.includes('?') ? '&' : '?';
      const q = index ? `${sep}index=${index}&wait=60s` : '';
      const r = await api(path + q, { signal });
      if (signal.aborted) return;
      if (!index || r.index !== index) await onData(r.data);
      live(true);
      failures = 0;
      if (r.index) index = r.index < index ? 0 : r.index;
      else await delay(3000, signal);
    } catch (e) {
      if (signal.aborted) return;
      failures += 1;
      live(false, e.message);
      await delay(Math.min(15000, 500 * 2 ** failures), signal);
    }
  }
}

// Calls `reload` now and after every event of `topics` (debounced), through the event
// stream; polls every 3 s where the stream is not available (a client-only agent).
async function follow(topics, reload, signal, namespace) {
  let pending = null;
  const kick = () => {
    if (pending) return;
    pending = setTimeout(async () => {
      pending = null;
      if (!signal.aborted) await safe(reload);
    }, 150);
  };
  await safe(reload);
  let failures = 0;
  while (!signal.aborted) {
    try {
      const headers = {};
      if (token()) headers['X-Nomad-Token'] = token();
      const q = topics.map((t) => `topic=${enc(t)}`).join('&') + (namespace ? `&namespace=${enc(namespace)}` : '');
      const r = await fetch(`/v1/event/stream?${q}`, { headers, signal });
      if (!r.ok) throw new ApiError(r.status, await r.text());
      live(true);
      const reader = r.body.getReader();
      const dec = new TextDecoder();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let nl;
        while ((nl = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, nl).trim();
          buf = buf.slice(nl + 1);
          if (!line) continue;
          const frame = JSON.parse(line);
          if (frame.Events && frame.Events.length) kick();
        }
        failures = 0;
      }
    } catch (e) {
      if (signal.aborted) return;
      failures += 1;
      live(false, 'event stream: ' + e.message + ' (polling)');
      await delay(3000, signal);
      await safe(reload);
    }
  }
}

async function safe(fn) {
  try {
    await fn();
  } catch (e) {
    if (e.name !== 'AbortError' && e.status !== 403) showBanner(esc(e.message), true);
  }
}

function live(on, why) {
  liveEl.className = on ? 'live on' : 'live off';
  liveEl.textContent = on ? 'live' : `reconnecting: ${why || ''}`;
}

// ---------- routing ----------

let page = null; // { ctl: AbortController }

function navigate(href, push) {
  const url = new URL(href, location.href);
  if (push) history.pushState(null, '', url.pathname + url.search);
  if (page) page.ctl.abort();
  page = { ctl: new AbortController() };
  hideBanner();
  window.__uiRendered = null;
  const parts = url.pathname.replace(/^\/ui\/?/, '').split('/').filter(Boolean).map(decodeURIComponent);
  const params = url.searchParams;
  const signal = page.ctl.signal;
  const started = performance.now();
  const tab = parts[0] || 'overview';
  document.querySelectorAll('.top nav a').forEach((a) => a.classList.toggle('active', a.dataset.tab === tab));
  let run;
  if (!parts.length) run = overview(signal);
  else if (parts[0] === 'jobs' && parts.length === 1) run = jobs(signal, started, params.get('namespace') || 'default');
  else if (parts[0] === 'jobs') run = job(parts.slice(1).join('/'), params.get('namespace') || 'default', signal);
  else if (parts[0] === 'allocations' && parts[1]) run = alloc(parts[1], signal);
  else if (parts[0] === 'nodes' && parts.length === 1) run = nodes(signal);
  else if (parts[0] === 'nodes') run = node(parts[1], signal);
  else if (parts[0] === 'evaluations') run = evaluations(signal, params.get('namespace') || 'default');
  else if (parts[0] === 'variables' && parts.length === 1) run = variables(signal, params.get('namespace') || 'default');
  else if (parts[0] === 'variables') run = variable(parts.slice(1).join('/'), params.get('namespace') || 'default', params.get('new') === '1', signal);
  else {
    main.innerHTML = `<h1>Not found</h1><p>No page at <code>${esc(url.pathname)}</code>. <a href="/ui/" data-nav>Overview</a></p>`;
    return;
  }
  Promise.resolve(run).catch((e) => { if (!signal.aborted) showBanner(esc(e.message), true); });
}

// Marks the page as rendered (the test and the curious read window.__uiRendered).
function rendered(name, started, extra) {
  const ms = performance.now() - started;
  window.__uiRendered = Object.assign({ page: name, ms }, extra || {});
  document.body.dataset.rendered = name;
}

document.addEventListener('click', (ev) => {
  const a = ev.target.closest('a[data-nav]');
  if (!a || ev.metaKey || ev.ctrlKey || ev.shiftKey || ev.button !== 0) return;
  ev.preventDefault();
  navigate(a.getAttribute('href'), true);
});
window.addEventListener('popstate', () => navigate(location.href, false));

const tokenInput = document.getElementById('token');
tokenInput.value = token();
document.getElementById('token-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const v = tokenInput.value.trim();
  if (v) localStorage.setItem(TOKEN_KEY, v); else localStorage.removeItem(TOKEN_KEY);
  navigate(location.href, false);
});
document.getElementById('token-clear').addEventListener('click', () => {
  tokenInput.value = '';
  localStorage.removeItem(TOKEN_KEY);
  navigate(location.href, false);
});

// A button that acts on a second click within 4 s ("Stop" then "Confirm stop").
function armed(btn, label, action) {
  btn.addEventListener('click', async () => {
    if (!btn.classList.contains('armed')) {
      btn.classList.add('armed');
      const before = btn.textContent;
      btn.textContent = label;
      setTimeout(() => { btn.classList.remove('armed'); btn.textContent = before; }, 4000);
      return;
    }
    btn.disabled = true;
    try { await action(); } catch (e) { if (e.status !== 403) showBanner(esc(e.message), true); }
    btn.disabled = false;
  });
}
async function act(btn, action) {
  btn.disabled = true;
  try { await action(); } catch (e) { if (e.status !== 403) showBanner(esc(e.message), true); }
  btn.disabled = false;
}

// ---------- overview ----------

async function overview(signal) {
  const started = performance.now();
  main.innerHTML = `<h1>Cluster</h1>
    <div class="cards" id="ov-cards"></div>
    <h2>Servers</h2><div id="ov-servers"><p class="muted loading">Loading…</p></div>
    <h2>Clients</h2><div id="ov-clients"><p class="muted loading">Loading…</p></div>
    <h2>Eval broker</h2><div id="ov-broker"><p class="muted loading">Loading…</p></div>`;
  let first = true;
  const servers = async () => {
    const [raft, leader] = await Promise.all([
      get('/v1/operator/raft/configuration', signal), get('/v1/status/leader', signal)]);
    const rows = await Promise.all(raft.Servers.map(async (s) => {
      const [self, sched] = await Promise.all([
        get(`/ui/server/${enc(s.Node)}/self`, signal).catch((e) => ({ error: e.message })),
        get(`/ui/server/${enc(s.Node)}/schedulers`, signal).catch((e) => ({ error: e.message })),
      ]);
      const r = (self.stats && self.stats.raft) || {};
      const workers = (sched.schedulers || []).map((w) =>
        `<span class="badge ${w.status === 'Paused' ? 'warn' : w.status === 'Started' ? 'ok' : 'bad'}" title="${esc(w.id)} · ${esc(w.workload_status)}">${esc(w.status === 'Started' ? 'running' : w.status.toLowerCase())}</span>`).join('');
      const paused = (sched.schedulers || []).filter((w) => w.status === 'Paused').length;
      const total = (sched.schedulers || []).length;
      return `<tr data-server="${esc(s.Node)}"><td><b>${esc(s.Node)}</b></td><td class="mono">${esc(s.Address)}</td>
        <td>${s.Leader || s.Address === leader ? badge('leader', 'leader') : badge('follower')}</td>
        <td>${s.Voter ? 'voter' : 'non-voter'}</td>
        <td class="mono">${esc(r.applied_index || '')}${r.last_log_index ? ` <span class="muted">/ ${esc(r.last_log_index)}</span>` : ''}</td>
        <td class="mono">${esc(r.term || '')}</td>
        <td>${sched.error ? `<span class="reason">${esc(sched.error)}</span>` : `<div class="workers">${workers}</div><span class="muted">${total - paused} running, ${paused} paused</span>`}</td></tr>`;
    }));
    setSection('ov-servers', table(['Server', 'RPC address', 'Role', 'Voter', 'Raft applied / last index', 'Term', 'Scheduler workers'], rows));
    setSection('ov-cards-servers', `<div class="n">${raft.Servers.length}</div><div class="l">servers</div>`);
    const l = raft.Servers.find((s) => s.Leader || s.Address === leader);
    setSection('ov-cards-leader', `<div class="n" id="leader-name">${esc(l ? l.Node : 'none')}</div><div class="l">leader</div>`);
    if (first) { first = false; rendered('overview', started); }
  };
  document.getElementById('ov-cards').innerHTML =
    '<div class="card" id="ov-cards-servers"></div><div class="card" id="ov-cards-leader"></div><div class="card" id="ov-cards-clients"></div><div class="card" id="ov-cards-jobs"></div>';
  const broker = async () => {
    const b = await get('/v1/operator/scheduler/broker', signal);
    const rows = Object.keys(b.ByScheduler || {}).sort().map((k) => {
      const s = b.ByScheduler[k];
      return `<tr><td>${esc(k)}</td><td>${s.Ready}</td><td>${s.Unacked}</td><td>${s.Pending}</td><td>${s.Waiting}</td><td>${s.Cancelable}</td></tr>`;
    });
    setSection('ov-broker', `<div class="cards" style="margin-bottom:8px">
      <div class="card"><div class="n">${b.TotalReady}</div><div class="l">ready</div></div>
      <div class="card"><div class="n">${b.TotalUnacked}</div><div class="l">unacked</div></div>
      <div class="card"><div class="n">${b.TotalBlocked}</div><div class="l">blocked</div></div>
      <div class="card"><div class="n">${b.TotalWaiting}</div><div class="l">waiting</div></div>
      <div class="card"><div class="n">${b.PlanQueueDepth}</div><div class="l">plan queue</div></div>
      <div class="card"><div class="n">${b.Enabled ? 'enabled' : 'disabled'}</div><div class="l">broker</div></div></div>` +
      table(['Scheduler', 'Ready', 'Unacked', 'Pending', 'Waiting', 'Cancelable'], rows));
  };
  const poll = async (fn) => {
    while (!signal.aborted) {
      await safe(fn);
      await delay(3000, signal);
    }
  };
  poll(servers);
  poll(broker);
  watch('/v1/jobs', (jobs) => {
    const running = jobs.filter((j) => j.Status === 'running').length;
    setSection('ov-cards-jobs', `<div class="n">${jobs.length}</div><div class="l">jobs (${running} running)</div>`);
  }, signal);
  watch('/v1/nodes', async (list) => {
    setSection('ov-cards-clients', `<div class="n">${list.length}</div><div class="l">clients</div>`);
    setSection('ov-clients', await clientsTable(list, signal));
  }, signal);
}

// The clients with capacity bars: CPU and memory of their non-terminal allocations against
// what the node offers (the first 100 nodes get bars).
async function clientsTable(list, signal) {
  const detail = await Promise.all(list.slice(0, 100).map(async (n) => {
    try {
      const [full, allocs] = await Promise.all([
        get(`/v1/node/${enc(n.ID)}`, signal), get(`/v1/node/${enc(n.ID)}/allocations`, signal)]);
      let cpu = 0; let mem = 0; let running = 0;
      for (const a of allocs) {
        if (a.DesiredStatus !== 'run' || ['complete', 'failed', 'lost'].includes(a.ClientStatus)) continue;
        running += 1;
        cpu += (a.Resources && a.Resources.CPU) || 0;
        mem += (a.Resources && a.Resources.MemoryMB) || 0;
      }
      const res = full.NodeResources || {};
      return { cpu, mem, running, cpuTotal: (res.Cpu && res.Cpu.CpuShares) || 0, memTotal: (res.Memory && res.Memory.MemoryMB) || 0 };
    } catch (e) {
      return null;
    }
  }));
  const rows = list.map((n, i) => {
    const d = detail[i];
    return `<tr><td>${nodeLink(n.ID, n.Name)}</td><td class="mono">${esc(n.Address)}</td><td>${esc(n.Datacenter)}</td>
      <td>${badge(n.Status)}${n.Drain ? ' ' + badge('draining') : ''}</td><td>${badge(n.SchedulingEligibility)}</td>
      <td>${d ? d.running : ''}</td>
      <td>${d ? bar(d.cpu, d.cpuTotal, 'MHz') : ''}</td><td>${d ? bar(d.mem, d.memTotal, 'MiB') : ''}</td></tr>`;
  });
  return table(['Name', 'Address', 'Datacenter', 'Status', 'Eligibility', 'Allocs', 'CPU', 'Memory'], rows, 'No client has registered.');
}

async function nodes(signal) {
  const started = performance.now();
  main.innerHTML = '<h1>Clients</h1><div id="nodes-table"><p class="muted loading">Loading…</p></div>';
  let first = true;
  watch('/v1/nodes', async (list) => {
    setSection('nodes-table', await clientsTable(list, signal));
    if (first) { first = false; rendered('nodes', started); }
  }, signal);
}

// ---------- namespaces ----------

// A namespace selector (the namespaces the token can see, and `*` for all of them) that
// reloads the page with `?namespace=`.
async function namespaceSelect(id, current, signal) {
  const el = document.getElementById(id);
  let names = ['default'];
  try {
    names = (await get('/v1/namespaces', signal)).map((n) => n.Name);
  } catch (e) {
    // Keep `default`: the list is public, an error here is the agent's.
  }
  if (!names.includes(current) && current !== '*') names.push(current);
  el.innerHTML = names.map((n) => `<option value="${esc(n)}"${n === current ? ' selected' : ''}>${esc(n)}</option>`).join('') +
    `<option value="*"${current === '*' ? ' selected' : ''}>all namespaces</option>`;
  el.addEventListener('change', () => navigate(`${location.pathname}?namespace=${enc(el.value)}`, true));
}

// ---------- jobs ----------

function summaryCell(j) {
  const s = (j.JobSummary && j.JobSummary.Summary) || {};
  const t = { Queued: 0, Starting: 0, Running: 0, Complete: 0, Failed: 0, Lost: 0 };
  for (const g of Object.values(s)) for (const k of Object.keys(t)) t[k] += g[k] || 0;
  const kinds = { Running: 'ok', Starting: 'warn', Queued: 'warn', Failed: 'bad', Lost: 'bad', Complete: '' };
  const parts = Object.keys(t).filter((k) => t[k]).map((k) => `<span class="badge ${kinds[k]}">${k.toLowerCase()} ${t[k]}</span>`);
  const c = j.JobSummary && j.JobSummary.Children;
  if (c && (c.Pending || c.Running || c.Dead)) parts.push(`<span class="muted">children: ${c.Pending} pending, ${c.Running} running, ${c.Dead} dead</span>`);
  return `<span class="summary">${parts.join(' ') || '<span class="muted">no allocations</span>'}</span>`;
}

async function jobs(signal, started, ns) {
  main.innerHTML = `<h1>Jobs <span class="sub" id="jobs-count"></span></h1>
    <div class="actions"><input class="filter" id="jobs-filter" placeholder="Filter by ID prefix or substring" spellcheck="false">
    <label>Namespace <select id="jobs-ns"></select></label></div>
    <div id="jobs-table"><p class="muted loading">Loading…</p></div>`;
  let all = [];
  let first = true;
  const filter = document.getElementById('jobs-filter');
  const draw = () => {
    const t0 = performance.now();
    const f = filter.value.trim().toLowerCase();
    const list = f ? all.filter((j) => j.ID.toLowerCase().includes(f)) : all;
    const rows = list.map((j) => `<tr data-job="${esc(j.ID)}"><td>${jobLink(j.ID, j.Namespace)}</td><td>${esc(j.Namespace)}</td><td>${esc(j.Type)}${j.ParameterizedJob ? ' <span class="muted">parameterized</span>' : ''}${j.Periodic ? ' <span class="muted">periodic</span>' : ''}</td>
      <td>${esc(j.Priority)}</td><td>${badge(j.Stop ? 'stopped' : j.Status)}</td><td>${summaryCell(j)}</td><td>${when(j.SubmitTime)}</td></tr>`);
    setSection('jobs-table', table(['ID', 'Namespace', 'Type', 'Priority', 'Status', 'Allocations', 'Submitted'], rows, 'No jobs.'));
    document.getElementById('jobs-count').textContent = `${list.length} of ${all.length}`;
    return performance.now() - t0;
  };
  filter.addEventListener('input', draw);
  namespaceSelect('jobs-ns', ns, signal);
  watch(`/v1/jobs?namespace=${enc(ns)}`, (list) => {
    all = list.sort((a, b) => (a.ID < b.ID ? -1 : a.ID > b.ID ? 1 : 0));
    const renderMs = draw();
    if (first) { first = false; rendered('jobs', started, { renderMs, rows: all.length }); }
  }, signal).catch(() => {});
}

async function job(id, ns, signal) {
  const started = performance.now();
  const q = `?namespace=${enc(ns)}`;
  const base = `/v1/job/${enc(id)}`;
  main.innerHTML = `<h1>${esc(id)} <span class="sub" id="job-sub"></span></h1>
    <div class="actions" id="job-actions"></div>
    <div id="job-info"></div>
    <div id="job-ui"></div>
    <h2>Task groups</h2><div id="job-groups"></div>
    <h2>Allocations</h2><div id="job-allocs"></div>
    <div id="job-deployments"></div>
    <h2>Evaluations</h2><div id="job-evals"></div>
    <h2>Versions</h2><div id="job-versions"></div>`;
  const actions = document.getElementById('job-actions');
  const edits = {};
  let first = true;
  const reload = async () => {
    const [j, allocs, evals, versions, deployments] = await Promise.all([
      get(base + q, signal), get(`${base}/allocations${q}`, signal), get(`${base}/evaluations${q}`, signal),
      get(`${base}/versions${q}`, signal), get(`${base}/deployments${q}`, signal)]);
    const summary = await get(`${base}/summary${q}`, signal).catch(() => ({ Summary: {} }));
    document.getElementById('job-sub').innerHTML = `${esc(j.Type)} · version ${esc(j.Version)} · ${badge(j.Stop ? 'stopped' : j.Status)}`;
    if (!actions.dataset.ready || actions.dataset.stop !== String(j.Stop)) drawJobActions(j, base, q, actions);
    setSection('job-ui', jobUi(j.UI));
    setSection('job-info', kv({ Namespace: j.Namespace, Priority: j.Priority, Datacenters: (j.Datacenters || []).join(', '), Submitted: when(j.SubmitTime), 'Modify index': j.JobModifyIndex }));
    const groups = (j.TaskGroups || []).map((g) => {
      const s = (summary.Summary || {})[g.Name] || {};
      const tasks = (g.Tasks || []).map((t) => `${esc(t.Name)} <span class="muted">(${esc(t.Driver)}, ${esc(t.Resources && t.Resources.CPU)} MHz, ${esc(t.Resources && t.Resources.MemoryMB)} MiB)</span>`).join('<br>');
      const counts = ['Queued', 'Starting', 'Running', 'Complete', 'Failed', 'Lost'].map((k) => `${k.toLowerCase()} ${s[k] || 0}`).join(' · ');
      const scalable = j.Type === 'service' || j.Type === 'batch';
      return `<tr><td><b>${esc(g.Name)}</b></td><td>${esc(g.Count)}</td><td>${tasks}</td><td class="summary">${counts}</td>
        <td>${scalable && !j.Stop ? `<span class="scale"><input type="number" min="0" value="${esc(g.Name in edits ? edits[g.Name] : g.Count)}" data-group="${esc(g.Name)}"> <button data-scale="${esc(g.Name)}">Scale</button></span>` : ''}</td></tr>`;
    });
    setSection('job-groups', table(['Group', 'Count', 'Tasks', 'Summary', ''], groups));
    // What is typed into a count survives the redraws live updates cause.
    document.querySelectorAll('#job-groups input[data-group]').forEach((input) => {
      input.addEventListener('input', () => { edits[input.dataset.group] = input.value; });
    });
    document.querySelectorAll('#job-groups button[data-scale]').forEach((btn) => {
      btn.addEventListener('click', () => act(btn, async () => {
        const group = btn.dataset.scale;
        const input = document.querySelector(`#job-groups input[data-group="${CSS.escape(group)}"]`);
        const count = Number(input.value);
        if (!Number.isInteger(count) || count < 0) throw new Error('The count must be a whole number, 0 or more.');
        await api(`${base}/scale${q}`, { method: 'POST', body: { Count: count, Target: { Group: group }, Message: 'scaled from the web UI' } });
        delete edits[group];
        showBanner(`Group <b>${esc(group)}</b> scaled to ${count}.`);
      }));
    });
    allocs.sort((a, b) => b.CreateIndex - a.CreateIndex);
    setSection('job-allocs', allocTable(allocs, true));
    if (deployments.length) {
      setSection('job-deployments', '<h2>Deployments</h2>' + table(['ID', 'Version', 'Status', 'Description', 'Groups'], deployments.map((d) =>
        `<tr><td class="mono">${short(d.ID)}</td><td>${esc(d.JobVersion)}</td><td>${badge(d.Status)}</td><td>${esc(d.StatusDescription)}</td>
        <td>${Object.keys(d.TaskGroups || {}).map((g) => { const s = d.TaskGroups[g]; return `${esc(g)}: ${s.HealthyAllocs || 0}/${s.DesiredTotal || 0} healthy${s.DesiredCanaries ? `, ${s.DesiredCanaries} canaries${s.Promoted ? ' (promoted)' : ''}` : ''}`; }).join('<br>')}</td></tr>`)));
    } else setSection('job-deployments', '');
    evals.sort((a, b) => b.CreateIndex - a.CreateIndex);
    setSection('job-evals', evalTable(evals, false));
    setSection('job-versions', table(['Version', 'Stable', 'Submitted', 'Groups'], (versions.Versions || []).map((v) =>
      `<tr><td>${esc(v.Version)}</td><td>${v.Stable ? 'yes' : 'no'}</td><td>${when(v.SubmitTime)}</td>
      <td>${(v.TaskGroups || []).map((g) => `${esc(g.Name)} × ${esc(g.Count)}`).join(', ')}</td></tr>`)));
    if (first) { first = false; rendered('job', started); }
  };
  await follow([`Job:${id}`, `Evaluation:${id}`, `Allocation:${id}`, `Deployment:${id}`], reload, signal, ns);
}

// A job's `ui` block: its description as text and its links; only http(s) links are
// links, anything else is shown as text.
function jobUi(ui) {
  if (!ui) return '';
  const desc = ui.Description ? `<p class="job-description">${esc(ui.Description)}</p>` : '';
  const links = (ui.Links || []).map((l) => {
    const url = l.Url || l.URL || '';
    const label = esc(l.Label || url);
    return /^https?:\/\//i.test(url)
      ? `<a href="${esc(url)}" target="_blank" rel="noopener noreferrer">${label}</a>`
      : `<span title="${esc(url)}">${label}</span>`;
  });
  return desc + (links.length ? `<p class="job-links">${links.join(' · ')}</p>` : '');
}

function drawJobActions(j, base, q, actions) {
  actions.dataset.ready = '1';
  actions.dataset.stop = String(j.Stop);
  if (j.Stop) {
    actions.innerHTML = '<span class="muted">This job is stopped.</span> <button id="job-start">Start again</button>';
    document.getElementById('job-start').addEventListener('click', (ev) => act(ev.target, async () => {
      const full = await get(base + q);
      full.Stop = false;
      await api('/v1/jobs' + q, { method: 'POST', body: { Job: full } });
      showBanner(`Job <b>${esc(j.ID)}</b> registered again.`);
    }));
    return;
  }
  actions.innerHTML = '<button class="danger" id="job-stop">Stop job</button>';
  armed(document.getElementById('job-stop'), 'Confirm stop', async () => {
    const r = await api(base + q, { method: 'DELETE' });
    showBanner(`Job <b>${esc(j.ID)}</b> stopped (evaluation <code>${short(r.data.EvalID)}</code>).`);
  });
}

function allocTable(allocs, withNode) {
  const rows = allocs.map((a) => `<tr data-alloc="${esc(a.ID)}"><td>${allocLink(a.ID)}</td><td>${esc(a.Name)}</td>
    ${withNode ? `<td>${nodeLink(a.NodeID, a.NodeName)}</td>` : `<td>${jobLink(a.JobID, a.Namespace)}</td>`}
    <td>${esc(a.JobVersion)}</td><td>${badge(a.DesiredStatus)}</td><td>${badge(a.ClientStatus)}</td><td>${esc(a.ClientDescription || a.DesiredDescription)}</td><td>${when(a.CreateTime)}</td></tr>`);
  return table(['ID', 'Name', withNode ? 'Node' : 'Job', 'Version', 'Desired', 'Status', 'Description', 'Created'], rows, 'No allocations.');
}

// ---------- evaluations ----------

function blockedReason(e) {
  const out = [];
  for (const [g, m] of Object.entries(e.FailedTGAllocs || {})) {
    const bits = [];
    if (m.NodesEvaluated !== undefined) bits.push(`${m.NodesEvaluated} nodes evaluated`);
    if (m.NodesAvailable) bits.push(`available: ${Object.entries(m.NodesAvailable).map(([k, v]) => `${k}=${v}`).join(', ')}`);
    if (m.NodesFiltered) bits.push(`${m.NodesFiltered} filtered`);
    for (const [c, n] of Object.entries(m.ConstraintFiltered || {})) bits.push(`constraint <code>${esc(c)}</code> filtered ${n}`);
    for (const [c, n] of Object.entries(m.ClassFiltered || {})) bits.push(`class ${esc(c)} filtered ${n}`);
    if (m.NodesExhausted) bits.push(`${m.NodesExhausted} exhausted`);
    for (const [d, n] of Object.entries(m.DimensionExhausted || {})) bits.push(`${esc(d)} exhausted on ${n}`);
    if (m.CoalescedFailures) bits.push(`${m.CoalescedFailures} more failures coalesced`);
    out.push(`<b>${esc(g)}</b>: ${bits.join('; ') || 'could not be placed'}`);
  }
  if (e.BlockedEval) out.push(`blocked evaluation <code>${short(e.BlockedEval)}</code> waits for capacity`);
  if (e.Status === 'blocked' && !out.length) out.push('waiting for capacity or eligible nodes');
  return out.length ? `<div class="reason">${out.join('<br>')}</div>` : '';
}

function evalTable(evals, withJob) {
  const rows = evals.map((e) => `<tr data-eval="${esc(e.ID)}"><td class="mono" title="${esc(e.ID)}">${short(e.ID)}</td>
    ${withJob ? `<td>${jobLink(e.JobID, e.Namespace)}</td>` : ''}<td>${esc(e.TriggeredBy)}</td><td>${esc(e.Type)}</td><td>${esc(e.Priority)}</td>
    <td>${badge(e.Status)}${e.StatusDescription ? `<br><span class="muted">${esc(e.StatusDescription)}</span>` : ''}</td>
    <td>${blockedReason(e)}</td><td>${when(e.CreateTime)}</td></tr>`);
  const head = ['ID'].concat(withJob ? ['Job'] : [], ['Triggered by', 'Type', 'Priority', 'Status', 'Placement failures', 'Created']);
  return table(head, rows, 'No evaluations.');
}

async function evaluations(signal, ns) {
  const started = performance.now();
  main.innerHTML = `<h1>Evaluations <span class="sub" id="evals-count"></span></h1>
    <div class="actions"><label><input type="checkbox" id="evals-blocked"> only blocked or with placement failures</label>
    <label>Namespace <select id="evals-ns"></select></label></div>
    <div id="evals-table" style="margin-top:8px"><p class="muted loading">Loading…</p></div>`;
  let all = [];
  let first = true;
  const only = document.getElementById('evals-blocked');
  const draw = () => {
    const list = only.checked ? all.filter((e) => e.Status === 'blocked' || Object.keys(e.FailedTGAllocs || {}).length) : all;
    setSection('evals-table', evalTable(list.slice(0, 2000), true));
    document.getElementById('evals-count').textContent = `${list.length} of ${all.length}`;
  };
  only.addEventListener('change', draw);
  namespaceSelect('evals-ns', ns, signal);
  watch(`/v1/evaluations?namespace=${enc(ns)}`, (list) => {
    all = list.sort((a, b) => b.CreateIndex - a.CreateIndex);
    draw();
    if (first) { first = false; rendered('evaluations', started); }
  }, signal);
}

// ---------- variables ----------

function varHref(path, ns) {
  return `/ui/variables/${String(path).split('/').map(enc).join('/')}?namespace=${enc(ns)}`;
}

async function variables(signal, ns) {
  const started = performance.now();
  main.innerHTML = `<h1>Variables <span class="sub" id="vars-count"></span></h1>
    <div class="actions"><label>Namespace <select id="vars-ns"></select></label>
    <form id="var-new" class="inline"><input id="var-new-path" placeholder="path/of/new/variable" spellcheck="false"> <button type="submit">New variable</button></form></div>
    <div id="vars-table" style="margin-top:8px"><p class="muted loading">Loading…</p></div>`;
  namespaceSelect('vars-ns', ns, signal);
  document.getElementById('var-new').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const path = document.getElementById('var-new-path').value.trim().replace(/^\/+|\/+$/g, '');
    if (path) navigate(varHref(path, ns) + '&new=1', true);
  });
  let first = true;
  watch(`/v1/vars?namespace=${enc(ns)}`, (list) => {
    const rows = list.map((v) => `<tr data-var="${esc(v.Path)}"><td><a href="${varHref(v.Path, v.Namespace)}" data-nav>${esc(v.Path)}</a></td>` +
      `<td>${esc(v.Namespace)}</td><td>${esc(when(v.ModifyTime))}</td><td class="mono">${esc(v.ModifyIndex)}</td></tr>`);
    setSection('vars-table', table(['Path', 'Namespace', 'Last updated', 'Modify index'], rows, 'No variables.'));
    document.getElementById('vars-count').textContent = `${list.length}`;
    if (first) { first = false; rendered('variables', started, { count: list.length }); }
  }, signal);
}

// One variable: its items edited in place, saved with check-and-set on the index the page
// read (a conflict shows what the servers hold now), deleted the same way.
async function variable(path, ns, isNew, signal) {
  const started = performance.now();
  main.innerHTML = `<h1>Variable <code>${esc(path)}</code> <span class="sub">${esc(ns)}</span></h1>
    <div id="var-meta"><p class="muted loading">Loading…</p></div>
    <div id="var-conflict"></div>
    <h2>Items</h2>
    <form id="var-form" autocomplete="off"><table class="items"><thead><tr><th>Key</th><th>Value</th><th></th></tr></thead><tbody id="var-items"></tbody></table>
    <div class="actions"><button type="button" id="var-add">Add item</button> <button type="submit" id="var-save">Save</button>
    <button type="button" class="danger" id="var-delete">Delete</button> <a href="/ui/variables?namespace=${enc(ns)}" data-nav>All variables</a></div></form>`;
  const url = `/v1/var/${path.split('/').map(enc).join('/')}?namespace=${enc(ns)}`;
  let index = 0;
  const row = (k, v) => `<tr><td><input class="var-key mono" value="${esc(k)}" spellcheck="false"></td>` +
    `<td><input class="var-value mono" value="${esc(v)}" spellcheck="false"></td><td><button type="button" class="var-remove">Remove</button></td></tr>`;
  const draw = (v) => {
    index = v ? v.ModifyIndex : 0;
    setSection('var-meta', v ? kv({ 'Modify index': v.ModifyIndex, 'Last updated': when(v.ModifyTime), Created: when(v.CreateTime), Lock: v.Lock ? 'held' : 'none' }, true)
      : '<p class="muted">A new variable: give it items and save.</p>');
    const items = v ? v.Items || {} : { '': '' };
    document.getElementById('var-items').innerHTML = Object.keys(items).sort().map((k) => row(k, items[k])).join('');
    document.getElementById('var-delete').hidden = !v;
  };
  try {
    draw(await get(url, signal));
  } catch (e) {
    if (e.status !== 404 || !isNew) throw e;
    draw(null);
  }
  const form = document.getElementById('var-form');
  form.addEventListener('click', (ev) => {
    if (ev.target.classList.contains('var-remove')) ev.target.closest('tr').remove();
  });
  document.getElementById('var-add').addEventListener('click', () => {
    document.getElementById('var-items').insertAdjacentHTML('beforeend', row('', ''));
  });
  const conflict = (e) => {
    let now = null;
    try { now = JSON.parse(e.message); } catch (_) { /* a message */ }
    if (!now || typeof now !== 'object') return false;
    setSection('var-conflict', `<div class="banner error" id="var-conflict-note"><b>Conflict:</b> the variable changed since this page read it (now at modify index ${esc(now.ModifyIndex)}). ` +
      `Nothing was written. What the servers hold: ${kv(now.Items || {})}<button type="button" id="var-reload">Load it</button></div>`);
    document.getElementById('var-reload').addEventListener('click', () => navigate(location.href, false));
    return true;
  };
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const save = document.getElementById('var-save');
    act(save, async () => {
      const items = {};
      document.querySelectorAll('#var-items tr').forEach((tr) => {
        const k = tr.querySelector('.var-key').value.trim();
        if (k) items[k] = tr.querySelector('.var-value').value;
      });
      if (!Object.keys(items).length) { showBanner('A variable needs at least one item.', true); return; }
      try {
        const r = await api(`${url}&cas=${index}`, { method: 'PUT', body: { Items: items } });
        setSection('var-conflict', '');
        draw(await get(url, signal));
        showBanner(`Saved at modify index ${esc(r.data.ModifyIndex)}.`);
        document.body.dataset.saved = String(r.data.ModifyIndex);
      } catch (e) {
        if (e.status === 409 && conflict(e)) return;
        throw e;
      }
    });
  });
  armed(document.getElementById('var-delete'), 'Confirm delete', async () => {
    try {
      await api(`${url}&cas=${index}`, { method: 'DELETE' });
      navigate(`/ui/variables?namespace=${enc(ns)}`, true);
    } catch (e) {
      if (e.status === 409 && conflict(e)) return;
      throw e;
    }
  });
  rendered('variable', started, { index });
}

// ---------- allocation ----------

async function alloc(id, signal) {
  const started = performance.now();
  main.innerHTML = `<h1>Allocation <span class="mono">${short(id)}</span> <span class="sub" id="alloc-sub"></span></h1>
    <div class="actions" id="alloc-actions"></div>
    <div id="alloc-info"></div>
    <h2>Tasks</h2><div id="alloc-tasks"></div>
    <h2>Logs</h2>
    <div class="actions"><label>Task <select id="log-task"></select></label>
      <label><input type="radio" name="log-type" value="stdout" checked> stdout</label>
      <label><input type="radio" name="log-type" value="stderr"> stderr</label>
      <span class="muted" id="log-state"></span></div>
    <pre class="log" id="alloc-log"></pre>`;
  let first = true;
  let logCtl = null;
  const taskSel = document.getElementById('log-task');
  const startLog = () => {
    if (logCtl) logCtl.abort();
    logCtl = new AbortController();
    signal.addEventListener('abort', () => logCtl.abort(), { once: true });
    const type = document.querySelector('input[name=log-type]:checked').value;
    streamLog(id, taskSel.value, type, logCtl.signal);
  };
  taskSel.addEventListener('change', startLog);
  document.querySelectorAll('input[name=log-type]').forEach((r) => r.addEventListener('change', startLog));
  let a = null;
  const reload = async () => {
    a = await get(`/v1/allocation/${enc(id)}`, signal);
    document.getElementById('alloc-sub').innerHTML = `${badge(a.ClientStatus)} · desired ${esc(a.DesiredStatus)}`;
    setSection('alloc-info', kv({
      ID: a.ID, Name: a.Name, Job: { html: jobLink(a.JobID, a.Namespace) }, 'Job version': a.JobVersion, Group: a.TaskGroup,
      Node: { html: nodeLink(a.NodeID, a.NodeName) }, Evaluation: a.EvalID, Created: when(a.CreateTime), Modified: when(a.ModifyTime),
      Description: a.ClientDescription || '', 'Desired description': a.DesiredDescription || '',
    }, true));
    const actions = document.getElementById('alloc-actions');
    const terminal = a.DesiredStatus !== 'run' || ['complete', 'failed', 'lost'].includes(a.ClientStatus);
    if (!terminal && !actions.dataset.ready) {
      actions.dataset.ready = '1';
      actions.innerHTML = '<button class="danger" id="alloc-stop">Stop allocation</button> <span class="muted">(the scheduler places a replacement)</span>';
      armed(document.getElementById('alloc-stop'), 'Confirm stop', async () => {
        await api(`/v1/allocation/${enc(a.ID)}/stop`, { method: 'POST' });
        showBanner('Allocation stop requested.');
      });
    } else if (terminal) {
      actions.innerHTML = '';
      delete actions.dataset.ready;
    }
    const states = a.TaskStates || {};
    const names = Object.keys(states).sort();
    const tasks = names.map((t) => {
      const s = states[t];
      const ev = (s.Events || []).slice().reverse().map((e) => `<tr><td>${when(e.Time)}</td><td>${esc(e.Type)}</td><td>${esc(e.DisplayMessage || e.Message)}${e.ExitCode ? ` (exit ${e.ExitCode})` : ''}</td></tr>`).join('');
      return `<h3>${esc(t)} ${badge(s.State)} ${s.Failed ? badge('failed') : ''} <span class="muted" style="font-weight:400">restarts ${esc(s.Restarts)} · started ${esc(whenIso(s.StartedAt))}${whenIso(s.FinishedAt) ? ` · finished ${esc(whenIso(s.FinishedAt))}` : ''}</span></h3>
        <table class="events"><thead><tr><th>Time</th><th>Type</th><th>Message</th></tr></thead><tbody>${ev}</tbody></table>`;
    });
    setSection('alloc-tasks', tasks.join('') || '<p class="muted">No task has started yet.</p>');
    if (!taskSel.options.length && names.length) {
      taskSel.innerHTML = names.map((t) => `<option>${esc(t)}</option>`).join('');
      startLog();
    }
    if (first) { first = false; rendered('allocation', started); }
  };
  await follow([`Allocation:${id}`], reload, signal);
}

// Follows a task's log (`follow=true&plain=true`) into the page.
async function streamLog(allocId, task, type, signal) {
  const pre = document.getElementById('alloc-log');
  const state = document.getElementById('log-state');
  pre.textContent = '';
  state.textContent = 'following…';
  const headers = {};
  if (token()) headers['X-Nomad-Token'] = token();
  try {
    const r = await fetch(`/v1/client/fs/logs/${enc(allocId)}?task=${enc(task)}&type=${type}&follow=true&plain=true&origin=start&offset=0`, { headers, signal });
    if (r.status === 403) { state.textContent = ''; pre.textContent = 'Permission denied: the token does not allow read-logs here.'; return; }
    if (!r.ok) { state.textContent = ''; pre.textContent = (await r.text()) || r.statusText; return; }
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.append(dec.decode(value, { stream: true }));
      if (pre.textContent.length > 2000000) pre.textContent = pre.textContent.slice(-1000000);
      if (atEnd) pre.scrollTop = pre.scrollHeight;
    }
    state.textContent = 'the log ended (the task has stopped)';
  } catch (e) {
    if (!signal.aborted) state.textContent = `log stream failed: ${e.message}`;
  }
}

// ---------- node ----------

async function node(id, signal) {
  const started = performance.now();
  main.innerHTML = `<h1 id="node-title">Client</h1>
    <div class="actions" id="node-actions"></div>
    <div id="node-info"></div>
    <h2>Allocations</h2><div id="node-allocs"></div>
    <h2>Attributes</h2><div id="node-attrs"></div>
    <h2>Drivers</h2><div id="node-drivers"></div>`;
  let first = true;
  const reload = async () => {
    const [n, allocs] = await Promise.all([get(`/v1/node/${enc(id)}`, signal), get(`/v1/node/${enc(id)}/allocations`, signal)]);
    document.getElementById('node-title').innerHTML = `${esc(n.Name)} <span class="sub">${badge(n.Status)} ${badge(n.SchedulingEligibility)} ${n.Drain ? badge('draining') : ''}</span>`;
    let cpu = 0; let mem = 0;
    for (const a of allocs) {
      if (a.DesiredStatus !== 'run' || ['complete', 'failed', 'lost'].includes(a.ClientStatus)) continue;
      cpu += (a.Resources && a.Resources.CPU) || 0;
      mem += (a.Resources && a.Resources.MemoryMB) || 0;
    }
    const res = n.NodeResources || {};
    setSection('node-info', kv({ ID: n.ID, Address: n.Address || (n.Attributes || {})['unique.network.ip-address'] || '', 'HTTP address': n.HTTPAddr, Datacenter: n.Datacenter, Class: n.NodeClass || 'none', Pool: n.NodePool, Drain: n.Drain ? `yes${n.DrainStrategy && n.DrainStrategy.ForceDeadline ? ` (deadline ${whenIso(n.DrainStrategy.ForceDeadline) || n.DrainStrategy.ForceDeadline})` : ''}` : 'no' }, true) +
      `<p>CPU ${bar(cpu, (res.Cpu && res.Cpu.CpuShares) || 0, 'MHz')} &nbsp; Memory ${bar(mem, (res.Memory && res.Memory.MemoryMB) || 0, 'MiB')}</p>`);
    drawNodeActions(n);
    allocs.sort((a, b) => b.CreateIndex - a.CreateIndex);
    setSection('node-allocs', allocTable(allocs, false));
    setSection('node-attrs', kv(n.Attributes));
    setSection('node-drivers', table(['Driver', 'Detected', 'Healthy', 'Description'], Object.keys(n.Drivers || {}).sort().map((d) => {
      const v = n.Drivers[d];
      return `<tr><td>${esc(d)}</td><td>${v.Detected ? 'yes' : 'no'}</td><td>${v.Healthy ? badge('healthy', 'ok') : badge('unhealthy', 'bad')}</td><td>${esc(v.HealthDescription)}</td></tr>`;
    })));
    if (first) { first = false; rendered('node', started); }
  };
  await follow([`Node:${id}`, 'Allocation'], reload, signal);
}

function drawNodeActions(n) {
  const actions = document.getElementById('node-actions');
  const key = `${n.Drain}|${n.SchedulingEligibility}`;
  if (actions.dataset.key === key) return;
  actions.dataset.key = key;
  const eligible = n.SchedulingEligibility === 'eligible';
  actions.innerHTML = (n.Drain
    ? '<button id="node-drain">Stop draining</button>'
    : '<button class="danger" id="node-drain">Drain</button> <label>deadline <input type="number" id="drain-minutes" min="0" value="60"> min</label>') +
    ` <button id="node-elig">${eligible ? 'Mark ineligible' : 'Mark eligible'}</button>`;
  const path = `/v1/node/${enc(n.ID)}`;
  const drain = document.getElementById('node-drain');
  if (n.Drain) {
    drain.addEventListener('click', () => act(drain, async () => {
      await api(`${path}/drain`, { method: 'POST', body: { DrainSpec: null, MarkEligible: true } });
      showBanner('Drain stopped; the node is eligible again.');
    }));
  } else {
    armed(drain, 'Confirm drain', async () => {
      const minutes = Number(document.getElementById('drain-minutes').value) || 0;
      await api(`${path}/drain`, { method: 'POST', body: { DrainSpec: { Deadline: Math.round(minutes * 60e9), IgnoreSystemJobs: false }, MarkEligible: false } });
      showBanner('Drain started: allocations migrate at each group\'s pace.');
    });
  }
  const elig = document.getElementById('node-elig');
  elig.addEventListener('click', () => act(elig, async () => {
    await api(`${path}/eligibility`, { method: 'POST', body: { Eligibility: eligible ? 'ineligible' : 'eligible' } });
  }));
}

navigate(location.href, false);
