// Typeset math with the KaTeX served by this site (docs/vendor/katex).
// Markdown pages: pymdownx.arithmatex (generic mode) wraps math in .arithmatex.
// Executed examples: the notebook's Markdown cells keep $...$ and $$...$$.
// document$ fires on the first load and after every instant navigation.
(function () {
  var delimiters = [
    { left: "$$", right: "$$", display: true },
    { left: "\\[", right: "\\]", display: true },
    { left: "$", right: "$", display: false },
    { left: "\\(", right: "\\)", display: false },
  ];
  function typeset() {
    if (typeof renderMathInElement !== "function") return;
    var options = {
      delimiters: delimiters,
      throwOnError: false,
      // The notebook copy button keeps a hidden copy of each cell's source.
      ignoredClasses: ["clipboard-copy-txt"],
    };
    // The table of contents repeats headings as plain text, \(...\) included.
    var selector = ".arithmatex, .jupyter-wrapper .jp-RenderedMarkdown, .md-nav--secondary .md-nav__link";
    document.querySelectorAll(selector).forEach(function (el) {
      if (el.hasAttribute("data-fg-typeset")) return;
      el.setAttribute("data-fg-typeset", "");
      renderMathInElement(el, options);
    });
    keepPunctuation();
    focusWideMath();
  }
  // A line may break between a formula and the comma or full stop after it,
  // which then starts the next line on its own. Bind the two together. A
  // long formula is left alone: bound, it could no longer break inside
  // itself and would push a phone's page sideways.
  var LONGEST_BOUND = 24;  // characters of the rendered formula
  function keepPunctuation() {
    document.querySelectorAll(".md-content .katex").forEach(function (el) {
      if (el.closest(".katex-display, .fg-nowrap")) return;
      var shown = el.querySelector(".katex-html");
      if (shown && shown.textContent.length > LONGEST_BOUND) return;
      // auto-render puts each formula in a bare <span>; on Markdown pages
      // that sits in arithmatex's <span class="arithmatex">.
      var box = el.parentElement.tagName === "SPAN" && el.parentElement.childNodes.length === 1 ? el.parentElement : el;
      if (box.parentElement.matches("span.arithmatex")) box = box.parentElement;
      var next = box.nextSibling;
      if (!next || next.nodeType !== Node.TEXT_NODE) return;
      var punctuation = next.nodeValue.match(/^[,.;:!?)\]]+/);
      if (!punctuation) return;
      var rest = next.splitText(punctuation[0].length);
      var wrap = document.createElement("span");
      wrap.className = "fg-nowrap";
      box.parentNode.insertBefore(wrap, box);
      wrap.appendChild(box);
      wrap.appendChild(rest.previousSibling);
    });
  }
  // A display equation wider than the column scrolls in its own box
  // (extra.css); keyboard users need to reach that box to scroll it.
  function focusWideMath() {
    document.querySelectorAll(".katex-display").forEach(function (el) {
      if (el.scrollWidth > el.clientWidth + 1) {
        el.setAttribute("tabindex", "0");
      } else {
        el.removeAttribute("tabindex");
      }
    });
  }
  var resizing;
  window.addEventListener("resize", function () {
    clearTimeout(resizing);
    resizing = setTimeout(focusWideMath, 150);
  });
  if (typeof document$ !== "undefined") {
    document$.subscribe(typeset);
  }
  // Also on DOMContentLoaded: from file:// (the OFFLINE=true build) Material
  // 9.8 completes document$ without emitting while navigation.instant is on.
  // typeset() skips math it has already rendered, so running twice is safe.
  document.addEventListener("DOMContentLoaded", typeset);
})();
