// Latchkey's dashboard: what is held, what ended, who is rate-limited.
// It calls the public API only, with URLs relative to the page (so it works
// behind a proxy's path prefix), and keeps the keys it is given in memory.
'use strict';

(function () {
  const REFRESH_MS = 3000;
  const PAGE_LIMIT = 100;
  const MAX_PAGES = 20; // per kind and refresh: a page may be short and still have a next one
  const LOST_KEPT = 20;
  const RATES_KEPT = 40;
  const TOP_KEYS = 5;
  const NAME_RULE = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;
  const KINDS = [
    { kind: 'lock', path: 'v1/locks', lost: 'v1/lost/locks' },
    { kind: 'rwlock', path: 'v1/rwlocks', lost: 'v1/lost/rwlocks' },
    { kind: 'semaphore', path: 'v1/semaphores', lost: 'v1/lost/semaphores' },
  ];
  // What the API's lost reasons mean, in words.
  const REASONS = {
    force_released: 'force-released',
    expired: 'expired: not renewed in time',
    max_hold: 'reached its max_hold',
    heartbeat_missed: 'its holder missed a heartbeat',
  };

  const $ = (id) => document.getElementById(id);
  const el = {
    keyForm: $('key-form'), apiKey: $('api-key'), forget: $('forget-key'), status: $('status'),
    content: $('content'), filterForm: $('filter-form'), prefix: $('prefix'), heldNote: $('held-note'),
    heldTable: $('held'), heldRows: $('held-rows'), lost: $('lost'), policies: $('policies'), rlNote: $('rl-note'),
    dialog: $('force-dialog'), forceForm: $('force-form'), forceWhat: $('force-what'), adminKey: $('admin-key'),
    forceError: $('force-error'), forceCancel: $('force-cancel'),
  };

  // The keys live in these variables only: never in storage or cookies.
  let apiKey = '';
  let adminKey = '';

  let prefix = '';
  let sort = { key: 'kind', dir: 1 };
  let rows = [];
  let seen = new Map(); // lease id -> the row last seen, for what ended
  const forced = new Set(); // lease ids force-released from this page
  let lost = []; // the ends this page saw itself: {row, reason, at}
  let recorded = []; // the losses the API recorded: {kind, name, owner, fence, reason, at}
  let rates = new Map(); // policy -> {last: {t, allowed, denied}, points: [{allowed, denied}]}
  let timer = 0;
  let generation = 0;
  let pending = null; // the lease the force-release dialog is about

  // api calls the API at path (relative to the server's root) and answers
  // its JSON; a failed answer throws an Error with the status and the
  // problem's detail.
  async function api(method, path, params, key) {
    const url = new URL('../' + path, document.baseURI);
    for (const [k, v] of Object.entries(params || {})) {
      if (v !== undefined && v !== '') url.searchParams.set(k, String(v));
    }
    const headers = { Accept: 'application/json' };
    if (key) headers.Authorization = 'Bearer ' + key;
    const resp = await fetch(url, { method, headers, cache: 'no-store', credentials: 'omit' });
    const text = await resp.text();
    let body = null;
    if (text) {
      try { body = JSON.parse(text); } catch (_) { body = null; }
    }
    if (!resp.ok) {
      const detail = body && (body.detail || body.title);
      const err = new Error(resp.status + (detail ? ': ' + detail : ' ' + resp.statusText));
      err.status = resp.status;
      throw err;
    }
    return body;
  }

  // listAll pages through the listing at path: what is held of a kind
  // (k.path) or what it lost (k.lost).
  async function listAll(path) {
    const items = [];
    let cursor = '';
    for (let page = 0; page < MAX_PAGES; page++) {
      const body = await api('GET', path, { prefix, limit: PAGE_LIMIT, cursor }, apiKey);
      items.push(...body.items);
      cursor = body.next_cursor || '';
      if (!cursor) return { items, complete: true };
    }
    return { items, complete: false };
  }

  function rowOf(kind, it, at) {
    const lease = it.lease || {};
    const ttl = it.ttl_ms !== undefined ? it.ttl_ms : lease.ttl_ms;
    const granted = it.granted_at || lease.granted_at;
    let waiters = it.waiters || 0;
    if (typeof waiters === 'object') waiters = (waiters.read || 0) + (waiters.write || 0);
    let detail = '';
    if (kind === 'rwlock') detail = it.write_held ? 'write' : plural(it.readers, 'reader');
    if (kind === 'semaphore') detail = it.in_use + ' of ' + it.permits + ' permits, ' + plural(it.holders, 'holder');
    return {
      id: kind + '/' + it.name + '/' + it.fence,
      kind, name: it.name, detail,
      owner: it.owner || lease.owner || '',
      granted: granted ? Date.parse(granted) : NaN,
      expires: ttl !== undefined ? at + ttl : NaN,
      waiters, fence: it.fence,
      keepalive: it.keepalive || lease.keepalive || null,
    };
  }

  // rowsOf is one row per lease of a read/write lock or a semaphore (its
  // state lists each lease's owner, grant time and time left), and one row
  // for an exclusive lock.
  function rowsOf(kind, it, at) {
    if (!Array.isArray(it.leases) || it.leases.length === 0) return [rowOf(kind, it, at)];
    const more = it.leases_truncated ? ', more not listed' : '';
    return it.leases.map((l, i) => Object.assign(rowOf(kind, it, at), {
      id: kind + '/' + it.name + '/' + it.fence + '/' + i + '/' + l.granted_at,
      detail: (kind === 'rwlock' ? l.mode : plural(l.count, 'permit') + ' of ' + it.permits) + more,
      owner: l.owner || '',
      granted: Date.parse(l.granted_at),
      expires: at + l.ttl_ms,
    }));
  }

  async function loadLeases() {
    const at = Date.now();
    const lists = await Promise.all(KINDS.map((k) => listAll(k.path)));
    const next = [];
    let complete = true;
    lists.forEach((l, i) => {
      complete = complete && l.complete;
      for (const it of l.items) next.push(...rowsOf(KINDS[i].kind, it, at));
    });
    return { rows: next, complete, at };
  }

  // loadLost reads the leases every instance saw lost (force-released, or
  // a keep-alive lease that ran out), from the API's lost-lease listings.
  async function loadLost() {
    const lists = await Promise.all(KINDS.map((k) => listAll(k.lost)));
    const out = [];
    lists.forEach((l, i) => {
      for (const it of l.items) {
        for (const x of it.leases) {
          out.push({ kind: KINDS[i].kind, name: it.name, owner: x.owner || '', fence: x.fence,
            reason: x.reason, at: Date.parse(x.lost_at) });
        }
      }
    });
    return out;
  }

  // noteEnded records the leases seen before and gone now, with the
  // reason the page can tell; a loss the API recorded says more, and is
  // shown instead (see renderLost).
  function noteEnded(next, at) {
    const now = new Map(next.map((r) => [r.id, r]));
    for (const [id, r] of seen) {
      if (now.has(id)) continue;
      let reason = 'released, or lost before its time ran out';
      if (forced.has(id)) reason = 'force-released from this page';
      else if (!(r.expires > at)) reason = 'expired: its time ran out';
      lost.unshift({ row: r, reason, at, forced: forced.has(id) });
      forced.delete(id);
    }
    lost = lost.slice(0, LOST_KEPT);
    seen = now;
  }

  async function loadPolicies() {
    let set;
    try {
      set = await api('GET', 'v1/ratelimit/policies', null, apiKey);
    } catch (e) {
      if (e.status === 403) return { error: 'This key may not read rate-limit policies (' + e.message + ').' };
      throw e;
    }
    const tops = await Promise.all(set.policies.map((p) =>
      api('GET', 'v1/ratelimit/policies/' + encodeURIComponent(p.name) + '/top', { limit: TOP_KEYS }, apiKey)
        .then((t) => t.items, (e) => { if (e.status === 404) return []; throw e; })));
    return { policies: set.policies.map((p, i) => ({ policy: p, top: tops[i] })) };
  }

  async function refresh() {
    const gen = ++generation;
    clearTimeout(timer);
    try {
      const [leases, pols, losses] = await Promise.all([loadLeases(), loadPolicies(), loadLost()]);
      if (gen !== generation) return;
      if (leases.complete) noteEnded(leases.rows, leases.at);
      recorded = losses;
      rows = leases.rows;
      el.heldNote.textContent = leases.complete ? '' :
        'More is held than this page lists: type a name prefix to narrow it.';
      renderHeld();
      renderLost();
      renderPolicies(pols);
      el.content.hidden = false;
      setStatus('Updated at ' + new Date().toLocaleTimeString() + '; refreshed every ' + REFRESH_MS / 1000 + ' s.');
    } catch (e) {
      if (gen !== generation) return;
      if (e.status === 401) {
        clearAll();
        setStatus(apiKey ? 'The server refused this key (' + e.message + ').' :
          'This server needs an API key: type one above.', true);
      } else {
        setStatus('Could not refresh: ' + e.message, true);
      }
    }
    if (gen === generation) timer = setTimeout(refresh, REFRESH_MS);
  }

  function clearAll() {
    el.content.hidden = true;
    rows = [];
    seen = new Map();
    lost = [];
    recorded = [];
    rates = new Map();
    el.heldRows.replaceChildren();
    el.lost.replaceChildren();
    el.policies.replaceChildren();
  }

  function setStatus(text, isError) {
    el.status.textContent = text;
    el.status.classList.toggle('error', !!isError);
  }

  // Rendering: every text goes through textContent, never markup.

  function node(tag, attrs, ...children) {
    const n = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'text') n.textContent = v;
      else n.setAttribute(k, v);
    }
    for (const c of children) n.append(c);
    return n;
  }

  function sortValue(r, key, now) {
    switch (key) {
      case 'age': return now - r.granted;
      case 'left': return r.expires - now;
      case 'waiters': return r.waiters;
      case 'owner': return r.owner.toLowerCase();
      case 'name': return r.name;
      default: return r.kind + ' ' + r.name;
    }
  }

  function compare(a, b) {
    const an = Number.isNaN(a), bn = Number.isNaN(b);
    if (an || bn) return an - bn; // unknown values last
    return a < b ? -1 : a > b ? 1 : 0;
  }

  function renderHeld() {
    const now = Date.now();
    const focused = document.activeElement && document.activeElement.dataset.lease;
    const sorted = rows.slice().sort((a, b) =>
      sort.dir * compare(sortValue(a, sort.key, now), sortValue(b, sort.key, now)) || compare(a.id, b.id));
    const trs = sorted.map((r) => {
      const button = node('button', {
        type: 'button', class: 'danger', 'data-lease': r.id,
        'aria-label': 'Force release ' + r.kind + ' ' + r.name, text: 'Force release',
      });
      button.addEventListener('click', () => askForce(r, button));
      return node('tr', { 'data-name': r.name },
        node('td', { 'data-label': 'Kind', text: r.kind + (r.detail ? ' (' + r.detail + ')' : '') }),
        node('td', { 'data-label': 'Name', class: 'name', text: r.name }),
        node('td', { 'data-label': 'Owner', class: 'owner', text: r.owner || '—' }),
        node('td', { 'data-label': 'Age', class: 'num', text: duration(now - r.granted) }),
        node('td', { 'data-label': 'Time left', class: 'num', text: duration(r.expires - now) }),
        node('td', { 'data-label': 'Waiters', class: 'num', text: String(r.waiters) }),
        node('td', { 'data-label': 'Keep-alive', text: keepalive(r.keepalive) }),
        node('td', { 'data-label': 'Fence', class: 'num', text: String(r.fence) }),
        node('td', {}, button));
    });
    if (trs.length === 0) {
      trs.push(node('tr', {}, node('td', { colspan: '9', class: 'empty', text: prefix ?
        'Nothing held under “' + prefix + '”.' : 'Nothing is held.' })));
    }
    el.heldRows.replaceChildren(...trs);
    if (focused) {
      const again = el.heldRows.querySelector('button[data-lease="' + CSS.escape(focused) + '"]');
      if (again) again.focus();
    }
  }

  // renderLost lists the losses the API recorded and the ends this page
  // saw that the API has no record of (a release, a plain lease's time
  // running out), newest first.
  function renderLost() {
    // A lock's loss is its lease's by the fence; a read/write lock's or a
    // semaphore's rows carry the name's fence, so their leases go by owner.
    const idOf = (kind, name, fence, owner) => kind + '/' + name + '/' + (kind === 'lock' ? fence : owner);
    const known = new Set(recorded.map((r) => idOf(r.kind, r.name, r.fence, r.owner)));
    const pageForced = new Set(lost.filter((l) => l.forced).map((l) => idOf(l.row.kind, l.row.name, l.row.fence, l.row.owner)));
    const all = recorded.map((r) => {
      const id = idOf(r.kind, r.name, r.fence, r.owner);
      let reason = REASONS[r.reason] || r.reason;
      if (r.reason === 'force_released' && pageForced.has(id)) reason += ' from this page';
      return { kind: r.kind, name: r.name, owner: r.owner, fence: r.fence, reason, at: r.at };
    });
    for (const l of lost) {
      if (!known.has(idOf(l.row.kind, l.row.name, l.row.fence, l.row.owner))) {
        all.push({ kind: l.row.kind, name: l.row.name, owner: l.row.owner, fence: l.row.fence, reason: l.reason, at: l.at });
      }
    }
    all.sort((x, y) => y.at - x.at);
    if (all.length === 0) {
      el.lost.replaceChildren(node('li', { class: 'note', text: 'Nothing has been lost lately.' }));
      return;
    }
    el.lost.replaceChildren(...all.slice(0, LOST_KEPT).map((l) => node('li', { 'data-name': l.name },
      node('span', { text: new Date(l.at).toLocaleTimeString() + ' ' + l.kind + ' ' }),
      node('strong', { text: l.name }),
      node('span', { text: (l.owner ? ' held by ' + l.owner : '') + (l.fence ? ' (fence ' + l.fence + ')' : '') + ': ' }),
      node('span', { class: 'reason', text: l.reason }))));
  }

  function renderPolicies(pols) {
    el.rlNote.classList.toggle('error', !!pols.error);
    if (pols.error) {
      el.rlNote.textContent = pols.error;
      el.policies.replaceChildren();
      return;
    }
    const now = Date.now();
    const cards = pols.policies.map(({ policy, top }) => {
      const s = policy.stats || { since_start: {}, last_minute: {} };
      const r = sample(policy.name, s, now);
      const lm = s.last_minute;
      const list = top.length === 0 ? node('p', { class: 'note', text: 'No key denied lately.' }) :
        node('ol', { 'aria-label': 'Most denied keys of ' + policy.name },
          ...top.map((t) => node('li', { 'data-key': t.key, text: t.key + ' — ' + plural(t.denied, 'denial') })));
      return node('article', { class: 'policy', 'data-policy': policy.name },
        node('h3', { text: policy.name }),
        node('p', { class: 'counts', text: describe(policy) }),
        node('p', { class: 'counts', text: 'Last minute: ' + (lm.allowed || 0) + ' allowed, ' + (lm.denied || 0) +
          ' denied, ' + (lm.would_deny || 0) + ' would deny. Now: ' + rate(r.allowed) + ' allowed, ' +
          rate(r.denied) + ' denied.' }),
        chart(policy.name, rates.get(policy.name).points),
        node('h4', { class: 'visually-hidden', text: 'Top denied keys' }),
        list);
    });
    if (cards.length === 0) cards.push(node('p', { class: 'note', text: 'No rate-limit policy is configured.' }));
    el.policies.replaceChildren(...cards);
  }

  // sample adds a policy's counts to its history and answers the rates
  // since the last refresh (the first one: the last minute's average).
  function sample(name, stats, now) {
    const ss = stats.since_start || {}, lm = stats.last_minute || {};
    let h = rates.get(name);
    let point;
    if (!h) {
      h = { points: [] };
      rates.set(name, h);
      point = { allowed: (lm.allowed || 0) / 60, denied: (lm.denied || 0) / 60 };
    } else {
      const secs = Math.max((now - h.last.t) / 1000, 0.001);
      point = {
        allowed: Math.max(0, (ss.allowed || 0) - h.last.allowed) / secs,
        denied: Math.max(0, (ss.denied || 0) - h.last.denied) / secs,
      };
    }
    h.last = { t: now, allowed: ss.allowed || 0, denied: ss.denied || 0 };
    h.points.push(point);
    if (h.points.length > RATES_KEPT) h.points.shift();
    return point;
  }

  const SVG = "http://www.w3.org/2000/svg";

  function chart(name, points) {
    const svg = document.createElementNS(SVG, 'svg');
    svg.setAttribute('viewBox', '0 0 100 30');
    svg.setAttribute('preserveAspectRatio', 'none');
    svg.setAttribute('role', 'img');
    const last = points[points.length - 1];
    svg.setAttribute('aria-label', 'Decisions per second of ' + name + ': ' + rate(last.allowed) + ' allowed, ' +
      rate(last.denied) + ' denied now');
    const max = Math.max(1, ...points.map((p) => Math.max(p.allowed, p.denied)));
    for (const series of ['allowed', 'denied']) {
      const line = document.createElementNS(SVG, 'polyline');
      const step = 100 / (RATES_KEPT - 1);
      const start = 100 - step * (points.length - 1);
      line.setAttribute('points', points.map((p, i) =>
        (start + i * step).toFixed(2) + ',' + (29 - (p[series] / max) * 27).toFixed(2)).join(' '));
      line.setAttribute('class', series);
      svg.append(line);
    }
    return svg;
  }

  // per is a limit's window: a duration, or a calendar period in its zone.
  function per(l) {
    if (!l.calendar) return l.window;
    return l.calendar + ' (' + (l.timezone || 'UTC') + (l.week_start ? ', from ' + l.week_start : '') + ')';
  }

  function describe(p) {
    if (p.limits) return p.limits.map((l) => l.name + ': ' + l.limit + ' per ' + per(l)).join('; ') + (p.shadow ? ' (shadow)' : '');
    return p.limit + ' per ' + per(p) + ', ' + String(p.algorithm).replace('_', ' ') + ', by ' + p.key + (p.shadow ? ' (shadow)' : '');
  }

  function keepalive(k) {
    if (!k) return '—';
    let s = 'until ' + new Date(k.max_hold_until).toLocaleString();
    if (k.heartbeat_ms) s += ', heartbeat every ' + duration(k.heartbeat_ms);
    return s;
  }

  function duration(ms) {
    if (!Number.isFinite(ms)) return '—';
    if (ms < 0) ms = 0;
    const s = Math.round(ms / 1000);
    if (s < 60) return s + ' s';
    if (s < 3600) return Math.floor(s / 60) + ' min ' + (s % 60) + ' s';
    if (s < 86400) return Math.floor(s / 3600) + ' h ' + Math.floor((s % 3600) / 60) + ' min';
    return Math.floor(s / 86400) + ' d ' + Math.floor((s % 86400) / 3600) + ' h';
  }

  function plural(n, word) { return n + ' ' + word + (n === 1 ? '' : 's'); }
  function rate(x) { return (x < 10 ? x.toFixed(1) : Math.round(x)) + '/s'; }

  // Force release: the admin key is asked for in a dialog and kept in
  // memory, for the next force release from this page.

  function askForce(r, button) {
    pending = { row: r, button };
    el.forceWhat.textContent = 'Release the ' + r.kind + ' “' + r.name + '”' + (r.owner ? ' held by ' + r.owner : '') +
      ' now, whoever holds it? Its holder learns it lost the lease.';
    el.adminKey.value = adminKey;
    el.forceError.textContent = '';
    el.dialog.showModal();
    el.adminKey.focus();
  }

  async function confirmForce(ev) {
    ev.preventDefault();
    if (!pending) return;
    const key = el.adminKey.value;
    if (!key) {
      el.forceError.textContent = 'Type the admin key.';
      return;
    }
    const r = pending.row;
    const kind = KINDS.find((k) => k.kind === r.kind);
    try {
      await api('DELETE', kind.path + '/' + encodeURIComponent(r.name), { force: 'true' }, key);
    } catch (e) {
      if (e.status === 401 || e.status === 403) adminKey = '';
      el.forceError.textContent = 'Not released: ' + e.message;
      return;
    }
    adminKey = key;
    forced.add(r.id);
    pending = null;
    el.dialog.close();
    el.heldTable.querySelector('th button').focus();
    setStatus('Force-released the ' + r.kind + ' ' + r.name + '.');
    refresh();
  }

  el.forceForm.addEventListener('submit', confirmForce);
  el.forceCancel.addEventListener('click', () => el.dialog.close());
  el.dialog.addEventListener('close', () => {
    el.adminKey.value = '';
    if (pending && pending.button.isConnected) pending.button.focus();
    pending = null;
  });

  el.keyForm.addEventListener('submit', (ev) => {
    ev.preventDefault();
    apiKey = el.apiKey.value.trim();
    el.apiKey.value = '';
    clearAll();
    setStatus('Loading…');
    refresh();
  });
  el.forget.addEventListener('click', () => {
    apiKey = '';
    adminKey = '';
    el.apiKey.value = '';
    clearAll();
    refresh();
  });

  el.filterForm.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const p = el.prefix.value.trim();
    if (p !== '' && !NAME_RULE.test(p)) {
      setStatus('A prefix is the start of a name: letters, digits and . _ : - , starting with a letter or digit.', true);
      return;
    }
    prefix = p;
    seen = new Map(); // what the old filter showed did not end
    refresh();
  });

  for (const b of el.heldTable.querySelectorAll('th button[data-sort]')) {
    b.addEventListener('click', () => {
      const key = b.dataset.sort;
      sort = { key, dir: sort.key === key ? -sort.dir : 1 };
      for (const th of el.heldTable.querySelectorAll('th')) th.removeAttribute('aria-sort');
      b.parentElement.setAttribute('aria-sort', sort.dir > 0 ? 'ascending' : 'descending');
      renderHeld();
    });
  }

  refresh();
})();
