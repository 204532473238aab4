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
    document.querySelectorAll(".arithmatex").forEach(function (el) {
      renderMathInElement(el, options);
    });
    document.querySelectorAll(".jupyter-wrapper .jp-RenderedMarkdown").forEach(function (el) {
      renderMathInElement(el, options);
    });
  }
  if (typeof document$ !== "undefined") {
    document$.subscribe(typeset);
  } else {
    document.addEventListener("DOMContentLoaded", typeset);
  }
})();
