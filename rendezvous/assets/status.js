(function () {
  'use strict';
  var L = 84, R = 1190, TOP = 8, H = 90, GAP = 26, STATES = ['starting', 'joined', 'running', 'exited'];
  var SVGNS = 'http://www.w3.org/2000/svg';
  function clean(v) { return String(v).replace(/[\u0000-\u0008\u000a-\u001f\u007f]/g, '\ufffd'); }
  function build(doc, ns, tag, attrs, kids) {
    var e = ns ? doc.createElementNS(ns, tag) : doc.createElement(tag);
    for (var k in attrs) if (attrs[k] !== null && attrs[k] !== undefined) e.setAttribute(k, clean(attrs[k]));
    (kids || []).forEach(function (c) {
      if (c === null || c === undefined) return;
      e.appendChild(typeof c === 'object' ? c : doc.createTextNode(clean(c)));
    });
    return e;
  }
  function el(tag, attrs) { return build(document, null, tag, attrs, [].slice.call(arguments, 2)); }
  function sv(tag, attrs) { return build(document, SVGNS, tag, attrs, [].slice.call(arguments, 2)); }
  function duration(s) {
    s = Math.max(0, Math.floor(s));
    if (s < 60) return s + ' s';
    if (s < 3600) return Math.floor(s / 60) + ' min ' + (s % 60) + ' s';
    return Math.floor(s / 3600) + ' h ' + Math.floor((s % 3600) / 60) + ' min';
  }
  function bytes(b) {
    var units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'], u = 0;
    while (b >= 1024 && u + 1 < units.length) { b /= 1024; u++; }
    return u === 0 ? Math.round(b) + ' B' : b.toFixed(1) + ' ' + units[u];
  }
  function rate(r) { return r < 10 && r !== Math.floor(r) ? r.toFixed(1) : r.toFixed(0); }
  function ranks(list) {
    var r = list.slice().sort(function (a, b) { return a - b; }).filter(function (v, i, a) { return i === 0 || a[i - 1] !== v; });
    var out = [];
    for (var i = 0; i < r.length;) {
      var j = i;
      while (j + 1 < r.length && r[j + 1] === r[j] + 1) j++;
      out.push(j === i ? String(r[i]) : j === i + 1 ? r[i] + ', ' + r[j] : r[i] + '-' + r[j]);
      i = j + 1;
    }
    return out.join(', ');
  }
  function counts(s) {
    var box = el('span', {id: 'counts'});
    STATES.forEach(function (st) {
      var n = s.counts[st] || 0;
      box.appendChild(el('span', {'class': 'count', 'data-state': st, 'data-count': n}, n + ' ' + st));
    });
    if (s.access === 'full') box.appendChild(el('span', {'class': 'count', 'data-state': 'stuck', 'data-count': s.stuck}, s.stuck + ' stuck'));
    return box;
  }
  function row(w) {
    var cls = 'worker' + (w.stuck ? ' stuck' : '') + (w.failed ? ' failed' : '');
    var exited = w.state === 'exited';
    var state = el('td', {'class': 'state'}, el('span', {'class': 'state-text'}, w.state_text));
    w.holding_up.forEach(function (h) {
      state.appendChild(el('div', {'class': 'holdup'}, h.op + " '" + h.name + "' waits for this rank for " + duration(h.seconds)));
    });
    if (w.exit_detail) state.appendChild(el('div', {'class': 'detail'}, w.exit_detail));
    if (w.restarts) state.appendChild(el('div', {'class': 'detail'}, 'restarted ' + w.restarts + ' times'));
    var ops = Object.keys(w.collectives).sort().map(function (op) { return op + ' ' + w.collectives[op].count; });
    var tail = el('td', {'class': 'tail'});
    w.tail.forEach(function (line) { tail.appendChild(el('div', {'class': 'line'}, line)); });
    return el('tr', {'class': cls, 'data-id': w.id, 'data-rank': w.rank, 'data-state': w.state,
                     'data-stuck': w.stuck ? 'true' : 'false',
                     'data-exit-code': exited && w.exit_code !== null ? w.exit_code : null,
                     'data-signal': exited && w.signal !== null ? w.signal : null},
      el('td', {'class': 'rank'}, w.rank), el('td', {'class': 'host'}, w.host),
      el('td', {'class': 'pid'}, w.pid === null ? '' : w.pid), state,
      el('td', {'class': 'run-time'}, duration(w.run_s)),
      el('td', {'class': 'collectives', 'data-count': w.collectives_total}, w.collectives_total,
         ops.length ? el('div', {'class': 'ops'}, ops.join(' \u00b7 ')) : null),
      el('td', {'class': 'bytes', 'data-bytes': w.bytes_total}, bytes(w.bytes_total)),
      el('td', {'class': 'rss'}, w.peak_rss_bytes === null ? '' : bytes(w.peak_rss_bytes)), tail);
  }
  function waits(s) {
    var box = el('div', {id: 'waits', 'data-count': s.waits.length});
    if (!s.waits.length) { box.appendChild(el('p', {'class': 'empty'}, 'No collective is waiting for a rank.')); return box; }
    var body = el('tbody', {});
    s.waits.forEach(function (w) {
      body.appendChild(el('tr', {'class': 'wait' + (w.seconds >= s.stuck_after_s ? ' stuck' : ''), 'data-op': w.op,
                                 'data-name': w.name, 'data-missing': ranks(w.missing)},
        el('td', {'class': 'op'}, w.op), el('td', {'class': 'name'}, w.name),
        el('td', {'class': 'process-set'}, w.process_set), el('td', {'class': 'submitted'}, ranks(w.submitted)),
        el('td', {'class': 'missing'}, ranks(w.missing)), el('td', {'class': 'seconds'}, duration(w.seconds))));
    });
    box.appendChild(el('table', {}, el('thead', {}, el('tr', {}, el('th', {}, 'collective'), el('th', {}, 'tensor'),
      el('th', {}, 'process set'), el('th', {}, 'submitted by'), el('th', {}, 'waits for'), el('th', {}, 'for'))), body));
    return box;
  }
  function panel(svg, s, i, id, title, key, isBytes) {
    var top = TOP + i * (H + GAP), bottom = top + H, start = s.now_unix_s - s.history_seconds, max = 0, bars = [];
    var bar = (R - L) / s.history_seconds;
    s.history.forEach(function (p) { max = Math.max(max, p[key]); });
    var scale = max > 0 ? max : 1;
    s.history.forEach(function (p) {
      if (p.t <= start || p.t > s.now_unix_s) return;
      var x = L + (p.t - start - 1) * bar, y = bottom - p[key] / scale * H;
      bars.push('M' + x.toFixed(1) + ',' + bottom.toFixed(1) + 'V' + y.toFixed(1) + 'h' + bar.toFixed(1) + 'V' +
                bottom.toFixed(1) + 'Z');
    });
    svg.appendChild(sv('rect', {'class': 'frame', x: L, y: top, width: R - L, height: H}));
    svg.appendChild(sv('text', {'class': 'chart-title', x: L + 8, y: top + 16}, title));
    svg.appendChild(sv('text', {'class': 'ymax', x: L - 6, y: top + 10, 'text-anchor': 'end'}, (isBytes ? bytes(max) : rate(max)) + '/s'));
    svg.appendChild(sv('text', {x: L - 6, y: bottom, 'text-anchor': 'end'}, '0'));
    svg.appendChild(sv('path', {'class': 'series', id: id, 'data-n': bars.length, 'data-max': max, d: bars.join(' ')}));
  }
  function chart(s) {
    var height = TOP + 2 * H + GAP + 22, axis = height - 6, minutes = s.history_seconds / 60;
    var svg = sv('svg', {id: 'chart', viewBox: '0 0 1200 ' + height, role: 'img', 'aria-label': 'throughput'});
    panel(svg, s, 0, 'chart-allreduce', 'allreduce throughput', 'allreduce_bytes_per_s', true);
    panel(svg, s, 1, 'chart-collectives', 'collectives per second', 'collectives_per_s', false);
    for (var i = 0; i <= minutes; i++) {
      svg.appendChild(sv('text', {x: (L + i / minutes * (R - L)).toFixed(1), y: axis, 'text-anchor': 'middle'},
                         i === minutes ? 'now' : '-' + (minutes - i) + ' min'));
    }
    return svg;
  }
  function render(s) {
    document.title = 'hvd \u00b7 ' + clean(s.name);
    document.body.setAttribute('data-access', s.access);
    document.getElementById('job-name').textContent = clean(s.name);
    var up = document.getElementById('uptime');
    up.setAttribute('data-seconds', s.uptime_s);
    up.textContent = 'up ' + duration(s.uptime_s);
    var size = document.getElementById('size');
    size.setAttribute('data-size', s.size);
    size.textContent = s.size ? s.size + ' ranks planned' : 'ranks planned: unknown';
    var round = document.getElementById('round');
    round.textContent = s.round !== undefined && s.round !== null ? 'elastic round ' + s.round : '';
    document.getElementById('counts').replaceWith(counts(s));
    var main = document.getElementById('details');
    if (s.access !== 'full') {
      if (!document.getElementById('access-note')) location.reload();
      return;
    }
    var table = el('table', {id: 'workers'}, el('thead', {}, el('tr', {}, el('th', {}, 'rank'), el('th', {}, 'host'),
      el('th', {}, 'pid'), el('th', {}, 'state'), el('th', {}, 'run time'), el('th', {}, 'collectives'),
      el('th', {}, 'bytes'), el('th', {}, 'peak RSS'), el('th', {}, 'last output'))));
    var body = el('tbody', {});
    s.workers.forEach(function (w) { body.appendChild(row(w)); });
    table.appendChild(body);
    var req = s.requests;
    main.replaceChildren(
      el('section', {id: 'workers-section'}, el('h2', {}, 'Workers'), table),
      el('section', {id: 'waits-section'}, el('h2', {}, 'Waits'), waits(s)),
      el('section', {id: 'chart-section'}, el('h2', {}, 'Throughput, last ' + s.history_seconds / 60 + ' minutes'), chart(s)),
      el('footer', {id: 'requests'}, 'rendezvous: ' + req.total + ' requests, ' + req.long_polls + ' long polls; stall warnings: ' +
         s.stall_warnings + '; restarts: ' + s.restarts + (s.rounds ? '; elastic rounds: ' + s.rounds : '')));
  }
  var live = document.getElementById('live');
  function stamp() { return new Date().toLocaleTimeString(); }
  function tick() {
    fetch('status.json', {cache: 'no-store', credentials: 'same-origin'}).then(function (r) {
      if (!r.ok) throw new Error('HTTP ' + r.status);
      return r.json();
    }).then(function (s) {
      render(s);
      live.setAttribute('data-live', 'true');
      live.textContent = 'live \u00b7 updated ' + stamp();
    }).catch(function (e) {
      live.setAttribute('data-live', 'false');
      live.textContent = 'no answer from the job since ' + stamp() + ' (' + e.message + '): it may have ended';
    }).then(function () { setTimeout(tick, 1000); });
  }
  tick();
})();
