/* RDX explorer: the interactive page of one comparison (built by rdx.explorer).
 * Reads the JSON block #rdx-data (written by rdx/explorer/build.py) and draws everything with
 * Plotly (inlined in the page). No network, no storage, no eval. */
(function () {
  'use strict';

  performance.mark('rdx-start');
  var DATA = JSON.parse(document.getElementById('rdx-data').textContent);
  performance.mark('rdx-data-parsed');
  var DIRS = ['a_over_b', 'b_over_a'];
  // the colours of points, shared with the figures and the stylesheet (rdx/viz/style.py)
  var EXPL_COLORS = DATA.palette.explanations;
  var LABEL_COLORS = DATA.palette.labels;
  var RING = DATA.palette.rings;
  var NONE_COLOR = DATA.palette.none;
  var OUTCOME = DATA.palette.outcomes;
  var MAGMA = DATA.palette.scales.magma;
  var BWR = DATA.palette.scales.bwr;
  var VIRIDIS = DATA.palette.scales.viridis;
  var ORANGES = DATA.palette.scales.oranges;
  var N = DATA.n;
  var LABELS = DATA.labels;
  var THUMBS = DATA.thumbs;   // array of data: URIs, or null

  // ------------------------------------------------------------------ helpers
  function $(id) { return document.getElementById(id); }
  function el(tag, attrs, children) {
    var e = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (k) {
        if (k === 'text') { e.textContent = attrs[k]; }
        else if (k === 'cls') { e.className = attrs[k]; }
        else if (k === 'style') { e.setAttribute('style', attrs[k]); }
        else if (k.slice(0, 2) === 'on') { e.addEventListener(k.slice(2), attrs[k]); }
        else { e.setAttribute(k, attrs[k]); }
      });
    }
    (children || []).forEach(function (c) {
      if (c !== null && c !== undefined) {
        e.appendChild(typeof c === 'string' ? document.createTextNode(c) : c);
      }
    });
    return e;
  }
  function decode(o, raw) {
    // raw: the stored integers, without applying a quantisation scale
    if (!o || typeof o !== 'object' || !o.__t) { return o; }
    var bin = atob(o.b64), u8 = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) { u8[i] = bin.charCodeAt(i); }
    var T = { i8: Int8Array, u8: Uint8Array, u16: Uint16Array, u32: Uint32Array, i16: Int16Array,
              i32: Int32Array, f32: Float32Array }[o.__t];
    var out = new T(u8.buffer);
    if (o.scale !== undefined && !raw) {       // quantised floats: value = int * scale
      var f = new Float32Array(out.length);
      for (var j = 0; j < out.length; j++) { f[j] = out[j] * o.scale; }
      return f;
    }
    return out;
  }
  function fmt(v, d) {
    if (v === null || v === undefined || (typeof v === 'number' && !isFinite(v))) { return '—'; }
    if (typeof v === 'number') {
      if (Number.isInteger(v)) { return String(v); }
      return v.toFixed(d === undefined ? 3 : d);
    }
    if (typeof v === 'boolean') { return v ? 'yes' : 'no'; }
    return String(v);
  }
  function className(i) {
    var l = LABELS[i], names = DATA.class_names || [];
    return names[l] !== undefined ? String(names[l]) : String(l);
  }
  function thumbEl(i, cls, onclick) {
    var e;
    if (THUMBS) { e = el('img', { src: THUMBS[i], alt: '#' + i, 'data-idx': String(i) }); }
    else { e = el('span', { cls: 'ph', 'data-idx': String(i), text: '#' + i }); }
    if (cls) { e.className += (e.className ? ' ' : '') + cls; }
    if (onclick) { e.addEventListener('click', onclick); }
    return e;
  }
  function lerpColor(c0, c1, t) {
    var a = parseInt(c0.slice(1), 16), b = parseInt(c1.slice(1), 16);
    var r = Math.round(((a >> 16) & 255) + t * (((b >> 16) & 255) - ((a >> 16) & 255)));
    var g = Math.round(((a >> 8) & 255) + t * (((b >> 8) & 255) - ((a >> 8) & 255)));
    var bl = Math.round((a & 255) + t * ((b & 255) - (a & 255)));
    return 'rgb(' + r + ',' + g + ',' + bl + ')';
  }
  function scaleColor(scale, t) {
    t = Math.max(0, Math.min(1, t));
    for (var i = 1; i < scale.length; i++) {
      if (t <= scale[i][0]) {
        var s = (t - scale[i - 1][0]) / (scale[i][0] - scale[i - 1][0]);
        return lerpColor(scale[i - 1][1], scale[i][1], s);
      }
    }
    return scale[scale.length - 1][1];
  }
  function gradientCss(scale) {
    return 'linear-gradient(to right,' + scale.map(function (s) {
      return s[1] + ' ' + Math.round(s[0] * 100) + '%';
    }).join(',') + ')';
  }

  // ------------------------------------------------------------------ pair data (lazy)
  var PAIRS = DATA.pairs.map(function (p) { return { raw: p, ready: false }; });
  function pairData(pi) {
    var P = PAIRS[pi];
    if (!P.ready) {
      var p = P.raw;
      P.name = p.name; P.a_name = p.a_name; P.b_name = p.b_name;
      P.a_short = p.a_short; P.b_short = p.b_short;
      P.emb = { a: decode(p.embedding.a), b: decode(p.embedding.b), method: p.embedding.method,
                note: p.embedding.note, params: p.embedding.params, label: p.embedding.label };
      P.k = p.k;
      P.groups = {};
      Object.keys(p.groups).forEach(function (g) {
        // a null rank array is implied: the j-th nearest in a model has rank j there
        var idx = decode(p.groups[g].idx), implied = new Uint32Array(idx.length);
        for (var j = 0; j < idx.length; j++) { implied[j] = (j % p.k) + 1; }
        P.groups[g] = { idx: idx, ra: p.groups[g].ra ? decode(p.groups[g].ra) : implied,
                        rb: p.groups[g].rb ? decode(p.groups[g].rb) : implied };
      });
      P.dirs = {};
      DIRS.forEach(function (d) {
        var q = p.directions[d];
        P.dirs[d] = { diff: { a: decode(q.diff.a), b: decode(q.diff.b), rdx: decode(q.diff.rdx) },
                      aff: decode(q.affinity_sum), dsum: decode(q.difference_sum),
                      ranking: decode(q.ranking), label: q.label, meaning: q.meaning,
                      tight: q.tight };
        var pos = new Int32Array(N);
        for (var r = 0; r < N; r++) { pos[P.dirs[d].ranking[r]] = r; }
        P.dirs[d].rankOf = pos;
      });
      P.methods = p.methods.map(function (m) {
        var M = { name: m.name, method: m.method, bsr: m.bsr, params: m.params, dirs: {},
                  extra: m.extra };
        DIRS.forEach(function (d) {
          var q = m.directions[d];
          if (!q) { return; }
          M.dirs[d] = { assign: decode(q.assign), hasMembers: q.has_members, hasNull: q.has_null,
                        explanations: q.explanations, chance: q.chance || null,
                        significance: q.significance || null,
                        named: q.named_groups ? {
                          info: q.named_groups,
                          groups: q.named_groups.groups.map(function (g) {
                            return { name: g.name, size: g.size, members: Array.prototype.slice.call(decode(g.members)),
                                     statistic: g.statistic, p: g.p_value, pHolm: g.p_value_holm,
                                     significant: g.significant };
                          }) } : null,
                        codes: q.codes ? decode(q.codes) : null,
                        nCodes: q.codes ? q.codes.shape[1] : 0, extra: q.extra || {} };
        });
        return M;
      });
      P.probe = p.probe ? { a: decode(p.probe.a), b: decode(p.probe.b), source: p.probe.source,
                            accuracy: p.probe.accuracy } : null;
      P.graph = p.graph; P.info = p.info || [];
      // the n×n difference (int8 × scale) for the mean affinities of a selection, or null
      P.matrix = p.matrix ? { a_over_b: { q: decode(p.matrix.a_over_b, true), scale: p.matrix.a_over_b.scale },
                              b_over_a: p.matrix.b_over_a ? { q: decode(p.matrix.b_over_a, true), scale: p.matrix.b_over_a.scale } : null,
                              shared: p.matrix.shared } : null;
      P.matrixNote = p.matrix_note || null;
      P.meanAll = {};
      P.ready = true;
    }
    return P;
  }

  // ------------------------------------------------------------------ state
  var S = { pair: 0, method: 0, dir: 'a_over_b', view: 'side', color: 'expl', showNull: true,
            showGrids: true, selected: null, hidden: {}, rings: { a: false, b: false, rdx: false },
            t: 0, playing: false, traceIdx: {}, nCat: 0, drag: 'zoom', group: null };

  function P() { return pairData(S.pair); }
  function M() { var p = P(); return p.methods.length ? p.methods[S.method] : null; }
  function MD() { var m = M(); return m ? m.dirs[S.dir] || null : null; }
  function assignOf(i) { var md = MD(); return md ? md.assign[i] : -1; }
  function gridOf(md) {
    // explanation index (1-based) of each grid image, first explanation first (cached)
    if (!md) { return {}; }
    if (!md.grid) {
      md.grid = {};
      md.explanations.forEach(function (e, k) {
        e.images.forEach(function (i) { if (md.grid[i] === undefined) { md.grid[i] = k + 1; } });
      });
    }
    return md.grid;
  }
  function explOf(i) {
    // the explanation (1-based), 0 = no-change group, -1 = none, for the current method
    var md = MD();
    if (!md) { return -1; }
    if (md.hasMembers || md.hasNull) {
      var a = md.assign[i];
      if (a !== -1) { return a; }
    }
    if (!md.hasMembers) { var g = gridOf(md)[i]; if (g !== undefined) { return g; } }
    return -1;
  }
  function explName(k) {
    var md = MD();
    if (k === 0) { return 'no-change group'; }
    if (k < 0) { return md && !md.hasMembers ? 'not in a grid' : 'not assigned'; }
    return (md && !md.hasMembers ? 'grid of explanation ' : 'explanation ') + k;
  }
  function explanationAt(k) {
    // the page data of explanation k (1-based) of the current method and direction, or null
    var md = MD();
    return md && k > 0 ? md.explanations[k - 1] || null : null;
  }
  function sigBadge(e) {
    // an explanation's significance (rdx explain --significance). Its words, p and title are
    // spelled by the builder with the report's helper, so page, snapshot and report agree.
    // No record, no badge: an empty one would read as "tested, nothing found".
    var b = e && e.significance ? e.significance.badge : null;
    if (!b) { return null; }
    return el('span', { cls: 'badge ' + (b.cls || (b.significant ? 'sig' : 'nonsig')), title: b.title },
              [b.text + ', p', el('sub', { text: 'FWER' }), ' ' + b.p]);
  }
  function bsrText(e) {
    // the BSR of one explanation's own grid (rank dissimilarity), next to its badge
    return e && e.bsr !== null && e.bsr !== undefined ? 'BSR ' + fmt(e.bsr, 2) : null;
  }
  function sigLine(e) {
    // "BSR 0.83 [significant, pFWER 0.012]": an explanation's strength and its significance
    var t = bsrText(e), b = sigBadge(e);
    if (!t && !b) { return null; }
    return el('span', { cls: 'sigline' }, [t ? el('span', { cls: 'badge bsr', title: 'BSR of this explanation\'s grid alone (rank dissimilarity): the share of its image pairs that are closer in the explained model', text: t }) : null, b]);
  }
  // words for the keys of a result the page lists as they come (no raw key on the page)
  var KEY_WORDS = { null_mean_affinity: 'mean affinity of the no-change group',
                    filtered: 'filtered into the no-change group', filter: 'filter',
                    passed_filter: 'passed the filter', concept: 'concept' };
  function keyWords(key) { return KEY_WORDS[key] || String(key).replace(/_/g, ' '); }
  function descriptionEl(e, id) {
    // an explanation's one-line description (rdx.evaluation.enrichment: only what was tested)
    var t = e && e.extra ? e.extra.description : null;
    if (!t) { return null; }
    var a = { cls: 'meaning description', text: String(t) };
    if (id) { a.id = id; }
    return el('div', a);
  }
  function visiblePoint(i) { return S.showNull || assignOf(i) !== 0; }

  // ------------------------------------------------------------------ colouring
  function colorModes() {
    var p = P(), md = MD(), modes = [];
    if (md) { modes.push(['expl', 'Explanations (' + M().name + ')']); }
    modes.push(['label', 'Label']);
    modes.push(['aff', 'Neighbourhood affinity sum']);
    modes.push(['dsum', 'Neighbourhood difference sum']);
    if (p.probe) {
      modes.push(['probe_a', 'Probe on ' + p.a_short + ': correct?']);
      modes.push(['probe_b', 'Probe on ' + p.b_short + ': correct?']);
      modes.push(['probe_ab', 'Probe: ' + p.a_short + ' vs ' + p.b_short]);
    }
    if (md && md.codes) {
      for (var c = 0; c < md.nCodes; c++) {
        modes.push(['code:' + c, 'Activation of explanation ' + (c + 1)]);
      }
    }
    return modes;
  }
  function cat(key, name, color, opts) {
    return { key: key, name: name, color: color, idx: [], size: (opts && opts.size) || 7,
             opacity: (opts && opts.opacity) || 0.85, symbol: (opts && opts.symbol) || 'circle' };
  }
  function coloring() {
    var p = P(), md = MD(), mode = S.color, i, cats = [], byKey = {};
    function add(c) { cats.push(c); byKey[c.key] = c; return c; }
    if (mode === 'expl' && md) {
      var nE = md.explanations.length;
      for (var k = 1; k <= nE; k++) {
        add(cat('e' + k, (md.hasMembers ? 'Explanation ' : 'Grid of explanation ') + k,
                EXPL_COLORS[k % EXPL_COLORS.length] || '#333'));
      }
      if (md.hasNull) { add(cat('e0', 'No-change group', EXPL_COLORS[0], { size: 5, opacity: 0.35 })); }
      add(cat('e-1', md.hasMembers ? 'Not assigned' : 'Not in a grid', NONE_COLOR,
              { size: 5, opacity: 0.35 }));
      for (i = 0; i < N; i++) { byKey['e' + explOf(i)].idx.push(i); }
      cats = cats.filter(function (c) { return c.idx.length > 0 || c.key !== 'e-1'; });
    } else if (mode === 'label') {
      var seen = {};
      for (i = 0; i < N; i++) { seen[LABELS[i]] = true; }
      Object.keys(seen).map(Number).sort(function (x, y) { return x - y; }).forEach(function (l, j) {
        add(cat('l' + l, String((DATA.class_names || [])[l] !== undefined ? DATA.class_names[l] : l),
                LABEL_COLORS[j % LABEL_COLORS.length]));
      });
      for (i = 0; i < N; i++) { byKey['l' + LABELS[i]].idx.push(i); }
    } else if (mode === 'probe_a' || mode === 'probe_b') {
      var pred = mode === 'probe_a' ? p.probe.a : p.probe.b;
      var classes = {}; for (i = 0; i < N; i++) { classes[LABELS[i]] = true; }
      var cl = Object.keys(classes).map(Number);
      if (cl.length === 2) {
        var pos = Math.max(cl[0], cl[1]);   // positive class = the largest label
        add(cat('tp', 'TP', OUTCOME.right)); add(cat('fp', 'FP', OUTCOME.wrong));
        add(cat('tn', 'TN', OUTCOME.first)); add(cat('fn', 'FN', OUTCOME.second));
        for (i = 0; i < N; i++) {
          var pp = pred[i] === pos, ap = LABELS[i] === pos;
          byKey[(pp === ap ? 't' : 'f') + (pp ? 'p' : 'n')].idx.push(i);
        }
      } else {
        add(cat('ok', 'correct', OUTCOME.right, { size: 6, opacity: 0.6 }));
        add(cat('bad', 'wrong', OUTCOME.wrong, { size: 8, opacity: 0.95, symbol: 'x' }));
        for (i = 0; i < N; i++) { byKey[pred[i] === LABELS[i] ? 'ok' : 'bad'].idx.push(i); }
      }
    } else if (mode === 'probe_ab') {
      add(cat('both', 'both correct', NONE_COLOR, { size: 5, opacity: 0.5 }));
      add(cat('onlya', 'only ' + p.a_short + ' correct', OUTCOME.first));
      add(cat('onlyb', 'only ' + p.b_short + ' correct', OUTCOME.second));
      add(cat('none', 'both wrong', OUTCOME.wrong, { symbol: 'x' }));
      for (i = 0; i < N; i++) {
        var ca = p.probe.a[i] === LABELS[i], cb = p.probe.b[i] === LABELS[i];
        byKey[ca && cb ? 'both' : ca ? 'onlya' : cb ? 'onlyb' : 'none'].idx.push(i);
      }
    } else {
      var vals, name, scale, mid = null;
      if (mode === 'aff') { vals = p.dirs[S.dir].aff; name = 'affinity sum'; scale = MAGMA; }
      else if (mode === 'dsum') { vals = p.dirs[S.dir].dsum; name = 'difference sum'; scale = BWR; mid = 0; }
      else { var c = Number(mode.split(':')[1]); name = 'activation ' + (c + 1); scale = VIRIDIS;
             vals = new Float32Array(N);
             for (i = 0; i < N; i++) { vals[i] = md.codes[i * md.nCodes + c]; } }
      var lo = Infinity, hi = -Infinity, all = [], miss = [];
      for (i = 0; i < N; i++) {
        if (isFinite(vals[i])) { all.push(i); lo = Math.min(lo, vals[i]); hi = Math.max(hi, vals[i]); }
        else { miss.push(i); }
      }
      if (mid !== null) { var m = Math.max(Math.abs(lo), Math.abs(hi)); lo = -m; hi = m; }
      var cc = cat('v', name, null); cc.idx = all; cc.values = vals; cc.scale = scale;
      cc.cmin = lo; cc.cmax = hi;
      add(cc);
      if (miss.length) { var nd = add(cat('nodata', 'no data', NONE_COLOR, { size: 5, opacity: 0.4 })); nd.idx = miss; }
      return { type: 'cont', cats: cats };
    }
    return { type: 'cat', cats: cats };
  }

  // ------------------------------------------------------------------ plots
  function coords(which, t) {
    var e = P().emb, X = new Float32Array(N), Y = new Float32Array(N);
    var A = e.a, B = e.b, i;
    if (which === 'a') { for (i = 0; i < N; i++) { X[i] = A[2 * i]; Y[i] = A[2 * i + 1]; } }
    else if (which === 'b') { for (i = 0; i < N; i++) { X[i] = B[2 * i]; Y[i] = B[2 * i + 1]; } }
    else {
      for (i = 0; i < N; i++) {
        X[i] = (1 - t) * A[2 * i] + t * B[2 * i];
        Y[i] = (1 - t) * A[2 * i + 1] + t * B[2 * i + 1];
      }
    }
    return { X: X, Y: Y };
  }
  function ranges() {
    var e = P().emb, lo = [Infinity, Infinity], hi = [-Infinity, -Infinity];
    [e.a, e.b].forEach(function (E) {
      for (var i = 0; i < N; i++) {
        for (var d = 0; d < 2; d++) {
          lo[d] = Math.min(lo[d], E[2 * i + d]); hi[d] = Math.max(hi[d], E[2 * i + d]);
        }
      }
    });
    return [0, 1].map(function (d) {
      var pad = 0.05 * (hi[d] - lo[d] || 1);
      return [lo[d] - pad, hi[d] + pad];
    });
  }
  function hoverText(i) {
    var s = '#' + i + ' · ' + className(i);
    var k = explOf(i);
    if (MD()) { s += ' · ' + explName(k); }
    return s;
  }
  function overlayPoints() {
    var p = P(), md = MD(), sel = S.selected, out = { grid: [], gridColor: [], a: [], b: [], rdx: [],
                                                       sel: sel === null ? [] : [sel],
                                                       group: S.group ? S.group.idx : [] };
    if (S.showGrids && md) {
      var g = gridOf(md);
      Object.keys(g).forEach(function (i) {
        out.grid.push(Number(i)); out.gridColor.push(EXPL_COLORS[g[i] % EXPL_COLORS.length]);
      });
    }
    if (sel !== null) {
      var k = p.k;
      ['a', 'b', 'rdx'].forEach(function (grp) {
        if (!S.rings[grp]) { return; }
        var G = grp === 'rdx' ? p.groups['rdx_' + S.dir] : p.groups[grp];
        for (var j = 0; j < k; j++) { out[grp].push(G.idx[sel * k + j]); }
      });
    }
    return out;
  }
  function pick(arr, idx) { var o = new Array(idx.length); for (var j = 0; j < idx.length; j++) { o[j] = arr[idx[j]]; } return o; }
  // Each map is two plots stacked in one box: the points (interactive) and, on top, a
  // static, transparent plot of the few marked points (grids, neighbour rings, selection),
  // so that selecting an image redraws a handful of markers, not thousands.
  function baseTraces(which, col) {
    var C = which === 'anim' ? coords('anim', S.t) : coords(which);
    var traces = [], idxs = [];
    col.cats.forEach(function (c) {
      var idx = c.idx.filter(visiblePoint);
      var marker = { size: c.size, opacity: c.opacity, symbol: c.symbol };
      if (c.values) {
        marker.color = pick(c.values, idx); marker.colorscale = c.scale;
        marker.cmin = c.cmin; marker.cmax = c.cmax; marker.showscale = false;  // scale: legend
      } else { marker.color = c.color; }
      traces.push({ type: 'scatter', mode: 'markers', x: pick(C.X, idx), y: pick(C.Y, idx),
                    customdata: idx, text: idx.map(hoverText), name: c.name,
                    hovertemplate: '%{text}<extra></extra>', marker: marker,
                    visible: S.hidden[c.key] ? false : true, showlegend: false });
      idxs.push(idx);
    });
    S.traceIdx[which] = idxs;
    return traces;
  }
  function overlayTraces(which) {
    var C = which === 'anim' ? coords('anim', S.t) : coords(which), o = overlayPoints();
    function ov(idx, marker) {
      return { type: 'scatter', mode: 'markers', x: pick(C.X, idx), y: pick(C.Y, idx),
               marker: marker, hoverinfo: 'skip', showlegend: false };
    }
    return [ov(o.group, { symbol: 'square-open', size: 10, color: '#111', line: { width: 1.5 } }),
            ov(o.grid, { symbol: 'diamond-open', size: 12, color: o.gridColor, line: { width: 2 } }),
            ov(o.a, { symbol: 'circle-open', size: 15, color: RING.a, line: { width: 2.5 } }),
            ov(o.b, { symbol: 'circle-open', size: 15, color: RING.b, line: { width: 2.5 } }),
            ov(o.rdx, { symbol: 'circle-open', size: 15, color: RING.rdx, line: { width: 2.5 } }),
            ov(o.sel, { symbol: 'circle-open', size: 20, color: '#111', line: { width: 3 } })];
  }
  function layout(which, overlay, div) {
    var r = S.range || ranges();
    S.range = r;
    var x = r[0].slice(), y = r[1].slice();
    if (overlay && div && div.layout && div.layout.xaxis && div.layout.xaxis.range) {
      x = div.layout.xaxis.range.slice(); y = div.layout.yaxis.range.slice();  // the base's zoom
    }
    var ax = { showgrid: false, zeroline: false, showticklabels: false, showline: false };
    return { margin: { l: 8, r: 8, t: 26, b: 8 }, hovermode: overlay ? false : 'closest',
             showlegend: false, uirevision: 'keep-' + S.pair + '-' + which,
             dragmode: overlay ? false : S.drag, selectdirection: 'any',
             plot_bgcolor: overlay ? 'rgba(0,0,0,0)' : '#fff',
             paper_bgcolor: overlay ? 'rgba(0,0,0,0)' : '#fff',
             xaxis: Object.assign({ range: x }, ax), yaxis: Object.assign({ range: y }, ax),
             hoverlabel: { font: { size: 12 } } };
  }
  // showTips: plotly's "double-click to zoom back out" note would sit over the controls in
  // the top right corner for seconds after every zoom, taking their clicks
  var PLOT_CONFIG = { displaylogo: false, responsive: true, showTips: false,
                      modeBarButtonsToRemove: ['toggleSpikelines'] };
  var OVERLAY_CONFIG = { staticPlot: true, responsive: true, displayModeBar: false };
  var syncing = false;
  function plotDivs() {
    return S.view === 'side' ? [['a', $('plot-a')], ['b', $('plot-b')]] : [['anim', $('plot-anim')]];
  }
  function overlayOf(div) { return $(div.id + '-ov'); }
  function drawOverlay(which, div) {
    return Plotly.react(overlayOf(div), overlayTraces(which), layout(which, true, div), OVERLAY_CONFIG);
  }
  function drawPlots() {
    var col = coloring();
    S.col = col;
    S.nCat = col.cats.length;
    var jobs = plotDivs().map(function (pd) {
      return Plotly.react(pd[1], baseTraces(pd[0], col), layout(pd[0], false), PLOT_CONFIG)
        .then(function () { wire(pd[1]); return drawOverlay(pd[0], pd[1]); });
    });
    renderLegend(col);
    return Promise.all(jobs);
  }
  function updateOverlays() {
    plotDivs().forEach(function (pd) { if (pd[1].data) { drawOverlay(pd[0], pd[1]); } });
  }
  function syncOverlay(div) {
    if (!div.layout || !div.layout.xaxis || !div.layout.xaxis.range) { return; }
    Plotly.relayout(overlayOf(div), { 'xaxis.range': div.layout.xaxis.range.slice(),
                                      'yaxis.range': div.layout.yaxis.range.slice() });
  }
  function wire(div) {
    if (div._rdxWired) { return; }
    div._rdxWired = true;
    div.on('plotly_click', function (ev) {
      if (ev && ev.points && ev.points.length) { select(Number(ev.points[0].customdata), true); }
    });
    div.on('plotly_hover', function (ev) {
      if (!ev || !ev.points || !ev.points.length) { return; }
      var i = Number(ev.points[0].customdata), box = $('hoverbox');
      box.innerHTML = '';
      if (THUMBS) { box.appendChild(el('img', { src: THUMBS[i], alt: '#' + i })); }
      box.appendChild(el('div', { text: hoverText(i) }));
      box.style.display = 'block';
    });
    div.on('plotly_unhover', function () { $('hoverbox').style.display = 'none'; });
    // box / lasso selection: the group's images, make-up, place in the other map, affinities
    div.on('plotly_selected', function (ev) {
      if (!ev || !ev.points) { return; }
      var seen = {}, idx = [];
      ev.points.forEach(function (pt) {
        var i = Number(pt.customdata);
        if (!isNaN(i) && !seen[i]) { seen[i] = true; idx.push(i); }
      });
      idx.sort(function (x, y) { return x - y; });
      var which = div === $('plot-a') ? 'a' : div === $('plot-b') ? 'b' : 'anim';
      setGroup(idx, ev.lassoPoints ? 'lasso' : 'box', which);
    });
    div.on('plotly_relayout', function (ev) {
      if (ev && (ev.dragmode === 'zoom' || ev.dragmode === 'select' || ev.dragmode === 'lasso' ||
                 ev.dragmode === 'pan') && ev.dragmode !== S.drag) {
        setDrag(ev.dragmode);   // chosen on the plot's own toolbar
        return;
      }
      syncOverlay(div);
      // one zoom for both maps (they are aligned: the same region in both)
      if (syncing || S.view !== 'side') { return; }
      var other = div === $('plot-a') ? $('plot-b') : $('plot-a');
      var upd = {};
      Object.keys(ev).forEach(function (k) { if (k.indexOf('axis') > 0) { upd[k] = ev[k]; } });
      if (ev['xaxis.autorange'] || ev['yaxis.autorange']) {
        upd = { 'xaxis.range': S.range[0].slice(), 'yaxis.range': S.range[1].slice() };
        syncing = true;
        Promise.all([Plotly.relayout(div, upd), Plotly.relayout(other, upd)])
          .then(function () { syncing = false; syncOverlay(div); syncOverlay(other); },
                function () { syncing = false; });
        return;
      }
      if (!Object.keys(upd).length) { return; }
      syncing = true;
      Plotly.relayout(other, upd).then(function () { syncing = false; syncOverlay(other); },
                                       function () { syncing = false; });
    });
  }

  // ------------------------------------------------------------------ legend
  function renderLegend(col) {
    var L = $('legend');
    L.innerHTML = '';
    col.cats.forEach(function (c, j) {
      var item;
      if (c.values) {
        var sw = el('span', { cls: 'scale' }); sw.style.background = gradientCss(c.scale);
        item = el('span', { cls: 'item', title: c.name }, [c.name + ' ', fmt(c.cmin, 2), sw, fmt(c.cmax, 2)]);
        L.appendChild(item);
        return;
      }
      var swatch = el('span', { cls: 'swatch' }); swatch.style.background = c.color;
      item = el('span', { cls: 'item' + (S.hidden[c.key] ? ' off' : ''), 'data-key': c.key,
                          role: 'button', title: 'click: show/hide in both maps' },
                [swatch, c.name, el('span', { cls: 'count', text: ' (' + c.idx.length + ')' })]);
      item.addEventListener('click', function () { toggleCategory(c.key, j, item); });
      L.appendChild(item);
    });
  }
  function toggleCategory(key, j, item) {
    S.hidden[key] = !S.hidden[key];
    item.classList.toggle('off', !!S.hidden[key]);
    plotDivs().forEach(function (pd) {
      if (pd[1].data) { Plotly.restyle(pd[1], { visible: S.hidden[key] ? false : true }, [j]); }
    });
  }

  // ------------------------------------------------------------------ selection panel
  function select(i, fromClick) {
    if (i === null || i === undefined || isNaN(i)) { return; }
    S.selected = i;
    var d = P().dirs[S.dir];
    $('rank').value = String(d.rankOf[i] + 1);
    renderRankLabel();
    renderSelected();
    updateOverlays();
    document.body.setAttribute('data-selected', String(i));
    if (fromClick) { $('selected-panel').scrollIntoView({ block: 'nearest' }); }
  }
  function renderRankLabel() {
    var d = P().dirs[S.dir], r = Number($('rank').value), i = d.ranking[r - 1];
    $('ranklabel').textContent = 'Rank ' + r + '/' + N + ' · #' + i + ' · affinity sum ' +
      fmt(d.aff[i], 2) + ' · difference sum ' + fmt(d.dsum[i], 2);
  }
  function cellColorRank(v, lo, hi) {
    var t = (Math.log(1 + v) - Math.log(1 + lo)) / ((Math.log(1 + hi) - Math.log(1 + lo)) || 1);
    return scaleColor(ORANGES, t);
  }
  function cellColorDiff(v, m) { return scaleColor(BWR, 0.5 + 0.5 * Math.max(-1, Math.min(1, v / m))); }
  var TH_PX = 46, CELL_PX = 33;   // the neighbour tables' label column and cells (explorer.css)
  function groupSpec() {
    var p = P();
    return [
      { key: 'a', title: 'Nearest in ' + p.a_short, G: p.groups.a, diff: p.dirs[S.dir].diff.a },
      { key: 'rdx', title: 'RDX neighbours (' + p.dirs[S.dir].label + ')',
        G: p.groups['rdx_' + S.dir], diff: p.dirs[S.dir].diff.rdx },
      { key: 'b', title: 'Nearest in ' + p.b_short, G: p.groups.b, diff: p.dirs[S.dir].diff.b }
    ];
  }
  function renderSelected() {
    var p = P(), i = S.selected, box = $('selected-panel');
    box.innerHTML = '';
    if (i === null) { box.appendChild(el('p', { cls: 'meaning', text: 'Click a point to see its neighbours.' })); return; }
    var k = p.k, d = p.dirs[S.dir], e = explOf(i);
    var facts = el('div', { cls: 'facts' }, [
      el('div', { id: 'sel-caption' }, [el('b', { text: '#' + i }), ' · ' + className(i)]),
      el('div', {}, [el('span', { cls: 'k', text: 'id ' }), el('span', { cls: 'mono', text: String((DATA.ids || [])[i] || i) })]),
      DATA.items ? el('div', { id: 'sel-item' }, [el('span', { cls: 'k', text: DATA.items.kind === 'audio' ? 'clip ' : 'text ' }),
                                                 el('span', { text: DATA.items.values[i] })]) : null,
      M() ? el('div', {}, [el('span', { cls: 'k', text: M().name + ': ' }), explName(e),
                           sigLine(explanationAt(e))]) : null,
      M() ? descriptionEl(explanationAt(e), 'sel-description') : null,
      el('div', {}, [el('span', { cls: 'k', text: 'ranking (' + d.label + '): ' }), (d.rankOf[i] + 1) + ' of ' + N]),
      el('div', {}, [el('span', { cls: 'k', text: 'neighbourhood affinity sum ' }), fmt(d.aff[i], 2),
                     el('span', { cls: 'k', text: ' · difference sum ' }), fmt(d.dsum[i], 2)]),
      p.probe ? el('div', {}, [el('span', { cls: 'k', text: 'probe predicts ' }),
        p.a_short + ': ' + (DATA.class_names[p.probe.a[i]] || p.probe.a[i]) + (p.probe.a[i] === LABELS[i] ? ' ✓' : ' ✗') + ' · ' +
        p.b_short + ': ' + (DATA.class_names[p.probe.b[i]] || p.probe.b[i]) + (p.probe.b[i] === LABELS[i] ? ' ✓' : ' ✗')]) : null,
      el('div', { style: 'margin-top:6px' }, [el('button', { cls: 'btn', id: 'snapshot', type: 'button',
        title: 'download this view as one stand-alone HTML file', onclick: saveSnapshot }, ['Save snapshot'])])
    ]);
    var main = thumbEl(i, 'main', function () { openModal([i], 0, true); });
    main.id = 'sel-image';
    box.appendChild(el('div', { cls: 'selected' }, [main, facts]));
    // the groups: thumbnails and their ranks / differences
    var specs = groupSpec(), all = [];
    specs.forEach(function (s) { for (var j = 0; j < k; j++) { all.push(s.G.ra[i * k + j], s.G.rb[i * k + j]); } });
    var lo = Math.min.apply(null, all), hi = Math.max.apply(null, all);
    var dmax = p.graph.difference === 'locally_biased' ? 1 : Math.max.apply(null, specs.map(function (s) {
      var m = 0; for (var j = 0; j < k; j++) { m = Math.max(m, Math.abs(s.diff[i * k + j])); } return m || 1; }));
    // columns per table: the panel's inner width less the row labels, over one cell's width
    var per = box.clientWidth > 0 ? Math.max(4, Math.floor((box.clientWidth - 16 - TH_PX) / CELL_PX)) : k;
    specs.forEach(function (s) {
      var ids = [], j;
      for (j = 0; j < k; j++) { ids.push(s.G.idx[i * k + j]); }
      var chk = el('input', { type: 'checkbox', 'data-group': s.key });
      chk.checked = !!S.rings[s.key];
      chk.addEventListener('change', function () { S.rings[s.key] = chk.checked; updateOverlays(); });
      var head = el('div', { cls: 'gh' }, [
        el('span', {}, [el('span', { cls: 'dot', style: 'background:' + RING[s.key] }), s.title]),
        el('label', {}, [chk, ' show on plot'])]);
      // the k neighbours in tables of as many columns as the panel holds: no sideways scroll
      var tables = [], rowT, rowI, rowA, rowB, rowD;
      ids.forEach(function (jdx, j2) {
        if (j2 % per === 0) {
          rowT = el('tr', {}, [el('th', { text: 'image' })]);
          rowI = el('tr', {}, [el('th', { text: '#' })]);
          rowA = el('tr', {}, [el('th', { text: 'rank ' + p.a_short, title: 'neighbour rank in ' + p.a_name })]);
          rowB = el('tr', {}, [el('th', { text: 'rank ' + p.b_short, title: 'neighbour rank in ' + p.b_name })]);
          rowD = el('tr', {}, [el('th', { text: 'diff', title: 'RDX difference (' + d.label + '); negative: closer in ' + d.tight })]);
          tables.push(el('table', {}, [rowT, rowI, rowA, rowB, rowD]));
        }
        var same = e > 0 && explOf(jdx) === e;
        var td = el('td', { cls: 'thumb' + (same ? ' same' : ''), title: '#' + jdx + ' · ' + className(jdx) +
                             (same ? ' · same ' + explName(e) : '') });
        if (same) { td.style.setProperty('--same', EXPL_COLORS[e % EXPL_COLORS.length]); }
        td.appendChild(thumbEl(jdx, 'nb', function () { openModal(ids, j2, false); }));
        rowT.appendChild(td);
        rowI.appendChild(el('td', { text: String(jdx) }));
        var ra = s.G.ra[i * k + j2], rb = s.G.rb[i * k + j2], dv = s.diff[i * k + j2];
        rowA.appendChild(el('td', { text: String(ra), style: 'background:' + cellColorRank(ra, lo, hi) }));
        rowB.appendChild(el('td', { text: String(rb), style: 'background:' + cellColorRank(rb, lo, hi) }));
        rowD.appendChild(el('td', { text: dv.toFixed(2), title: String(dv),
                                    style: 'background:' + cellColorDiff(dv, dmax) +
                                           (Math.abs(dv / dmax) > 0.5 ? ';color:#fff' : '') }));
      });
      var table = el('div', {}, tables);
      box.appendChild(el('div', { cls: 'group', 'data-group': s.key }, [head, el('div', { cls: 'gscroll' }, [table])]));
    });
  }

  // ------------------------------------------------------------------ box / lasso selection
  var GRID_MAX = 400;   // thumbnails drawn for a selection (all of them are counted)
  function setDrag(mode) {
    S.drag = mode;
    setSeg('drag', mode === 'pan' ? 'zoom' : mode);
    var jobs = [];
    ['plot-a', 'plot-b', 'plot-anim'].forEach(function (id) {
      if ($(id).data) { jobs.push(Plotly.relayout($(id), { dragmode: mode })); }
    });
    document.body.setAttribute('data-drag', mode);
    return Promise.all(jobs);
  }
  var MAP_DIV = { a: 'plot-a', b: 'plot-b', anim: 'plot-anim' };
  function clearPlotSelections(keep) {
    // plotly's own marks of a box / lasso selection (the outline, the greyed points) on
    // every map but `keep` (the one a new selection was just drawn on): an old outline
    // must not stay drawn next to the new selection
    ['plot-a', 'plot-b', 'plot-anim'].forEach(function (id) {
      if (id === keep || !$(id).data) { return; }
      var div = $(id);
      // the outline first: plotly re-applies a selection's points while its outline is kept
      Plotly.relayout(div, { selections: [] }).then(function () {
        return Plotly.restyle(div, { selectedpoints: [null] });
      });
    });
  }
  function setGroup(idx, how, which) {
    if (!idx.length) { return; }
    S.group = { idx: idx, how: how, which: which };
    clearPlotSelections((how === 'box' || how === 'lasso') ? MAP_DIV[which] : null);
    updateOverlays();
    renderGroup();
    $('group-panel').scrollIntoView({ block: 'nearest' });
  }
  function clearGroup() {
    S.group = null;
    clearPlotSelections(null);   // plotly's own marks of the selection go too
    updateOverlays();
    renderGroup();
  }
  function makeup(idx) {
    // [{label, name, count, share of the group, share of its class}], largest first
    var counts = {}, totals = {}, i;
    for (i = 0; i < N; i++) { totals[LABELS[i]] = (totals[LABELS[i]] || 0) + 1; }
    idx.forEach(function (j) { counts[LABELS[j]] = (counts[LABELS[j]] || 0) + 1; });
    var labels = Object.keys(totals).map(Number).sort(function (x, y) { return x - y; });
    return Object.keys(counts).map(Number).map(function (l) {
      return { label: l, name: className(idx.filter(function (j) { return LABELS[j] === l; })[0]),
               count: counts[l], share: counts[l] / idx.length, ofClass: counts[l] / totals[l],
               color: LABEL_COLORS[labels.indexOf(l) % LABEL_COLORS.length] };
    }).sort(function (x, y) { return y.count - x.count || x.label - y.label; });
  }
  // ------------------------------------------------------------------ class enrichment
  // The selection's classes against the rest, as rdx.evaluation.enrichment words them: for
  // each class, a one-sided hypergeometric (Fisher's exact) test of over-representation,
  // Benjamini–Hochberg adjusted over the classes tested. Exact tails from log-gamma, so that
  // a tiny p-value of a large selection is still ordered right (no normal approximation).
  var LANCZOS = [0.99999999999980993, 676.5203681218851, -1259.1392167224028,
                 771.32342877765313, -176.61502916214059, 12.507343278686905,
                 -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7];
  function logGamma(x) {
    // Lanczos (g = 7, 9 terms): relative error ~1e-15 for x > 0.5; reflection below
    if (x < 0.5) { return Math.log(Math.PI / Math.abs(Math.sin(Math.PI * x))) - logGamma(1 - x); }
    x -= 1;
    var a = LANCZOS[0], t = x + 7.5;
    for (var i = 1; i < 9; i++) { a += LANCZOS[i] / (x + i); }
    return 0.5 * Math.log(2 * Math.PI) + (x + 0.5) * Math.log(t) - t + Math.log(a);
  }
  function logChoose(a, b) {
    if (b < 0 || b > a) { return -Infinity; }
    if (b === 0 || b === a) { return 0; }
    return logGamma(a + 1) - logGamma(b + 1) - logGamma(a - b + 1);
  }
  function hypergeomSf(N, K, n, k) {
    // P(X ≥ k), X ~ Hypergeometric(N images, K of the class, n drawn): the chance that a
    // random group of n holds k or more of the class (scipy.stats.hypergeom.sf(k − 1, N, K, n))
    var lo = Math.max(k, 0, n - (N - K)), hi = Math.min(K, n);
    if (lo > hi) { return 0; }
    if (lo <= Math.max(0, n - (N - K))) { return 1; }
    var base = logChoose(N, n), logs = [], top = -Infinity, x;
    for (x = lo; x <= hi; x++) {
      var l = logChoose(K, x) + logChoose(N - K, n - x) - base;
      logs.push(l);
      if (l > top) { top = l; }
    }
    var s = 0;
    for (x = 0; x < logs.length; x++) { s += Math.exp(logs[x] - top); }
    return Math.min(1, Math.exp(top) * s);
  }
  function benjaminiHochberg(p) {
    // adjusted p-values min_{k ≥ i} p_(k)·m/k, at most 1, in the order given
    var m = p.length, order = p.map(function (_, i) { return i; }), out = new Array(m), run = 1;
    order.sort(function (a, b) { return p[a] - p[b] || a - b; });
    for (var r = m - 1; r >= 0; r--) {
      run = Math.min(run, p[order[r]] * m / (r + 1));
      out[order[r]] = Math.min(run, 1);
    }
    return out;
  }
  var ENRICH_ALPHA = 0.05;   // as rdx.evaluation.enrichment's alpha
  function pAdjText(p) {
    // as rdx.evaluation.enrichment._p_text
    if (p >= 0.001) { return 'p_adj ' + p.toFixed(3); }
    return 'p_adj < 1e-' + Math.min(Math.floor(-Math.log10(Math.max(p, 1e-300))), 300);
  }
  function pct(x) {
    // a share in whole percent as Python's f"{100 * x:.0f}" writes it (an exact half to even)
    var v = 100 * x, r = Math.round(v);
    if (v - Math.floor(v) === 0.5 && r % 2) { r -= 1; }
    return String(r);
  }
  function classWord(l) {
    // a class by its name; a class that is a number as "class 3" (as the Python wording)
    var names = DATA.class_names || [], name = names[l] !== undefined ? String(names[l]) : String(l);
    return name.trim() !== '' && isFinite(Number(name)) ? 'class ' + name : name;
  }
  function classEnrichment(idx) {
    // [{label, name, count, shareIn, shareRest, ratio, p, pAdj, significant, text}], the
    // significant ones first (smallest p_adj first); null when the rest is empty
    var inSel = new Uint8Array(N), totals = {}, counts = {}, i, m = idx.length, r = N - idx.length;
    if (!m || !r) { return null; }
    idx.forEach(function (j) { inSel[j] = 1; });
    for (i = 0; i < N; i++) {
      totals[LABELS[i]] = (totals[LABELS[i]] || 0) + 1;
      if (inSel[i]) { counts[LABELS[i]] = (counts[LABELS[i]] || 0) + 1; }
    }
    var tests = Object.keys(totals).map(Number).sort(function (a, b) { return a - b; }).map(function (l) {
      var k = counts[l] || 0, K = totals[l], sIn = k / m, sRest = (K - k) / r;
      return { label: l, name: classWord(l), count: k, shareIn: sIn, shareRest: sRest,
               ratio: sRest > 0 ? sIn / sRest : null, p: hypergeomSf(N, K, m, k) };
    });
    var adj = benjaminiHochberg(tests.map(function (t) { return t.p; }));
    tests.forEach(function (t, j) {
      t.pAdj = adj[j];
      t.significant = t.pAdj <= ENRICH_ALPHA && t.shareIn > t.shareRest;
      t.text = pct(t.shareIn) + ' % ' + t.name + ' (rest ' + pct(t.shareRest) + ' %) (' + pAdjText(t.pAdj) + ')';
    });
    return tests.sort(function (a, b) {
      return (b.significant - a.significant) || (a.pAdj - b.pAdj) || (a.p - b.p) || (a.label - b.label);
    });
  }
  function enrichmentLine(tests) {
    // the one-line description: the findings, strongest first, at most 3 (as Python's)
    if (!tests) { return 'the selection holds every image: no rest to compare with'; }
    var found = tests.filter(function (t) { return t.significant; }), more = found.length - 3;
    if (!found.length) { return 'no class is over-represented (' + tests.length + ' tests)'; }
    return found.slice(0, 3).map(function (t) { return t.text; }).join('; ') + (more > 0 ? '; ' + more + ' more' : '');
  }
  var ENRICH_NOTE = 'One-sided hypergeometric (Fisher\u2019s exact) test of each class\u2019s over-representation in the selection against the rest; Benjamini\u2013Hochberg over the classes tested; significant at p_adj \u2264 0.05.';
  // for tests and the console: the statistics the panel uses
  window.RDXStats = { logGamma: logGamma, hypergeomSf: hypergeomSf, benjaminiHochberg: benjaminiHochberg,
                      classEnrichment: function (idx) { return classEnrichment(Array.prototype.slice.call(idx)); } };

  function spread(E, idx) {
    // mean distance of the points to their centroid in a 2-D map
    var cx = 0, cy = 0, s = 0;
    idx.forEach(function (i) { cx += E[2 * i]; cy += E[2 * i + 1]; });
    cx /= idx.length; cy /= idx.length;
    idx.forEach(function (i) { s += Math.hypot(E[2 * i] - cx, E[2 * i + 1] - cy); });
    return s / idx.length;
  }
  var ALL = null;
  function allIdx() { if (!ALL) { ALL = []; for (var i = 0; i < N; i++) { ALL.push(i); } } return ALL; }
  function meanAffinity(d, idx) {
    // RDX's mean affinity of a group in direction d: (1/|G|²) Σ_{i,j∈G} exp(−β·diff_d[i, j])
    // (the diagonal included, as for an explanation's mean_affinity), from the page's int8
    // copy of the difference matrix; null when the page has none
    var p = P(), m = p.matrix;
    if (!m) { return null; }
    var src = d === 'a_over_b' || m.shared ? m.a_over_b : m[d], sign = d === 'b_over_a' && m.shared ? -1 : 1;
    var beta = p.graph.beta, table = new Float64Array(256), q = src.q, n = N, sum = 0;
    for (var v = -128; v < 128; v++) { table[v + 128] = Math.exp(-beta * sign * v * src.scale); }
    for (var a = 0; a < idx.length; a++) {
      var row = idx[a] * n;
      for (var b = 0; b < idx.length; b++) { sum += table[q[row + idx[b]] + 128]; }
    }
    return sum / (idx.length * idx.length);
  }
  function meanAll(d) {
    var p = P();
    if (p.meanAll[d] === undefined) { p.meanAll[d] = meanAffinity(d, allIdx()); }
    return p.meanAll[d];
  }
  function groupStats(idx) {
    var p = P(), all = allIdx(), st = { n: idx.length, makeup: makeup(idx), enrich: classEnrichment(idx) };
    st.spread = { a: spread(p.emb.a, idx) / (spread(p.emb.a, all) || 1),
                  b: spread(p.emb.b, idx) / (spread(p.emb.b, all) || 1) };
    st.aff = {};
    DIRS.forEach(function (d) { st.aff[d] = { group: meanAffinity(d, idx), all: p.matrix ? meanAll(d) : null }; });
    return st;
  }
  var MAP_NAME = { a: "A's map", b: "B's map", anim: 'the animated map' };
  function groupHow() {
    // how the selection was made: "box in A's map", or a named group (no map)
    return S.group.how + (S.group.which ? ' in ' + MAP_NAME[S.group.which] : '');
  }
  function renderGroup() {
    var box = $('group-panel'), p = P();
    box.innerHTML = '';
    document.body.setAttribute('data-group-size', String(S.group ? S.group.idx.length : 0));
    if (!S.group) {
      box.appendChild(el('p', { cls: 'meaning hint', text: 'Choose Box or Lasso above the maps and drag around points to see a group of images.' }));
      return;
    }
    var idx = S.group.idx, st = groupStats(idx);
    S.group.stats = st;
    box.appendChild(el('h2', { id: 'group-title' }, ['Selection: ' + idx.length + ' image' + (idx.length === 1 ? '' : 's'),
      el('span', { cls: 'meaning', text: ' · ' + groupHow() })]));
    box.appendChild(el('div', { cls: 'gbtns' }, [
      el('button', { cls: 'btn', type: 'button', id: 'group-clear', onclick: clearGroup }, ['Clear selection']),
      el('button', { cls: 'btn', type: 'button', id: 'group-snapshot', title: 'download the view with this selection as one stand-alone HTML file', onclick: saveSnapshot }, ['Save snapshot with selection'])]));
    // class make-up
    var mk = el('table', { cls: 'makeup', id: 'group-makeup' }, [el('tr', {}, [el('th', { text: 'class' }), el('th', { text: 'images' }), el('th', { text: 'of the selection' }), el('th', { text: 'of its class' })])]);
    st.makeup.forEach(function (c) {
      var bar = el('span', { cls: 'bar' }); bar.style.width = Math.round(60 * c.share) + 'px'; bar.style.background = c.color;
      mk.appendChild(el('tr', {}, [el('td', { cls: 'cname' }, [el('span', { cls: 'swatch', style: 'background:' + c.color }), ' ' + c.name]),
        el('td', { cls: 'num', text: String(c.count) }), el('td', { cls: 'num' }, [bar, ' ' + Math.round(100 * c.share) + '%']),
        el('td', { cls: 'num', text: Math.round(100 * c.ofClass) + '%' })]));
    });
    box.appendChild(el('div', { cls: 'gsec' }, [el('b', { text: 'Class make-up' }), mk]));
    // which classes the selection holds more often than the rest, tested
    var en = el('div', { cls: 'gsec', id: 'group-enrichment' }, [el('b', { text: 'Over-represented against the rest' }),
      el('div', { id: 'group-description', text: enrichmentLine(st.enrich) })]);
    if (st.enrich) {
      var et = el('table', { cls: 'makeup', id: 'group-enrichment-table' }, [el('tr', {}, [el('th', { text: 'class' }),
        el('th', { text: 'selection' }), el('th', { text: 'rest' }), el('th', { text: 'ratio' }), el('th', { text: 'p_adj' })])]);
      st.enrich.forEach(function (t) {
        et.appendChild(el('tr', { 'data-label': String(t.label), 'data-significant': t.significant ? '1' : '0', 'data-p-adj': String(t.pAdj),
                                  cls: t.significant ? 'sig' : '' }, [
          el('td', { cls: 'cname', text: t.name }), el('td', { cls: 'num', text: pct(t.shareIn) + ' %' }),
          el('td', { cls: 'num', text: pct(t.shareRest) + ' %' }),
          el('td', { cls: 'num', text: t.ratio === null ? '\u2014' : fmt(t.ratio, 1) + '\u00d7' }),
          el('td', { cls: 'num', text: t.pAdj >= 0.001 ? fmt(t.pAdj, 3) : t.pAdj.toExponential(1) })]));
      });
      en.appendChild(et);
    }
    en.appendChild(el('div', { cls: 'meaning', id: 'group-enrichment-note', text: ENRICH_NOTE }));
    box.appendChild(en);
    // where the group sits in each map
    function sp(v) { return fmt(v, 2) + (v < 0.5 ? ' (tight)' : v > 0.85 ? ' (spread out)' : ''); }
    box.appendChild(el('div', { cls: 'gsec', id: 'group-where' }, [el('b', { text: 'Where it sits' }), el('div', {}, [
      'Marked ', el('span', { cls: 'sq' }), ' in both maps. Spread (mean distance to the group\u2019s centre, 1 = as spread as all images): ',
      el('b', { text: p.a_short }), ' ' + sp(st.spread.a) + ' · ', el('b', { text: p.b_short }), ' ' + sp(st.spread.b) + '.'])]));
    // affinity statistics
    var aff = el('div', { cls: 'gsec', id: 'group-affinity' }, [el('b', { text: 'Mean affinity within the group' })]);
    if (!p.matrix) {
      aff.appendChild(el('p', { cls: 'note', text: 'Not in this page: ' + (p.matrixNote || 'no difference matrix') + '.' }));
    } else {
      var rows = [el('tr', {}, [el('th', { text: '' }), el('th', { text: 'this group' }), el('th', { text: 'all images' })])];
      DIRS.forEach(function (d) {
        var a = st.aff[d];
        rows.push(el('tr', { 'data-dir': d }, [el('th', { text: p.dirs[d].label, title: p.dirs[d].meaning }),
          el('td', { cls: 'num', text: fmt(a.group, 3) }), el('td', { cls: 'num', text: fmt(a.all, 3) })]));
      });
      aff.appendChild(el('table', { cls: 'makeup' }, rows));
      aff.appendChild(el('div', { cls: 'meaning', text: 'As RDX defines an explanation\u2019s mean affinity: the mean of exp(\u2212\u03b2\u00b7diff) over all pairs of the group (\u03b2 = ' +
        fmt(p.graph.beta, 2) + ', graph of ' + p.graph.source + '). Compare with all images: a group that one model holds tighter than the other has a clearly higher value than all images in that direction, as RDX\u2019s explanations do.' }));
    }
    box.appendChild(aff);
    // the images
    var grid = el('div', { cls: 'ggrid', id: 'group-grid' });
    idx.slice(0, GRID_MAX).forEach(function (i, pos) {
      var t = thumbEl(i, 'gi', function () { openModal(idx, pos, true, 'selection ' + (pos + 1) + '/' + idx.length); });
      t.setAttribute('title', '#' + i + ' · ' + className(i));
      t.setAttribute('tabindex', '0');
      t.addEventListener('keydown', function (ev) { if (ev.key === 'Enter') { openModal(idx, pos, true, 'selection'); } });
      grid.appendChild(t);
    });
    box.appendChild(grid);
    if (idx.length > GRID_MAX) { box.appendChild(el('div', { cls: 'meaning', text: 'The first ' + GRID_MAX + ' of ' + idx.length + ' images are shown; the statistics use all of them.' })); }
  }

  // ------------------------------------------------------------------ explanations list
  function renderExplanations() {
    var box = $('explanations'), m = M(), md = MD();
    box.innerHTML = '';
    if (!m) { box.appendChild(el('p', { cls: 'meaning', text: 'This comparison has no explanation method.' })); return; }
    if (!md) { box.appendChild(el('p', { cls: 'meaning', text: m.name + ' has no explanations for this direction.' })); return; }
    var head = m.name + (m.method !== m.name ? ' (' + m.method + ')' : '');
    var bsr = m.bsr && m.bsr[S.dir] !== undefined && m.bsr[S.dir] !== null ? ' · BSR ' + fmt(m.bsr[S.dir]) : '';
    box.appendChild(el('h2', { text: 'Explanations: ' + head + bsr }));
    var sum = [];
    if (md.chance) {
      sum.push('chance ' + fmt(md.chance.bsr_mean, 2) + ' [' + fmt(md.chance.bsr_lo, 2) + ', ' + fmt(md.chance.bsr_hi, 2) + ']');
    }
    if (md.significance) {
      sum.push(md.significance.calibrated === false ? md.significance.n_assessed + ' assessed, no verdict (not calibrated for this pair)'
               : md.significance.n_significant + ' of ' + md.significance.n_assessed + ' significant' +
               (md.significance.alpha !== null && md.significance.alpha !== undefined ? ' at α = ' + md.significance.alpha : ''));
    }
    if (sum.length) { box.appendChild(el('div', { cls: 'meaning', id: 'exp-summary', text: sum.join(' · ') })); }
    // which null, what it is calibrated on and what to do where it is not: said, not hidden
    if (md.significance && md.significance.standing) {
      box.appendChild(el('div', { cls: 'meaning', id: 'sig-standing', text: 'Significance: ' + md.significance.standing }));
    }
    md.explanations.forEach(function (e, j) {
      var k = j + 1, badges = [];
      if (e.n_members !== null && e.n_members !== undefined) { badges.push(el('span', { cls: 'badge', text: e.n_members + ' images' })); }
      if (e.mean_affinity !== null && e.mean_affinity !== undefined) { badges.push(el('span', { cls: 'badge', text: 'mean affinity ' + fmt(e.mean_affinity, 2) })); }
      // "weak": the one name of a low-affinity explanation (rdx.results.types.SCORE_LABELS)
      if (e.low_affinity) { badges.push(el('span', { cls: 'badge warn', title: 'weak: mean affinity below null_threshold, barely tighter in one model than in the other', text: 'weak' })); }
      Object.keys(e.extra || {}).forEach(function (key) {
        if (key === 'description') { return; }       // its own line below the badges
        var v = e.extra[key];
        badges.push(el('span', { cls: 'badge' + ((key === 'filtered' && v) ? ' warn' : ''), text: keyWords(key) + ': ' + fmt(v) }));
      });
      var strip = el('div', { style: 'margin-top:3px' });
      e.images.slice(0, 9).forEach(function (i) {
        var t = thumbEl(i, '', function (ev) { ev.stopPropagation(); select(i, true); });
        t.setAttribute('style', 'width:26px;height:26px;object-fit:contain;image-rendering:pixelated;margin-right:2px;cursor:pointer;display:inline-flex;font-size:8px');
        strip.appendChild(t);
      });
      var item = el('div', { cls: 'exp', style: 'border-left-color:' + EXPL_COLORS[k % EXPL_COLORS.length],
                             title: 'click: select the first image of its grid' },
                    [el('b', { text: 'Explanation ' + k }), sigLine(e)].concat(badges)
                      .concat([descriptionEl(e), strip]));
      item.addEventListener('click', function () { if (e.images.length) { select(e.images[0], true); } });
      box.appendChild(item);
    });
    renderNamedGroups(box, md);
    var extras = Object.keys(md.extra || {});
    if (extras.length) {
      box.appendChild(el('div', { cls: 'meaning' }, extras.map(function (key) { return keyWords(key) + ': ' + fmt(md.extra[key]) + '  '; })));
    }
    var params = Object.keys(m.params || {}).map(function (key) { return key + ' = ' + JSON.stringify(m.params[key]); });
    box.appendChild(el('details', {}, [el('summary', { text: 'parameters of ' + m.name }), el('div', { cls: 'mono', text: params.join(' · ') })]));
  }
  function pText(p) { return p < 0.001 ? '< 0.001' : fmt(p, 3); }
  function renderNamedGroups(box, md) {
    // groups the user named before looking (rdx explain --test-classes / --test-group), each
    // tested against the same group in null pairs; a click selects its images
    if (!md.named) { return; }
    var info = md.named.info;
    var nullText = info.null_name || (info.null === 'twin' ? 'twin null' : 'field null');
    var sec = el('div', { id: 'named-groups' }, [el('h3', { text: 'Named groups' }),
      el('div', { cls: 'meaning', text: 'Named before looking, each tested against the same group in ' + info.n_draws +
        ' null pairs (null: ' + nullText + '); Holm\u2019s correction over ' + info.n_tests + ' tests at \u03b1 = ' + info.alpha + '.' })]);
    md.named.groups.forEach(function (g) {
      var verdict = g.significant === null || g.significant === undefined ? 'no verdict (not calibrated)'
        : (g.significant ? 'significant' : 'not significant');
      var badge = el('span', { cls: 'badge ' + (g.significant === null || g.significant === undefined ? 'uncal' : (g.significant ? 'sig' : 'nonsig')),
                               title: 'p: probability that the same group between two seed twins (the null pairs) is at least this much tighter; Holm-adjusted over the named tests' +
                                      (info.no_verdict ? '. No verdict: ' + info.no_verdict : '') },
                     [verdict + ', p ' + pText(g.p) + ', Holm ' + pText(g.pHolm)]);
      var item = el('div', { cls: 'named-group', 'data-name': g.name, title: 'click: select its ' + g.size + ' images' },
                    [el('b', { text: g.name }), ' ', el('span', { cls: 'badge', text: g.size + ' images' }),
                     ' ', el('span', { cls: 'badge', text: 'statistic ' + fmt(g.statistic, 1) }), ' ', badge]);
      item.addEventListener('click', function () { setGroup(g.members.slice(), 'named group ' + g.name, null); });
      sec.appendChild(item);
    });
    box.appendChild(sec);
  }
  function renderInfo() {
    var p = P(), box = $('info');
    box.innerHTML = '';
    var lines = [el('div', {}, [el('b', { text: p.a_short + ': ' }), p.a_name]),
                 el('div', {}, [el('b', { text: p.b_short + ': ' }), p.b_name]),
                 el('div', {}, ['map: ' + (p.emb.label || p.emb.method) + ' ' + JSON.stringify(p.emb.params || {})]),
                 el('div', {}, ['RDX graph (neighbours, ranking): ' + JSON.stringify(p.graph)]),
                 el('div', {}, ['neighbours shown: ' + p.k + '; neighbourhood size ' + DATA.neighborhood_size])];
    p.info.forEach(function (t) { lines.push(el('div', { text: t })); });
    box.appendChild(el('details', {}, [el('summary', { text: 'about this comparison' })].concat(lines)));
  }

  // ------------------------------------------------------------------ modal
  var MODAL = { ids: [], pos: 0, alone: false };
  function figure(i, title) {
    var f = el('figure', {}, [thumbEl(i), el('figcaption', { text: (title ? title + ': ' : '') + '#' + i + ' · ' + className(i) })]);
    return f;
  }
  function openModal(ids, pos, alone, group) {
    // group: the images are a selection, stepped through one at a time
    MODAL = { ids: ids, pos: pos, alone: alone, group: !!group };
    renderModal();
    $('modal').classList.add('open');
    $('modal').setAttribute('aria-hidden', 'false');
  }
  function renderModal() {
    var box = $('modal-box');
    box.innerHTML = '';
    var j = MODAL.ids[MODAL.pos];
    if (MODAL.group) { box.appendChild(figure(j, 'selection ' + (MODAL.pos + 1) + '/' + MODAL.ids.length)); }
    else if (MODAL.alone) { box.appendChild(figure(j, 'selected')); }
    else {
      box.appendChild(figure(S.selected, 'selected'));
      box.appendChild(figure(j, 'neighbour ' + (MODAL.pos + 1) + '/' + MODAL.ids.length));
    }
    $('modal').setAttribute('data-idx', String(j));
  }
  function closeModal() { $('modal').classList.remove('open'); $('modal').setAttribute('aria-hidden', 'true'); }
  document.addEventListener('keydown', function (ev) {
    if (!$('modal').classList.contains('open')) { return; }
    if (ev.key === 'Escape') { closeModal(); ev.preventDefault(); }
    else if (ev.key === 'ArrowRight' || ev.key === 'ArrowLeft') {
      var n = MODAL.ids.length;
      MODAL.pos = (MODAL.pos + (ev.key === 'ArrowRight' ? 1 : n - 1)) % n;
      renderModal(); ev.preventDefault();
    }
  });

  // ------------------------------------------------------------------ snapshot
  function escHtml(s) {
    return String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')
                    .replace(/"/g, '&quot;').replace(/'/g, '&#39;');
  }
  function mapImage(div) {
    // a PNG of one map as drawn: its points with the overlay of marked points on top
    var box = div.getBoundingClientRect(), w = Math.max(200, Math.round(box.width)), h = Math.max(200, Math.round(box.height));
    var opts = { format: 'png', width: w, height: h };
    return Promise.all([Plotly.toImage(div, opts), Plotly.toImage(overlayOf(div), opts)]).then(function (urls) {
      return Promise.all(urls.map(function (u) {
        return new Promise(function (ok, fail) { var im = new Image(); im.onload = function () { ok(im); }; im.onerror = fail; im.src = u; });
      }));
    }).then(function (ims) {
      var c = document.createElement('canvas');
      c.width = w; c.height = h;
      var g = c.getContext('2d');
      g.fillStyle = '#fff'; g.fillRect(0, 0, w, h);
      ims.forEach(function (im) { g.drawImage(im, 0, 0, w, h); });
      return c.toDataURL('image/png');
    });
  }
  function snapshotMaps() {
    // [[title, PNG data URI]] of the maps as shown; [] when they cannot be drawn
    var divs = plotDivs().filter(function (pd) { return pd[1].data; });
    return Promise.all(divs.map(function (pd) { return mapImage(pd[1]); })).then(function (urls) {
      return urls.map(function (u, j) { return [$('title-' + divs[j][0]).textContent, u]; });
    }, function () { return []; });
  }
  function snapshotHtml(maps) {
    var p = P(), i = S.selected, k = p.k, d = p.dirs[S.dir], snap = DATA.snapshot;
    function img(j, cls) {
      return THUMBS ? '<img class="' + cls + '" src="' + THUMBS[j] + '" alt="#' + j + '" data-idx="' + j + '">'
                    : '<span class="ph ' + cls + '" data-idx="' + j + '">#' + j + '</span>';
    }
    var html = [];
    html.push('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">');
    html.push('<meta http-equiv="Content-Security-Policy" content="' + escHtml(snap.csp) + '">');
    html.push('<meta name="viewport" content="width=device-width, initial-scale=1">');
    html.push('<title>' + escHtml('Snapshot #' + i + ' · ' + DATA.title) + '</title>');
    html.push('<style>' + snap.css + '</style></head><body><main>');
    html.push('<header><div class="crumb">RDX explorer snapshot · ' + escHtml(DATA.title) + ' · ' + escHtml(p.name) + '</div>');
    html.push('<h1>Image #' + i + ' · ' + escHtml(className(i)) + '</h1>');
    html.push('<p>' + escHtml(d.label + ': ' + d.meaning) + '</p></header>');
    html.push('<section class="sel">' + img(i, 'main') + '<div><div><b>' + escHtml(p.a_short) + '</b>: ' + escHtml(p.a_name) + '</div>');
    html.push('<div><b>' + escHtml(p.b_short) + '</b>: ' + escHtml(p.b_name) + '</div>');
    if (M()) {
      // the same badge as on the page; outerHTML escapes its text and title
      var badge = sigLine(explanationAt(explOf(i)));
      html.push('<div>' + escHtml(M().name) + ': ' + escHtml(explName(explOf(i))) +
                (badge ? ' ' + badge.outerHTML : '') + '</div>');
    }
    html.push('<div>ranking: ' + (d.rankOf[i] + 1) + ' of ' + N + ' · neighbourhood affinity sum ' + fmt(d.aff[i], 2) +
              ' · difference sum ' + fmt(d.dsum[i], 2) + '</div></div></section>');
    if (maps && maps.length) {
      html.push('<section class="maps"><h2>Maps</h2><p class="small">' + escHtml((M() ? 'colour: ' + $('color').selectedOptions[0].textContent + ' · ' : '') +
                'ringed: the selected image' + (S.group ? '; squares: the selection' : '')) + '</p><div class="maprow">');
      maps.forEach(function (m) { html.push('<figure><img class="map" src="' + m[1] + '" alt="' + escHtml(m[0]) + '"><figcaption>' + escHtml(m[0]) + '</figcaption></figure>'); });
      html.push('</div></section>');
    }
    var sel = null;
    if (S.group) {
      var st = S.group.stats || groupStats(S.group.idx);
      sel = S.group.idx;
      html.push('<section class="selection"><h2>Selection: ' + sel.length + ' images <span class="small">(' + escHtml(groupHow()) + ')</span></h2>');
      html.push('<p><b>Class make-up:</b> ' + st.makeup.map(function (c) { return escHtml(c.name) + ' ' + c.count + ' (' + Math.round(100 * c.share) + '%)'; }).join(', ') + '</p>');
      html.push('<p><b>Over-represented against the rest:</b> ' + escHtml(enrichmentLine(st.enrich)) + ' <span class="small">(' + escHtml(ENRICH_NOTE) + ')</span></p>');
      html.push('<p><b>Spread</b> (1 = as spread as all images): ' + escHtml(p.a_short) + ' ' + fmt(st.spread.a, 2) + ' · ' + escHtml(p.b_short) + ' ' + fmt(st.spread.b, 2) + '</p>');
      if (p.matrix) {
        html.push('<p><b>Mean affinity within the group</b> (RDX, β = ' + fmt(p.graph.beta, 2) + '): ' + DIRS.map(function (dd) {
          return escHtml(p.dirs[dd].label) + ' ' + fmt(st.aff[dd].group, 3) + ' (all images ' + fmt(st.aff[dd].all, 3) + ')';
        }).join(' · ') + '</p>');
      }
      html.push('<div class="ggrid">' + sel.slice(0, GRID_MAX).map(function (j) { return img(j, 'gi'); }).join('') + '</div></section>');
    }
    var groups = [];
    groupSpec().forEach(function (s) {
      var ids = [];
      html.push('<section class="group"><h2>' + escHtml(s.title) + '</h2><table><tr><th>image</th>');
      for (var j = 0; j < k; j++) { ids.push(s.G.idx[i * k + j]); html.push('<td>' + img(s.G.idx[i * k + j], 'nb') + '</td>'); }
      html.push('</tr><tr><th>#</th>' + ids.map(function (x) { return '<td>' + x + '</td>'; }).join('') + '</tr>');
      html.push('<tr><th>rank ' + escHtml(p.a_short) + '</th>');
      for (j = 0; j < k; j++) { html.push('<td>' + s.G.ra[i * k + j] + '</td>'); }
      html.push('</tr><tr><th>rank ' + escHtml(p.b_short) + '</th>');
      for (j = 0; j < k; j++) { html.push('<td>' + s.G.rb[i * k + j] + '</td>'); }
      html.push('</tr><tr><th>diff</th>');
      for (j = 0; j < k; j++) { html.push('<td>' + s.diff[i * k + j].toFixed(3) + '</td>'); }
      html.push('</tr></table></section>');
      groups.push(ids);
    });
    html.push('<div id="modal" class="modal"><div id="modal-box" class="box"></div></div>');
    html.push('<footer>Written by the RDX explorer (rdx ' + escHtml(DATA.version) + ') from ' + escHtml(DATA.title) + '.</footer></main>');
    var meta = { selected: i, groups: groups, captions: {}, selection: sel ? sel.slice(0, GRID_MAX) : null };
    [i].concat(groups[0], groups[1], groups[2], meta.selection || []).forEach(function (j) { meta.captions[j] = '#' + j + ' · ' + className(j); });
    html.push('<script type="application/json" id="snapshot-data">' + JSON.stringify(meta).replace(/</g, '\\u003c') + '<\/script>');
    html.push('<script>' + snap.script + '<\/script></body></html>\n');
    return html.join('');
  }
  function saveSnapshot() {
    if (S.selected === null) { return Promise.resolve(); }
    document.body.removeAttribute('data-snapshot');
    return snapshotMaps().then(function (maps) { download(snapshotHtml(maps)); });
  }
  function download(html) {
    var name = 'snapshot_' + String(P().name).replace(/[^A-Za-z0-9_.-]+/g, '_') + '_' + S.dir + '_img' +
               ('0000' + S.selected).slice(-Math.max(4, String(S.selected).length)) +
               (S.group ? '_sel' + S.group.idx.length : '') + '.html';
    var url = URL.createObjectURL(new Blob([html], { type: 'text/html' }));
    var a = el('a', { href: url, download: name, style: 'display:none' });
    document.body.appendChild(a);
    a.click();
    setTimeout(function () { URL.revokeObjectURL(url); a.remove(); }, 2000);
    document.body.setAttribute('data-snapshot', name);
  }

  // ------------------------------------------------------------------ controls
  function setSeg(id, value) {
    Array.prototype.forEach.call($(id).querySelectorAll('button'), function (b) {
      b.classList.toggle('on', b.getAttribute('data-value') === value);
    });
  }
  function fillColorSelect() {
    var sel = $('color'), modes = colorModes();
    sel.innerHTML = '';
    modes.forEach(function (m) { sel.appendChild(el('option', { value: m[0], text: m[1] })); });
    if (!modes.some(function (m) { return m[0] === S.color; })) { S.color = modes[0][0]; S.hidden = {}; }
    sel.value = S.color;
  }
  function refreshDirection(autoSelect) {
    var p = P(), d = p.dirs[S.dir];
    setSeg('dir', S.dir);
    $('meaning').textContent = d.label + ': ' + d.meaning;
    var md = MD();
    $('shownull').disabled = !(md && md.hasNull);
    $('shownull-label').title = md && md.hasNull ? 'the images ' + M().name + ' leaves in its no-change group'
                                                 : 'this method has no no-change group';
    fillColorSelect();
    renderExplanations();
    // the selection first, so that the plots are drawn with its ring in one pass
    if (autoSelect || S.selected === null) { S.selected = d.ranking[0]; }
    $('rank').value = String(d.rankOf[S.selected] + 1);
    renderRankLabel();
    renderSelected();
    document.body.setAttribute('data-selected', String(S.selected));
    return drawPlots();
  }
  function refreshPair() {
    var p = P();
    S.range = null;
    $('dir-a').textContent = p.a_short + ' over ' + p.b_short;
    $('dir-b').textContent = p.b_short + ' over ' + p.a_short;
    $('dir-a').title = p.dirs.a_over_b.meaning;
    $('dir-b').title = p.dirs.b_over_a.meaning;
    $('title-a').textContent = p.a_short + ': ' + p.a_name;
    $('title-b').textContent = p.b_short + ': ' + p.b_name;
    var ms = $('method');
    ms.innerHTML = '';
    p.methods.forEach(function (m, j) { ms.appendChild(el('option', { value: String(j), text: m.name })); });
    ms.disabled = !p.methods.length;
    if (S.method >= p.methods.length) { S.method = 0; }
    ms.value = String(S.method);
    var notes = $('pair-notes');
    notes.innerHTML = '';
    if (p.emb.note) { notes.appendChild(el('p', { cls: 'note', text: 'Map: ' + p.emb.note + '.' })); }
    // which layout the maps are, always in view (the page may be read without its build log)
    if (p.emb.label && !p.emb.note) { notes.appendChild(el('p', { cls: 'meaning', id: 'map-method', text: 'Maps: ' + p.emb.label + '.' })); }
    renderInfo();
    renderGroup();   // the same images, this pair's maps and affinities
    return refreshDirection(true);
  }
  function setView(v) {
    if (S.playing) { stopPlay(); }
    S.view = v;
    setSeg('view', v);
    $('side').style.display = v === 'side' ? 'flex' : 'none';
    $('anim').style.display = v === 'side' ? 'none' : 'flex';
    $('animbar').style.display = v === 'side' ? 'none' : 'flex';
    return drawPlots().then(function () { animLabel(); });
  }
  function animLabel() {
    var p = P(), t = S.t;
    $('animlabel').textContent = t <= 0.01 ? p.a_short + ': ' + p.a_name
      : t >= 0.99 ? p.b_short + ': ' + p.b_name : 't = ' + t.toFixed(2);
    $('title-anim').textContent = $('animlabel').textContent;
  }
  function setT(t) {
    S.t = t;
    $('tslider').value = String(Math.round(t * 100));
    animLabel();
    var div = $('plot-anim');
    if (!div.data) { return; }
    var C = coords('anim', t), lists = S.traceIdx.anim;
    Plotly.restyle(div, { x: lists.map(function (l) { return pick(C.X, l); }),
                          y: lists.map(function (l) { return pick(C.Y, l); }) },
                   lists.map(function (_, j) { return j; }));
    drawOverlay('anim', div);
  }
  function stopPlay() { S.playing = false; $('play').textContent = 'Play'; }
  function play() {
    if (S.playing) { stopPlay(); return; }
    S.playing = true; $('play').textContent = 'Stop';
    var t0 = S.t >= 0.99 ? 0 : S.t, start = performance.now(), dur = DATA.anim_duration_ms * (1 - t0);
    function frame(now) {
      if (!S.playing) { return; }
      var t = Math.min(1, t0 + (1 - t0) * (now - start) / Math.max(dur, 1));
      setT(t);
      if (t < 1) { requestAnimationFrame(frame); } else { stopPlay(); }
    }
    requestAnimationFrame(frame);
  }

  function init() {
    $('subtitle').textContent = DATA.dataset.name + (DATA.dataset.split ? ' (' + DATA.dataset.split + ')' : '') + ' · ' + N + ' images';
    var ps = $('pair');
    DATA.pairs.forEach(function (p, j) { ps.appendChild(el('option', { value: String(j), text: p.name })); });
    $('pair-label').style.display = DATA.pairs.length > 1 ? 'inline-flex' : 'none';
    ps.addEventListener('change', function () { S.pair = Number(ps.value); S.hidden = {}; refreshPair(); });
    // a link may name the pair (a layer-wise study's report: explore.html#pair=2) and the
    // direction (#pair=2&dir=b_over_a)
    (location.hash || '').replace(/^#/, '').split('&').forEach(function (kv) {
      var parts = kv.split('='), v = decodeURIComponent(parts[1] || '');
      if (parts[0] === 'pair' && /^[0-9]+$/.test(v) && Number(v) < DATA.pairs.length) { S.pair = Number(v); ps.value = v; }
      if (parts[0] === 'dir' && DIRS.indexOf(v) >= 0) { S.dir = v; }
    });
    $('method').addEventListener('change', function () { S.method = Number($('method').value); S.hidden = {}; refreshDirection(false); });
    Array.prototype.forEach.call($('dir').querySelectorAll('button'), function (b) {
      b.addEventListener('click', function () { S.dir = b.getAttribute('data-value'); S.hidden = {}; refreshDirection(true); });
    });
    Array.prototype.forEach.call($('view').querySelectorAll('button'), function (b) {
      b.addEventListener('click', function () { setView(b.getAttribute('data-value')); });
    });
    Array.prototype.forEach.call($('drag').querySelectorAll('button'), function (b) {
      b.addEventListener('click', function () { setDrag(b.getAttribute('data-value')); });
    });
    document.addEventListener('keydown', function (ev) {
      if (ev.key === 'Escape' && !ev.defaultPrevented && S.group && !$('modal').classList.contains('open')) { clearGroup(); }
    });
    $('color').addEventListener('change', function () { S.color = $('color').value; S.hidden = {}; drawPlots(); });
    $('shownull').addEventListener('change', function () { S.showNull = $('shownull').checked; drawPlots(); });
    $('showgrids').addEventListener('change', function () { S.showGrids = $('showgrids').checked; updateOverlays(); });
    var rank = $('rank');
    rank.max = String(N);
    rank.addEventListener('input', function () { select(P().dirs[S.dir].ranking[Number(rank.value) - 1], false); });
    $('prev').addEventListener('click', function () { rank.value = String(Math.max(1, Number(rank.value) - 1)); select(P().dirs[S.dir].ranking[Number(rank.value) - 1], false); });
    $('next').addEventListener('click', function () { rank.value = String(Math.min(N, Number(rank.value) + 1)); select(P().dirs[S.dir].ranking[Number(rank.value) - 1], false); });
    $('tslider').addEventListener('input', function () { if (S.playing) { stopPlay(); } setT(Number($('tslider').value) / 100); });
    $('play').addEventListener('click', play);
    $('modal').addEventListener('click', function (ev) { if (ev.target === $('modal')) { closeModal(); } });
    var notes = $('notes');
    (DATA.notes || []).forEach(function (t) { notes.appendChild(el('p', { cls: 'note', text: t })); });
    refreshPair().then(function () {
      performance.mark('rdx-ready');
      document.body.setAttribute('data-ready', String(Math.round(performance.now())));
    });
  }
  init();
}());
