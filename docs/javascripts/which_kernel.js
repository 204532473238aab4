// The which-kernel form (docs/efficiency/which-kernel.md): which SDPA backend
// runs for a described call, and why the others refuse, computed here from the
// same rules as snippets/efficiency/sdpa_probe.py. hooks/which_kernel.py adds
// this file only to pages that hold the form; tests/test_which_kernel_browser.py
// checks that it answers as choose_backend and mha_route do. Plain JavaScript.
(function () {
  "use strict";
  if (window.fgWhichKernel) {  // evaluated again by an instant page change
    window.fgWhichKernel.start();
    return;
  }

  var BACKENDS = ["MATH", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION"];
  var VERSIONS = ["2.11", "2.13", "2.15"];

  // --------------------------------------------------------------------------
  // Helpers of the rules (_sm, _cudnn_head_limit, _flash_grad_ok,
  // _efficient_alignment). A compute capability (major, minor) compares as
  // 100 * major + minor, which orders the same as the Python tuples.
  // --------------------------------------------------------------------------
  function half(c) { return c.dtype === "float16" || c.dtype === "bfloat16"; }
  function sm(c, low, high) {
    var v = c.sm ? 100 * c.sm[0] + c.sm[1] : -1;
    return c.sm !== null && low <= v && v <= high;
  }
  function cudnnHeadLimit(c) {
    var cu = c.cudnn || 0;  // "no cuDNN": compared as 0 (see the report in the test)
    var big = (c.sm[0] === 9 && c.sm[1] === 0) || c.sm[0] === 10;
    var oldSm107 = c.sm[0] === 10 && c.sm[1] === 7 && cu <= 92500;
    if (big && !oldSm107 && cu > 92200) return 256;
    if (big && cu >= 91100 && c.d === 192 && c.d_v === 128) return 192;
    return 128;
  }
  function flashGradOk(c) {
    var narrow = sm(c, 806, 809) || sm(c, 1200, 1201);
    if (!(c.requires_grad && narrow)) return true;
    return c.d <= 192 || (c.dropout === 0 && c.d > 224);
  }
  function efficientAlignment(c) {
    var tensorCores = c.sm[0] >= 8 || (c.sm[0] >= 7 && half(c));
    var base = c.sm[0] >= 8 ? 4 : 1;
    return tensorCores ? Math.max(base, half(c) ? 8 : 4) : base;
  }

  // --------------------------------------------------------------------------
  // The tables (CPU_RULES, CUDA_RULES): [why, where in PyTorch, refuses(case)].
  // The sentences are the Python's, word for word.
  // --------------------------------------------------------------------------
  var CUDA_ONLY = ["a CUDA kernel: the CPU order holds only FLASH_ATTENTION and MATH",
    "priority_order_cpp", function (c) { return c.device === "cpu"; }];
  var LOW_PRECISION = "dtype must be float16 or bfloat16";

  var CPU_RULES = {
    MATH: [],
    FLASH_ATTENTION: [
      ["dropout_p > 0: the fused CPU kernel has no dropout", "sdp_utils_cpp.h:240",
        function (c) { return c.dropout > 0; }],
      ["q, k and v must share one head width (d_v = d)", "check_head_dim_size_cpp",
        function (c) { return c.d_v !== c.d; }]],
    EFFICIENT_ATTENTION: [CUDA_ONLY],
    CUDNN_ATTENTION: [CUDA_ONLY]
  };

  var CUDA_RULES = {
    MATH: [],
    FLASH_ATTENTION: [
      ["an attn_mask (bool or float): flash takes masks only as is_causal",
        "sdp_utils_cpp.h:261", function (c) { return c.mask === "bool" || c.mask === "float"; }],
      ["head widths must be equal and at most 256", "check_head_dim_size_flash",
        function (c) { return c.d_v !== c.d || c.d > 256; }],
      ["GPU outside sm80 to sm121", "check_flash_attention_hardware_support",
        function (c) { return !sm(c, 800, 1201); }],
      ["training with 192 < d <= 224 (or d > 224 with dropout) on sm86-89/sm12x",
        "check_requires_grad_and_head_dim_gt192_constraints_on_sm86_89_or_120",
        function (c) { return !flashGradOk(c); }],
      ["is_causal with N != M (flash would align the triangle lower right)",
        "check_flash_causal_non_square_seqlens",
        function (c) { return c.mask === "causal" && c.n !== c.m; }],
      [LOW_PRECISION, "check_dtypes_low_precision", function (c) { return !half(c); }]],
    EFFICIENT_ATTENTION: [
      ["GPU outside sm50 to sm121", "check_mem_efficient_hardware_support",
        function (c) { return !sm(c, 500, 1201); }],
      ["d and d_v must be multiples of the GEMM alignment (8 for 16-bit, " +
        "4 for float32 on sm80+)", "check_head_dim_size_mem_efficient",
        function (c) { var a = efficientAlignment(c); return c.d % a !== 0 || c.d_v % a !== 0; }],
      ["dtype must be float16, float32 or (sm80+) bfloat16", "can_use_mem_efficient_attention",
        function (c) { return c.dtype === "float64" || (c.dtype === "bfloat16" && c.sm[0] < 8); }]],
    CUDNN_ATTENTION: [
      ["no cuDNN 9 at run time", "can_use_cudnn_attention",
        function (c) { return (c.cudnn || 0) < 90000; }],
      ["dropout with cuDNN 9.11 to 9.13", "can_use_cudnn_attention",
        function (c) { return c.dropout > 0 && 91100 < (c.cudnn || 0) && c.cudnn < 91400; }],
      ["torch.use_deterministic_algorithms(True)", "check_cudnn_deterministic",
        function (c) { return c.deterministic; }],
      [LOW_PRECISION, "check_dtypes_low_precision", function (c) { return !half(c); }],
      ["GPU outside sm80 to sm121", "check_cudnn_hardware_support",
        function (c) { return !sm(c, 800, 1201); }],
      ["dropout_p must be a multiple of 1/16", "check_cudnn_dropout",
        function (c) { return c.dropout * 16 !== Math.trunc(c.dropout * 16); }],
      ["head width above the limit (128; 256 on sm90/sm10x with cuDNN > 9.22)",
        "check_cudnn_tensor_shapes",
        function (c) { return Math.max(c.d, c.d_v) > cudnnHeadLimit(c); }],
      ["d and d_v must be multiples of 8", "check_cudnn_tensor_shapes",
        function (c) { return c.d % 8 !== 0 || c.d_v % 8 !== 0; }],
      ["one key (M = 1)", "check_cudnn_tensor_shapes", function (c) { return c.m === 1; }],
      ["one query (N = 1) with dropout", "check_cudnn_tensor_shapes",
        function (c) { return c.dropout > 0 && c.n === 1; }]]
  };

  // --------------------------------------------------------------------------
  // The order and the choice (prefers_cudnn, priority_order, refusals,
  // first_viable, choose_backend)
  // --------------------------------------------------------------------------
  function prefersCudnn(c) {
    if (c.device !== "cuda" || c.cudnn_deprioritized || (c.cudnn || 0) <= 91500) return false;
    var major = c.sm[0], minor = c.sm[1];
    if (c.torch === "2.11" || c.cuda < 13) {  // 2.11, or a CUDA 12 wheel: sm90/100/103
      return (major === 9 || major === 10) && (minor === 0 || minor === 3);
    }
    return major === 9 || major === 10;
  }

  function priorityOrder(c) {
    if (c.device === "cpu") return ["FLASH_ATTENTION", "MATH"];  // priority_order_cpp
    if (prefersCudnn(c)) return ["CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH"];
    return ["FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH", "CUDNN_ATTENTION"];
  }

  function chooseBackend(c) {
    var rules = c.device === "cpu" ? CPU_RULES : CUDA_RULES, refused = {};
    BACKENDS.forEach(function (b) {  // refusals: every rule of the table that refuses
      refused[b] = rules[b].filter(function (r) {
        return (r[3] || VERSIONS).indexOf(c.torch) >= 0 && r[2](c);
      }).map(function (r) { return [r[0], r[1]]; });
    });
    var order = priorityOrder(c);
    var backend = order.filter(function (b) { return !refused[b].length; })[0] || null;  // first_viable
    return {backend: backend, order: order, refused: refused};
  }

  // mha_route: whether nn.MultiheadAttention calls SDPA at all.
  function mhaRoute(c) {
    if (c.mha_fast_path) {
      if (c.device === "cuda" && !c.need_weights && c.mask === "none") {
        var pick = chooseBackend(Object.assign({}, c, {dropout: 0})).backend;
        if (c.d % 8 === 0 && (pick === "FLASH_ATTENTION" || pick === "EFFICIENT_ATTENTION")) {
          return {route: "sdpa", backend: pick, at: "native_multi_head_attention_cuda",
            why: "the CUDA fast path hands a flash or efficient pick to SDPA"};
        }
      }
      return {route: "native", backend: null, at: "activation.py:1433",
        why: "the fast path runs its own kernel, not SDPA"};
    }
    if (c.need_weights) {
      return {route: "weights", backend: null, at: "functional.py:7023",
        why: "need_weights=True multiplies and softmaxes by hand (bmm)"};
    }
    return {route: "sdpa", backend: chooseBackend(c).backend, at: "functional.py:7077",
      why: "need_weights=False off the fast path calls SDPA"};
  }

  // _check_case, for what the form can hold: whole numbers >= 1, a dropout in
  // [0, 1), and GQA only with enable_gqa and H_kv dividing H. Same message.
  function pyFloat(x) { return Number.isInteger(x) ? x.toFixed(1) : String(x); }
  function checkCase(c) {
    var bad = ["n", "m", "d", "d_v", "h", "h_kv"].filter(function (key) {
      return !Number.isInteger(c[key]) || c[key] < 1;
    }).map(function (key) { return key + "=" + c[key] + " (an int >= 1)"; });
    if (!bad.length && c.h !== c.h_kv && (c.h % c.h_kv || !c.enable_gqa)) {
      bad.push("h=" + c.h + ", h_kv=" + c.h_kv + " (h_kv divides h, with enable_gqa)");
    }
    if (!(c.dropout >= 0 && c.dropout < 1)) bad.push("dropout=" + pyFloat(c.dropout) + " (in [0, 1))");
    return bad.length ? "case has bad values, got " + bad.join("; ") : null;
  }

  // The whole answer for one case, as the tests compare it with the Python.
  function decide(c) {
    var error = checkCase(c);
    if (error) return {error: error};
    var out = chooseBackend(c);
    out.mha = mhaRoute(c);
    return out;
  }

  // --------------------------------------------------------------------------
  // The form: one control per key of the case (DEFAULTS), built from this table.
  // --------------------------------------------------------------------------
  var GPUS = [["cpu", "CPU"], ["6.0", "P100 (sm60)"], ["7.0", "V100 (sm70)"],
    ["7.5", "T4 (sm75)"], ["8.0", "A100 (sm80)"], ["8.6", "A10, RTX 3090 (sm86)"],
    ["8.9", "L4, RTX 4090 (sm89)"], ["9.0", "H100, H200 (sm90)"], ["10.0", "B200 (sm100)"],
    ["10.3", "B300 (sm103)"], ["12.0", "RTX 5090 (sm120)"], ["12.1", "DGX Spark (sm121)"]];
  var CUDNNS = [["", "none"], ["90100", "9.1.0"], ["91002", "9.10.2"], ["91100", "9.11.0"],
    ["91200", "9.12.0"], ["91500", "9.15.0"], ["91600", "9.16.0"], ["91900", "9.19.0"],
    ["92300", "9.23.0"]];
  function same(values) { return values.map(function (v) { return [v, v]; }); }
  var FIELDS = [  // [key, label, options | "int" | "number" | "check", start value, CUDA only]
    ["torch", "torch", same(VERSIONS), "2.13"],
    ["machine", "device", GPUS, "9.0"],
    ["cuda", "wheel's CUDA", same(["13", "12"]), "13", true],
    ["cudnn", "cuDNN", CUDNNS, "91900", true],
    ["dtype", "dtype", same(["float32", "float64", "float16", "bfloat16"]), "bfloat16"],
    ["mask", "mask", [["none", "none"], ["causal", "is_causal"], ["bool", "bool attn_mask"],
      ["float", "float attn_mask"]], "none"],
    ["n", "N", "int", 128], ["m", "M", "int", 128], ["d", "d", "int", 64],
    ["d_v", "d_v", "int", 64], ["h", "H", "int", 8], ["h_kv", "H_kv", "int", 8],
    ["dropout", "dropout_p", "number", 0],
    ["enable_gqa", "enable_gqa", "check", false],
    ["requires_grad", "requires_grad", "check", false],
    ["deterministic", "use_deterministic_algorithms", "check", false, true],
    ["cudnn_deprioritized", "TORCH_CUDNN_SDPA_DEPRIORITIZED", "check", false, true],
    ["need_weights", "need_weights (MHA)", "check", true],
    ["mha_fast_path", "MHA fast path", "check", false]
  ];

  function esc(s) {
    return String(s).replace(/[&<>"]/g, function (ch) { return "&#" + ch.charCodeAt(0) + ";"; });
  }

  function control(f, id) {
    var kind = f[2], start = f[3], input;
    if (Array.isArray(kind)) {
      input = '<select id="' + id + '" data-key="' + f[0] + '">' + kind.map(function (o) {
        return '<option value="' + o[0] + '"' + (o[0] === start ? " selected" : "") + ">" +
          esc(o[1]) + "</option>";
      }).join("") + "</select>";
    } else if (kind === "check") {
      input = '<input type="checkbox" id="' + id + '" data-key="' + f[0] + '"' +
        (start ? " checked" : "") + ">";
    } else {
      input = '<input type="number" id="' + id + '" data-key="' + f[0] + '" value="' + start +
        '" ' + (kind === "int" ? 'min="1" step="1"' : 'min="0" max="0.9375" step="0.0625"') + ">";
    }
    return '<span class="fg-control"><label for="' + id + '"><code>' + esc(f[1]) +
      "</code></label>" + input + "</span>";
  }

  // The case the controls describe, with the keys of the Python's DEFAULTS.
  function readCase(root) {
    var c = {};
    root.querySelectorAll("[data-key]").forEach(function (el) {
      var key = el.dataset.key;
      c[key] = el.type === "checkbox" ? el.checked : el.type === "number" ? Number(el.value) : el.value;
    });
    var gpu = c.machine;
    delete c.machine;
    c.device = gpu === "cpu" ? "cpu" : "cuda";
    c.sm = gpu === "cpu" ? null : gpu.split(".").map(Number);
    c.cuda = Number(c.cuda);
    c.cudnn = c.cudnn ? Number(c.cudnn) : null;
    return c;
  }

  function reasons(list) {
    return list.length ? "<ul>" + list.map(function (r) {
      return "<li>" + esc(r[0]) + " <small>(<code>" + esc(r[1]) + "</code>)</small></li>";
    }).join("") + "</ul>" : "";
  }

  function render(root) {
    var c = readCase(root), out = decide(c), html;
    root.querySelectorAll("[data-cuda]").forEach(function (el) { el.disabled = c.device === "cpu"; });
    if (out.error) {
      html = '<p class="fg-which-kernel__verdict">' + esc(out.error) + "</p>";
    } else {
      var ran = out.order.indexOf(out.backend);
      var listed = out.order.concat(BACKENDS.filter(function (b) { return out.order.indexOf(b) < 0; }));
      html = '<p class="fg-which-kernel__verdict"><strong>' + out.backend + "</strong> runs.</p><ol>" +
        listed.map(function (b, i) {
          var verdict = b === out.backend ? "runs" : i < ran ? "refuses" :
            i >= out.order.length ? "not in this order" : "not asked";
          var would = i > ran && out.refused[b].length ? "; if forced, it refuses:" : "";
          return '<li data-backend="' + b + '" data-verdict="' + verdict + '"><code>' + b +
            "</code>: " + verdict + would + reasons(out.refused[b]) + "</li>";
        }).join("") + '</ol><p class="fg-which-kernel__mha"><code>nn.MultiheadAttention</code>: ' +
        (out.mha.route === "sdpa" ? "calls SDPA, which runs <code>" + out.mha.backend + "</code>"
          : "calls no SDPA") +
        " (" + esc(out.mha.why) + "; <code>" + esc(out.mha.at) + "</code>)</p>";
    }
    var box = root.querySelector(".fg-which-kernel__out");
    box.innerHTML = html;
    root.dataset.state = JSON.stringify(out);
  }

  function build(root) {
    root.innerHTML = '<fieldset><legend>The call and the machine</legend>' +
      '<div class="fg-which-kernel__controls">' + FIELDS.map(function (f) {
        return control(f, "fg-wk-" + f[0]);
      }).join("") + '</div></fieldset><div class="fg-which-kernel__out" aria-live="polite"></div>';
    FIELDS.forEach(function (f) {
      if (f[4]) root.querySelector('[data-key="' + f[0] + '"]').setAttribute("data-cuda", "");
    });
    root.addEventListener("input", function () { render(root); });
    root.addEventListener("change", function () { render(root); });
    render(root);
    root.setAttribute("data-fg-ready", "");
  }

  function start() {
    document.querySelectorAll(".fg-which-kernel:not([data-fg-ready])").forEach(build);
  }

  window.fgWhichKernel = {decide: decide, start: start, fields: FIELDS};
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
