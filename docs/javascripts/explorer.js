// The attention explorer (docs/explorer.md) and the softmax playground
// (docs/foundations/scaled-dot-product.md). hooks/explorer.py adds this file
// only to pages that hold one of them. Plain JavaScript, no library.
//
// The explorer reads the per-head queries and keys that the build exported
// from its tiny GPT (assets/explorer/tiny-gpt.js) and computes every weight
// here: scores q_i . k_j / sqrt(d), the mask (True = may attend), and a
// softmax per row that subtracts the row's largest allowed score first. A row
// with no allowed key gets zero weights, as the guide's snippets return.
(function () {
  "use strict";
  if (window.fgExplorer) {  // evaluated again by an instant page change
    window.fgExplorer.start();
    return;
  }

  // --------------------------------------------------------------------------
  // The math
  // --------------------------------------------------------------------------
  // Softmax of one row over the entries where allowed[j] is true.
  function softmax(scores, allowed) {
    var n = scores.length, max = -Infinity, j;
    for (j = 0; j < n; j++) if ((!allowed || allowed[j]) && scores[j] > max) max = scores[j];
    var out = new Array(n).fill(0);
    if (max === -Infinity) return out;  // nothing allowed: zeros, not 0/0
    var total = 0;
    for (j = 0; j < n; j++) {
      if (!allowed || allowed[j]) {
        out[j] = Math.exp(scores[j] - max);  // the shift keeps exp() finite
        total += out[j];
      }
    }
    for (j = 0; j < n; j++) out[j] /= total;
    return out;
  }

  // Frobenius norm of the softmax Jacobian dw/ds = diag(w) - w w^T.
  function jacobianNorm(w) {
    var sum = 0;
    for (var i = 0; i < w.length; i++) {
      for (var j = 0; j < w.length; j++) {
        var entry = (i === j ? w[i] : 0) - w[i] * w[j];
        sum += entry * entry;
      }
    }
    return Math.sqrt(sum);
  }

  // Little-endian float32 values from base64, as float64 numbers.
  function decode(text) {
    var bytes = atob(text), view = new DataView(new ArrayBuffer(bytes.length));
    for (var i = 0; i < bytes.length; i++) view.setUint8(i, bytes.charCodeAt(i));
    var out = new Float64Array(bytes.length / 4);
    for (var t = 0; t < out.length; t++) out[t] = view.getFloat32(4 * t, true);
    return out;
  }

  // The mask as the snippets build it: causal (j <= i), a window of w keys
  // (causal: i - w < j <= i; otherwise |i - j| < w) and padded keys (the last
  // `padding` positions), combined with AND.
  function maskMatrix(n, mask) {
    var rows = [];
    for (var i = 0; i < n; i++) {
      var row = [];
      for (var j = 0; j < n; j++) {
        var ok = true;
        if (mask.causal) ok = ok && j <= i;
        if (mask.window > 0) ok = ok && (mask.causal ? i - j < mask.window : Math.abs(i - j) < mask.window);
        if (mask.padding > 0) ok = ok && j < n - mask.padding;
        row.push(ok);
      }
      rows.push(row);
    }
    return rows;
  }

  // MoBA's block gate for one head (snippets/linear/block_sparse_attention.py):
  // keys in blocks of C, each block scored by q_i . (mean key of the block);
  // query i keeps its own block floor(i / C) and the topK - 1 best blocks that
  // end before it. Returns the (N x N) keys each query may read.
  function blockChoice(q, k, head, n, d, block, topK) {
    var base = head * n * d, nBlocks = Math.ceil(n / block), means = [], b, t, j;
    for (b = 0; b < nBlocks; b++) {
      var mean = new Float64Array(d), end = Math.min(n, (b + 1) * block);
      for (j = b * block; j < end; j++) for (t = 0; t < d; t++) mean[t] += k[base + j * d + t];
      for (t = 0; t < d; t++) mean[t] /= end - b * block;
      means.push(mean);
    }
    var rows = [];
    for (var i = 0; i < n; i++) {
      var own = Math.floor(i / block), past = [];
      for (b = 0; b < own; b++) {
        var s = 0;
        for (t = 0; t < d; t++) s += q[base + i * d + t] * means[b][t];
        past.push([s, b]);
      }
      past.sort(function (x, y) { return y[0] - x[0]; });
      var kept = {};
      kept[own] = true;
      past.slice(0, topK - 1).forEach(function (p) { kept[p[1]] = true; });
      var row = [];
      for (j = 0; j < n; j++) row.push(!!kept[Math.floor(j / block)]);
      rows.push(row);
    }
    return rows;
  }

  // Weights (N x N) of one head: q and k are (H, N, d) float arrays. logGate
  // (log a <= 0) adds the forgetting bias (i - j) log a, FoX's with a constant
  // gate; a key after the query (causal off) is charged its distance |i - j|.
  function headWeights(q, k, head, n, d, allowed, logGate) {
    var scale = 1 / Math.sqrt(d), base = head * n * d, rows = [];
    for (var i = 0; i < n; i++) {
      var scores = [];
      for (var j = 0; j < n; j++) {
        var s = 0;
        for (var t = 0; t < d; t++) s += (q[base + i * d + t] * scale) * k[base + j * d + t];
        if (logGate) s += Math.abs(i - j) * logGate;
        scores.push(s);
      }
      rows.push(softmax(scores, allowed[i]));
    }
    return rows;
  }

  // --------------------------------------------------------------------------
  // Small DOM helpers
  // --------------------------------------------------------------------------
  var uid = 0;
  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    for (var key in attrs || {}) {
      if (key === "text") node.textContent = attrs[key];
      else if (key === "class") node.className = attrs[key];
      else node.setAttribute(key, attrs[key]);
    }
    (children || []).forEach(function (c) { node.appendChild(c); });
    return node;
  }
  function select(label, role, options, value) {
    var id = "fg-x-" + ++uid;
    var s = el("select", { id: id, "data-role": role });
    options.forEach(function (o) {
      var opt = el("option", { value: String(o[0]), text: o[1] });
      if (String(o[0]) === String(value)) opt.selected = true;
      s.appendChild(opt);
    });
    return el("span", { class: "fg-control" }, [el("label", { for: id, text: label }), s]);
  }
  function fmt(w) { return w.toFixed(2); }
  function quote(token) { return "\u201c" + token + "\u201d"; }

  // --------------------------------------------------------------------------
  // The explorer
  // --------------------------------------------------------------------------
  function buildExplorer(root) {
    var data = (window.fgExplorerData || {})[root.getAttribute("data-model") || "tiny-gpt"];
    if (!data) return false;  // the data script has not run yet
    var H = data.heads, d = data.d_head, L = data.layers;
    var state = { sentence: 0, layer: 0, head: 0, query: 6, causal: true, window: 0, padding: 0, block: 0, topk: 2, gate: 1 };
    var decoded = data.sentences.map(function (s) {
      return s.layers.map(function (l) { return { q: decode(l.q), k: decode(l.k) }; });
    });

    var about = el("p", {
      class: "fg-explorer__about",
      text: "Tiny GPT (" + L + " layers, " + H + " heads of width " + d + "), trained by the build for " +
        data.steps + " steps; next-token accuracy after \u201c=\u201d on held-out sequences: " +
        (100 * data.accuracy).toFixed(1) + "%.",
    });
    var controls = el("div", { class: "fg-explorer__controls" }, [
      select("Sequence", "sentence", data.sentences.map(function (s, i) { return [i, s.tokens.join(" ")]; }), 0),
      select("Layer", "layer", range(L).map(function (l) { return [l, String(l + 1)]; }), 0),
      select("Head", "head", range(H).map(function (h) { return [h, String(h + 1)]; }).concat([["all", "all " + H]]), 0),
    ]);
    var causalId = "fg-x-" + ++uid;
    var n0 = data.sentences[0].tokens.length;
    var masks = el("fieldset", { class: "fg-explorer__masks" }, [
      el("legend", { text: "Mask (True = may attend)" }),
      el("span", { class: "fg-control" }, [
        el("input", { type: "checkbox", id: causalId, "data-role": "causal", checked: "" }),
        el("label", { for: causalId, text: "causal (as trained)" }),
      ]),
      select("Window w", "window", [[0, "off"]].concat(range(n0 - 1).map(function (w) { return [w + 1, String(w + 1)]; })), 0),
      select("Padded keys at the end", "padding", range(5).map(function (p) { return [p, String(p)]; }), 0),
    ]);
    var gateId = "fg-x-" + ++uid;
    var gateShown = el("output", { for: gateId, class: "fg-explorer__gate", text: "1.00 (off)" });
    var reads = el("fieldset", { class: "fg-explorer__masks" }, [
      el("legend", { text: "Which keys each query reads" }),
      select("Key blocks of C (MoBA)", "block", [[0, "off"], [2, "2"], [3, "3"], [4, "4"]], 0),
      select("Blocks kept k", "topk", range(4).map(function (b) { return [b + 1, String(b + 1)]; }), 2),
      el("span", { class: "fg-control" }, [
        el("label", { for: gateId, text: "Forget gate a" }),
        el("input", { type: "range", id: gateId, "data-role": "gate", min: "0.5", max: "1", step: "0.05", value: "1" }),
        gateShown,
      ]),
    ]);
    var hintId = "fg-x-" + ++uid;
    var hint = el("p", {
      id: hintId, class: "fg-explorer__hint",
      text: "Hover, tap or focus a token to make it the query; the arrow keys move between tokens. " +
        "The bars show how much it attends to each key.",
    });
    var bars = el("div", { class: "fg-explorer__bars", "aria-hidden": "true" });
    var tokens = el("div", { class: "fg-explorer__tokens", role: "toolbar", "aria-label": "Query token", "aria-describedby": hintId });
    var readout = el("p", { class: "fg-explorer__readout", "aria-live": "polite" });
    var changes = el("p", { class: "fg-explorer__changes", "aria-live": "polite" });
    var maps = el("div", { class: "fg-explorer__maps", "aria-hidden": "true" });
    var table = el("table", { class: "fg-explorer__table" });
    var details = el("details", { class: "fg-explorer__numbers" }, [
      el("summary", { text: "The query's weights as numbers" }), table,
    ]);
    root.textContent = "";
    [about, controls, masks, reads, hint, bars, tokens, readout, changes, maps, details].forEach(function (c) { root.appendChild(c); });

    function tokenList() { return data.sentences[state.sentence].tokens; }
    function heads() { return state.head === "all" ? range(H) : [state.head]; }
    function mask() {
      return { causal: state.causal, window: state.window, padding: state.padding,
               block: state.block, topk: state.topk, gate: state.gate };
    }

    // Per head: the keys each query may read (the mask, AND the blocks MoBA's
    // gate keeps) and the weights.
    function compute(m) {
      var qk = decoded[state.sentence][state.layer], n = tokenList().length;
      var base = maskMatrix(n, m), logGate = m.gate < 1 ? Math.log(m.gate) : 0;
      var allowed = range(H).map(function (h) {
        if (!m.block) return base;
        var kept = blockChoice(qk.q, qk.k, h, n, d, m.block, m.topk);
        return base.map(function (row, i) { return row.map(function (ok, j) { return ok && kept[i][j]; }); });
      });
      return { allowed: allowed, weights: range(H).map(function (h) { return headWeights(qk.q, qk.k, h, n, d, allowed[h], logGate); }) };
    }

    function renderTokens() {
      var toks = tokenList();
      tokens.textContent = "";
      toks.forEach(function (t, i) {
        var b = el("button", {
          type: "button", class: "fg-explorer__token", "data-i": String(i),
          "aria-label": "token " + (i + 1) + ": " + t + (i >= toks.length - state.padding ? " (padding)" : ""),
          "aria-pressed": String(i === state.query), tabindex: i === state.query ? "0" : "-1", text: t,
        });
        if (i >= toks.length - state.padding) b.classList.add("is-padding");
        tokens.appendChild(b);
      });
      setColumns(tokens, toks.length);
    }

    function setColumns(node, n) { node.style.setProperty("--fg-n", String(n)); }

    function render() {
      var toks = tokenList(), n = toks.length, i = state.query;
      var now = compute(mask());
      var trained = compute({ causal: true, window: 0, padding: 0, block: 0, topk: 1, gate: 1 });
      root.setAttribute("data-state", JSON.stringify(state));

      tokens.querySelectorAll("button").forEach(function (b, j) {
        b.setAttribute("aria-pressed", String(j === i));
        b.setAttribute("tabindex", j === i ? "0" : "-1");
      });

      bars.textContent = "";
      heads().forEach(function (h) {
        var row = el("div", { class: "fg-explorer__barrow", "data-head": String(h) });
        setColumns(row, n);
        now.weights[h][i].forEach(function (w, j) {
          var bar = el("div", { class: "fg-explorer__bar", "data-j": String(j), "data-w": String(w) });
          if (!now.allowed[h][i][j]) bar.classList.add("is-masked");
          bar.style.setProperty("--w", String(w));
          bar.title = "head " + (h + 1) + ", key " + (j + 1) + " " + quote(toks[j]) + ": " + (now.allowed[h][i][j] ? w.toFixed(3) : "masked");
          row.appendChild(bar);
        });
        bars.appendChild(el("div", { class: "fg-explorer__barlabel", text: "head " + (h + 1) }));
        bars.appendChild(row);
      });

      maps.textContent = "";
      heads().forEach(function (h) {
        var grid = el("div", { class: "fg-explorer__map", "data-head": String(h) });
        setColumns(grid, n);
        for (var r = 0; r < n; r++) {
          for (var c = 0; c < n; c++) {
            var w = now.weights[h][r][c];
            var cell = el("div", {
              class: "fg-explorer__cell", "data-i": String(r), "data-j": String(c), "data-w": String(w),
            });
            if (!now.allowed[h][r][c]) cell.classList.add("is-masked");
            if (r === i) cell.classList.add("is-query");
            cell.style.setProperty("--w", String(w));
            grid.appendChild(cell);
          }
        }
        maps.appendChild(el("figure", { class: "fg-explorer__figure" }, [
          grid, el("figcaption", { text: "layer " + (state.layer + 1) + ", head " + (h + 1) + ": rows are queries, columns keys" }),
        ]));
      });

      // The numbers, for screen readers and for anyone who wants them.
      table.textContent = "";
      table.appendChild(el("caption", { text: "Weights of query " + (i + 1) + " " + quote(toks[i]) + ", layer " + (state.layer + 1) }));
      var head = el("tr", {}, [el("th", { scope: "col", text: "key" })]);
      heads().forEach(function (h) { head.appendChild(el("th", { scope: "col", text: "head " + (h + 1) })); });
      table.appendChild(el("thead", {}, [head]));
      var body = el("tbody");
      toks.forEach(function (t, j) {
        var tr = el("tr", {}, [el("th", { scope: "row", text: (j + 1) + " " + quote(t) })]);
        heads().forEach(function (h) {
          tr.appendChild(el("td", { text: now.allowed[h][i][j] ? now.weights[h][i][j].toFixed(3) : "masked" }));
        });
        body.appendChild(tr);
      });
      table.appendChild(body);

      // The readout: where the query looks, head by head.
      var parts = heads().map(function (h) {
        var w = now.weights[h][i];
        if (!now.allowed[h][i].some(Boolean)) return "head " + (h + 1) + ": no key allowed, all weights 0";
        var order = range(n).filter(function (j) { return now.allowed[h][i][j]; }).sort(function (a, b) { return w[b] - w[a]; });
        var top = order.slice(0, 2).map(function (j) { return "key " + (j + 1) + " " + quote(toks[j]) + " " + fmt(w[j]); });
        return "head " + (h + 1) + ": " + top.join(", then ");
      });
      readout.textContent = "Query " + (i + 1) + " " + quote(toks[i]) + ", layer " + (state.layer + 1) + ". " + parts.join("; ") + ".";

      var changed = range(n).filter(function (r) {
        return heads().some(function (h) {
          return now.weights[h][r].some(function (w, c) { return Math.abs(w - trained.weights[h][r][c]) > 1e-12; });
        });
      });
      changes.textContent = changed.length === 0
        ? "Every row is the same as under the causal mask the model was trained with."
        : "Rows that differ from the trained (causal) attention: query " + changed.map(function (r) { return r + 1; }).join(", ") + ".";
      changes.setAttribute("data-changed", changed.join(","));
    }

    function choose(i, focus) {
      var n = tokenList().length;
      i = Math.max(0, Math.min(n - 1, i));
      if (i !== state.query) {
        state.query = i;
        render();
      }
      if (focus) tokens.querySelectorAll("button")[i].focus();
    }

    tokens.addEventListener("mouseover", function (e) {
      var b = e.target.closest("button[data-i]");
      if (b) choose(Number(b.getAttribute("data-i")), false);
    });
    tokens.addEventListener("focusin", function (e) {
      var b = e.target.closest("button[data-i]");
      if (b) choose(Number(b.getAttribute("data-i")), false);
    });
    tokens.addEventListener("click", function (e) {
      var b = e.target.closest("button[data-i]");
      if (b) choose(Number(b.getAttribute("data-i")), true);
    });
    tokens.addEventListener("keydown", function (e) {
      var moves = { ArrowLeft: -1, ArrowRight: 1, ArrowUp: -1, ArrowDown: 1 };
      if (e.key in moves) choose(state.query + moves[e.key], true);
      else if (e.key === "Home") choose(0, true);
      else if (e.key === "End") choose(tokenList().length - 1, true);
      else return;
      e.preventDefault();
    });
    maps.addEventListener("click", function (e) {
      var cell = e.target.closest("[data-i]");
      if (cell) choose(Number(cell.getAttribute("data-i")), false);
    });
    function onChange(e) {
      var role = e.target.getAttribute("data-role");
      if (!role) return;
      if (role === "causal") state.causal = e.target.checked;
      else if (role === "gate") {
        state.gate = Number(e.target.value);
        gateShown.textContent = state.gate.toFixed(2) + (state.gate === 1 ? " (off)" : "");
      }
      else if (role === "head") state.head = e.target.value === "all" ? "all" : Number(e.target.value);
      else state[role] = Number(e.target.value);
      if (role === "sentence" || role === "padding") renderTokens();
      render();
    }
    root.addEventListener("change", onChange);
    // The slider redraws while it moves, not only when it is let go.
    root.addEventListener("input", function (e) { if (e.target.type === "range") onChange(e); });

    renderTokens();
    render();
    return true;
  }

  function range(n) {
    var out = [];
    for (var i = 0; i < n; i++) out.push(i);
    return out;
  }

  // --------------------------------------------------------------------------
  // The softmax playground
  // --------------------------------------------------------------------------
  function buildPlayground(root) {
    var initial = (root.getAttribute("data-scores") || "2,1,0.5,-1,0").split(",").map(Number);
    var inputs = el("fieldset", { class: "fg-playground__scores" }, [el("legend", { text: "Scores s (type any number)" })]);
    initial.forEach(function (s, j) {
      var id = "fg-x-" + ++uid;
      inputs.appendChild(el("span", { class: "fg-control" }, [
        el("label", { for: id, text: "s" + (j + 1) }),
        el("input", { type: "number", id: id, step: "0.5", value: String(s), "data-role": "score", "data-j": String(j) }),
      ]));
    });
    var sliderId = "fg-x-" + ++uid, outputId = "fg-x-" + ++uid;
    var slider = el("input", {
      type: "range", id: sliderId, min: "-1", max: "2", step: "0.01", value: "0", "data-role": "scale",
      "aria-describedby": outputId,
    });
    var output = el("output", { id: outputId, for: sliderId });
    var scale = el("div", { class: "fg-playground__scale" }, [
      el("label", { for: sliderId, text: "Scale \u03b1 (1 / temperature), on a log axis" }), slider, output,
    ]);
    var bars = el("div", { class: "fg-playground__bars", role: "list", "aria-label": "Softmax weights" });
    var stats = el("p", { class: "fg-playground__stats", "aria-live": "polite" });
    root.textContent = "";
    [inputs, scale, bars, stats].forEach(function (c) { root.appendChild(c); });

    function render() {
      var alpha = Math.pow(10, Number(slider.value));
      var scores = [].map.call(root.querySelectorAll("input[data-role=score]"), function (input) {
        var v = Number(input.value);
        input.setAttribute("aria-invalid", String(!isFinite(v) || input.value === ""));
        return isFinite(v) ? v : 0;
      });
      var scaled = scores.map(function (s) { return alpha * s; });
      var w = softmax(scaled);
      var max = Math.max.apply(null, w), norm = jacobianNorm(w);
      var entropy = -w.reduce(function (acc, p) { return acc + (p > 0 ? p * Math.log2(p) : 0); }, 0);
      output.textContent = "\u03b1 = " + (alpha < 10 ? alpha.toFixed(2) : alpha.toFixed(1));
      slider.setAttribute("aria-valuetext", "alpha " + alpha.toPrecision(3));
      bars.textContent = "";
      w.forEach(function (p, j) {
        var bar = el("div", {
          class: "fg-playground__bar", role: "listitem", "aria-label": "w" + (j + 1) + " = " + p.toFixed(3),
          "data-j": String(j), "data-w": String(p),
        }, [
          el("span", { class: "fg-playground__value", text: p.toFixed(3) }),
          el("span", { class: "fg-playground__fill" }),
          el("span", { class: "fg-playground__label", text: "w" + (j + 1) }),
        ]);
        bar.style.setProperty("--w", String(p));
        bars.appendChild(bar);
      });
      // The Jacobian's norm is at most 1/2 (two equal weights, the rest 0) and
      // falls to 0 as one weight takes everything: no gradient reaches s.
      var maxNorm = 0.5;
      stats.innerHTML = "";
      stats.appendChild(el("span", { class: "fg-playground__stat", "data-max": String(max) }, [
        document.createTextNode("largest weight " + max.toFixed(3)),
        meter(max, 1),
      ]));
      stats.appendChild(el("span", { class: "fg-playground__stat", "data-jacobian": String(norm) }, [
        document.createTextNode("gradient size \u2016\u2202w/\u2202s\u2016 " + norm.toFixed(3)),
        meter(norm, maxNorm),
      ]));
      stats.appendChild(el("span", { class: "fg-playground__stat", "data-entropy": String(entropy) }, [
        document.createTextNode("entropy " + entropy.toFixed(2) + " bits"),
      ]));
      root.setAttribute("data-alpha", String(alpha));
      root.classList.toggle("is-saturated", max > 0.99);
    }
    function meter(value, top) {
      var m = el("span", { class: "fg-playground__meter" }, [el("span")]);
      m.firstChild.style.width = (100 * Math.min(1, value / top)) + "%";
      return m;
    }
    root.addEventListener("input", render);
    render();
    return true;
  }

  // --------------------------------------------------------------------------
  // Start on every page load and every instant navigation
  // --------------------------------------------------------------------------
  function start() {
    document.querySelectorAll(".fg-explorer:not([data-fg-ready])").forEach(function (root) {
      if (buildExplorer(root)) root.setAttribute("data-fg-ready", "");
    });
    document.querySelectorAll(".fg-softmax-playground:not([data-fg-ready])").forEach(function (root) {
      if (buildPlayground(root)) root.setAttribute("data-fg-ready", "");
    });
  }

  window.fgExplorer = {
    start: start, softmax: softmax, jacobianNorm: jacobianNorm, maskMatrix: maskMatrix,
    headWeights: headWeights, decode: decode,
  };
  if (typeof document$ !== "undefined") document$.subscribe(start);
  // From file:// Material may not emit document$ (see katex.js); the data
  // script may also arrive after this one.
  document.addEventListener("DOMContentLoaded", start);
  document.addEventListener("fg-explorer-data", start);
  if (document.readyState !== "loading") start();
})();
