// The config.json calculator of docs/modern/models.md, in the reader's browser:
// the same reading and the same sums as snippets/modern/config_calculator.py
// (cache_from_config, flops_from_config), in BigInt so every byte and FLOP is
// exact, with the Python's error messages (repr included). The census configs
// come from hooks/config_calculator.py as JSON inside the page. Nothing is
// fetched, so the form works from file:// too. tests/test_calculator_browser.py
// checks that this file and the Python agree.
(function () {
  var SOFTMAX = ["full_attention", "sliding_attention", "chunked_attention"];
  var KINDS = SOFTMAX.concat(["linear_attention"]);

  function PyFloat(v) { this.v = v; }  // a JSON number written with "." or "e"
  function fail(type, message) { var e = new Error(message); e.name = type; throw e; }
  function isDict(v) {
    return v !== null && typeof v === "object" && !Array.isArray(v) && !(v instanceof PyFloat);
  }
  function isInt(v) { return typeof v === "number" && Number.isInteger(v); }
  function truthy(v) {
    if (v === null || v === undefined) return false;
    if (v instanceof PyFloat) return v.v !== 0;
    if (Array.isArray(v) || typeof v === "string") return v.length > 0;
    if (typeof v === "object") return Object.keys(v).length > 0;
    return Boolean(v);
  }
  function repr(v) {  // Python's repr of what json.load returns
    if (v === null || v === undefined) return "None";
    if (v === true) return "True";
    if (v === false) return "False";
    if (v instanceof PyFloat) return Number.isInteger(v.v) && Math.abs(v.v) < 1e16 ? v.v + ".0" : String(v.v);
    if (typeof v === "number" || typeof v === "bigint") return String(v);
    if (typeof v === "string") {
      var q = v.indexOf("'") >= 0 && v.indexOf('"') < 0 ? '"' : "'";
      var body = v.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/\r/g, "\\r").replace(/\t/g, "\\t");
      return q + (q === "'" ? body.replace(/'/g, "\\'") : body) + q;
    }
    if (Array.isArray(v)) return "[" + v.map(repr).join(", ") + "]";
    return "{" + Object.keys(v).map(function (k) { return repr(k) + ": " + repr(v[k]); }).join(", ") + "}";
  }
  var KINDS_REPR = "(" + KINDS.map(repr).join(", ") + ")";

  function get(cfg, name) { var v = cfg[name]; return v === undefined ? null : v; }
  function field(cfg, name, dflt, minimum) {  // _field: an int >= minimum, else a named error
    if (minimum === undefined) minimum = 1;
    var v = get(cfg, name) !== null ? cfg[name] : (dflt === undefined ? null : dflt);
    if (!isInt(v) || v < minimum) {
      fail("ValueError", "config[" + repr(name) + "] must be an int >= " + minimum + ", got " + repr(v));
    }
    return BigInt(v);
  }
  function count(list, kind) { return BigInt(list.filter(function (t) { return t === kind; }).length); }
  function min(a, b) { return a < b ? a : b; }

  function read(config) {  // _read
    if (!isDict(config)) fail("TypeError", "config must be a dict (json.load of a file), got " + repr(config));
    var nested = get(config, "text_config");
    var cfg = isDict(nested) ? nested : config;
    if (truthy(get(cfg, "compress_ratios"))) {
      fail("ValueError", "config['compress_ratios'] (compressed caches) is not read here, got "
        + repr(cfg.compress_ratios));
    }
    var n = field(cfg, "num_hidden_layers"), h = field(cfg, "num_attention_heads");
    var s = { layers: n, heads: h, h_kv: field(cfg, "num_key_value_heads", Number(h)),
              shared: field(cfg, "num_kv_shared_layers", 0, 0) };
    var sliding = truthy(get(cfg, "sliding_window")) && get(cfg, "use_sliding_window") !== false;
    var local = truthy(get(cfg, "full_attention_interval")) ? "linear_attention"
      : (sliding ? "sliding_attention" : "full_attention");
    var every = field(cfg, "full_attention_interval", 0, 0);
    if (every === 0n) every = field(cfg, "sliding_window_pattern", Number(n) + 1);
    var types = get(cfg, "layer_types");
    if (!truthy(types)) {
      types = [];
      for (var i = 1n; i <= n; i++) types.push(i % every === 0n ? KINDS[0] : local);
    }
    if (Array.isArray(types) && BigInt(types.length) === n) {
      types.forEach(function (t) {  // Python's set() refuses unhashable entries first
        if (t !== null && typeof t === "object" && !(t instanceof PyFloat)) {
          fail("TypeError", "unhashable type: '" + (Array.isArray(t) ? "list" : "dict") + "'");
        }
      });
    }
    if (!Array.isArray(types) || BigInt(types.length) !== n
        || !types.every(function (t) { return KINDS.indexOf(t) >= 0; })) {
      fail("ValueError", "config['layer_types'] must list " + n + " of " + KINDS_REPR + ", got " + repr(types));
    }
    s.types = types;
    s.span = { full_attention: null,
               sliding_attention: types.indexOf(SOFTMAX[1]) >= 0 ? field(cfg, "sliding_window") : null,
               chunked_attention: types.indexOf(SOFTMAX[2]) >= 0 ? field(cfg, "attention_chunk_size") : null };
    if (get(cfg, "kv_lora_rank") !== null) {  // latent attention: d_c + d_R (+ index key)
      var rope = field(cfg, "qk_rope_head_dim", undefined, 0);
      var index = field(cfg, "index_head_dim", 0, 0);
      s.per_token = field(cfg, "kv_lora_rank") + rope + index;
      s.d_qk = field(cfg, "qk_nope_head_dim", undefined, 0) + rope;
      s.d_v = field(cfg, "v_head_dim");
    } else {
      var d = get(cfg, "head_dim") !== null ? field(cfg, "head_dim") : field(cfg, "hidden_size") / h;
      s.per_token = s.h_kv * (d + d);
      s.d_qk = s.d_v = d;
    }
    if (types.indexOf("linear_attention") >= 0) {
      s.linear = ["num_key_heads", "num_value_heads", "key_head_dim", "value_head_dim", "conv_kernel_dim"]
        .map(function (f) { return field(cfg, "linear_" + f); });
    }
    return s;
  }

  function checkInts(values) {  // _check_calc_ints
    Object.keys(values).forEach(function (name) {
      var v = values[name];
      if (!(typeof v === "bigint" || isInt(v) || typeof v === "boolean") || v < 1) {
        fail("ValueError", name + " must be an int >= 1, got " + repr(v));
      }
    });
  }
  function big(v) { return BigInt(v === true ? 1 : v); }

  function cache(config, tokens, kvBytes, stateBytes, batch) {  // cache_from_config
    if (kvBytes === undefined) kvBytes = 2;
    if (stateBytes === undefined) stateBytes = 4;
    if (batch === undefined) batch = 1;
    checkInts({ tokens: tokens, kv_dtype_bytes: kvBytes, state_dtype_bytes: stateBytes, batch: batch });
    var T = big(tokens), b = big(kvBytes), bs = big(stateBytes), B = big(batch);
    var s = read(config);
    var own = s.types.slice(0, Number(s.layers - s.shared));  // shared layers keep no cache
    var out = { per_token: s.per_token, layers: {}, bytes_per_token: {}, bytes: {} };
    KINDS.forEach(function (k) { out.layers[k] = count(own, k); });
    out.layers.shared = s.shared;
    SOFTMAX.forEach(function (kind) {
      var step = B * b * s.per_token * count(own, kind);
      out.bytes_per_token[kind] = step;
      out.bytes[kind] = step && step * (kind === "full_attention" ? T : min(T, s.span[kind]));
    });
    var state = 0n;
    if (s.linear) {
      var L = s.linear;  // n_k, n_v, d_k, d_v, kernel
      state = (2n * L[0] * L[2] + L[1] * L[3]) * L[4] * b + L[1] * L[2] * L[3] * bs;
    }
    out.bytes.linear_attention = B * state * count(own, "linear_attention");
    out.total = Object.keys(out.bytes).reduce(function (a, k) { return a + out.bytes[k]; }, 0n);
    return out;
  }

  function pairs(kind, T, w) {  // causal_pairs
    if (kind === "full_attention" || T <= w) return T * (T + 1n) / 2n;
    if (kind === "sliding_attention") return w * (w + 1n) / 2n + (T - w) * w;
    var whole = T / w, rest = T % w;  // one triangle per chunk
    return whole * w * (w + 1n) / 2n + rest * (rest + 1n) / 2n;
  }
  function keysRead(kind, t, w) {  // keys_read
    if (kind === "sliding_attention") return min(t, w);
    if (kind === "chunked_attention") return (t - 1n) % w + 1n;
    return t;
  }

  function flops(config, tokens) {  // flops_from_config
    checkInts({ tokens: tokens });
    var T = big(tokens), s = read(config);
    var out = { prefill: {}, decode: {} };
    SOFTMAX.forEach(function (kind) {
      var cost = count(s.types, kind) * 2n * s.heads * (s.d_qk + s.d_v);  // shared layers attend too
      out.prefill[kind] = cost && cost * pairs(kind, T, s.span[kind]);
      out.decode[kind] = cost && cost * keysRead(kind, T, s.span[kind]);
    });
    var L = s.linear || [0n, 0n, 0n, 0n, 0n];
    var step = count(s.types, "linear_attention") * 6n * L[1] * L[2] * L[3];
    out.prefill.linear_attention = step * T;
    out.decode.linear_attention = step;
    ["prefill", "decode"].forEach(function (p) {
      out[p + "_total"] = KINDS.reduce(function (a, k) { return a + out[p][k]; }, 0n);
    });
    return out;
  }

  function parse(text) {  // json.loads, keeping 3.0 a float as Python does
    return JSON.parse(text, function (key, value, context) {
      return typeof value === "number" && context && /[.eE]/.test(context.source) ? new PyFloat(value) : value;
    });
  }

  // --- the form ---------------------------------------------------------------
  var UNITS = [["TiB", 2n ** 40n], ["GiB", 2n ** 30n], ["MiB", 2n ** 20n], ["KiB", 1024n]];
  function bytesText(n) {
    for (var i = 0; i < UNITS.length; i++) {
      if (n >= UNITS[i][1]) return (Number(n) / Number(UNITS[i][1])).toPrecision(4) + " " + UNITS[i][0];
    }
    return n + " B";
  }
  function bytesBoth(n) { return n < 1024n ? n + " B" : n.toLocaleString("en") + " B (" + bytesText(n) + ")"; }
  function flopText(n) {
    var p = [["P", 1e15], ["T", 1e12], ["G", 1e9], ["M", 1e6]];
    for (var i = 0; i < p.length; i++) if (Number(n) >= p[i][1]) return (Number(n) / p[i][1]).toPrecision(4) + " " + p[i][0] + "FLOP";
    return n + " FLOP";
  }
  function cell(tr, text, key, value) {
    var td = document.createElement(key ? "td" : "th");
    td.textContent = text;
    if (key) { td.setAttribute("data-key", key); td.setAttribute("data-value", String(value)); }
    tr.appendChild(td);
  }
  function table(root, head, rows) {
    var t = document.createElement("table"), tr = document.createElement("tr");
    head.forEach(function (h) { cell(tr, h); });
    t.appendChild(tr);
    rows.forEach(function (r) {
      var row = document.createElement("tr");
      cell(row, r[0]);
      r.slice(1).forEach(function (c) { cell(row, c[0], c[1], c[2]); });
      t.appendChild(row);
    });
    t.tabIndex = 0;  // the theme lets a wide table scroll: a keyboard must reach it
    root.appendChild(t);
  }
  function pretty(config) {  // one key a line, lists on one line
    return "{\n" + Object.keys(config).map(function (k) {
      return "  " + JSON.stringify(k) + ": " + JSON.stringify(config[k]);
    }).join(",\n") + "\n}";
  }

  function show(form) {
    var out = form.querySelector("[data-role=output]");
    out.textContent = "";
    var tokensText = form.querySelector("[data-role=tokens]").value.trim();
    var tokens = /^[0-9]+$/.test(tokensText) ? BigInt(tokensText) : tokensText;
    var kv = Number(form.querySelector("[data-role=dtype]").value);
    var c, f;
    try {
      var config = parse(form.querySelector("[data-role=config]").value);
    } catch (e) {
      out.setAttribute("data-error", "");
      out.textContent = "config.json is not valid JSON: " + e.message;
      return;
    }
    try {
      c = cache(config, tokens, kv);
      f = flops(config, tokens);
    } catch (e) {
      out.setAttribute("data-error", "");
      out.textContent = e.name + ": " + e.message;
      return;
    }
    out.removeAttribute("data-error");
    var rows = KINDS.map(function (k) {
      var soft = k !== "linear_attention";
      var perTok = soft ? c.bytes_per_token[k] : 0n;
      return [k.replace("_attention", ""),
              [String(c.layers[k]), "layers." + k, c.layers[k]],
              [soft ? perTok.toLocaleString("en") + " B" : "fixed", "bytes_per_token." + k, perTok],
              [bytesBoth(c.bytes[k]), "bytes." + k, c.bytes[k]],
              [flopText(f.prefill[k]), "prefill." + k, f.prefill[k]],
              [flopText(f.decode[k]), "decode." + k, f.decode[k]]];
    });
    var perToken = SOFTMAX.reduce(function (a, k) { return a + c.bytes_per_token[k]; }, 0n);
    var caching = KINDS.reduce(function (a, k) { return a + c.layers[k]; }, 0n);
    rows.push(["total", [caching + " (+ " + c.layers.shared + " shared)", "layers.shared", c.layers.shared],
               [perToken.toLocaleString("en") + " B", "bytes_per_token.total", perToken],
               [bytesBoth(c.total), "total", c.total],
               [flopText(f.prefill_total), "prefill_total", f.prefill_total],
               [flopText(f.decode_total), "decode_total", f.decode_total]]);
    var p = document.createElement("p");
    p.textContent = "Numbers cached per token by one softmax layer: ";
    var e = document.createElement("strong");
    e.textContent = String(c.per_token);
    e.setAttribute("data-key", "per_token");
    e.setAttribute("data-value", String(c.per_token));
    p.appendChild(e);
    out.appendChild(p);
    table(out, ["layers", "caching", "bytes per token", "bytes after " + tokensText + " tokens",
                "prefill", "decode (last token)"], rows);
  }

  function start() {
    var form = document.querySelector("form.fg-calc");
    if (!form || form.hasAttribute("data-fg-ready")) return;
    var data = document.querySelector("script.fg-calc-census");
    var census = data ? JSON.parse(data.textContent) : [];
    var select = form.querySelector("[data-role=model]");
    census.forEach(function (m, i) {
      var o = document.createElement("option");
      o.value = String(i);
      o.textContent = m.name;
      select.appendChild(o);
    });
    select.addEventListener("change", function () {
      if (select.value === "") return;
      form.querySelector("[data-role=config]").value = pretty(census[Number(select.value)].config);
      show(form);
    });
    form.addEventListener("submit", function (event) { event.preventDefault(); show(form); });
    form.setAttribute("data-fg-ready", "");
    show(form);
  }

  window.fgConfigCalculator = { cache: cache, flops: flops, parse: parse };
  // Loaded at the end of the page's content (hooks/page_scripts.py), and run
  // again by Material's instant navigation each time the page is shown.
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
