// Click a figure (or focus it and press Enter or Space) to see it at its
// full size in a layer over the page; Escape, the close button or a click
// closes it and gives the focus back to the figure. Nothing is loaded from
// elsewhere. document$ fires on the first load and after every instant
// navigation; DOMContentLoaded covers file:// (see katex.js).
//
// Why not mkdocs-glightbox (0.5.3, checked against this site): the GLightbox
// 3.3.1 it bundles neither moves the focus into its dialog when it opens nor
// gives it back to the figure when it closes (a keyboard reader is left at
// the top of the page), the plugin copies every notebook figure's data: URI
// into a link around it (the example pages would carry each PNG twice), and
// its white backdrop hides the dark palette's light-ink figures. Material has
// no zoom of its own. This file does the three things and loads nothing.
(function () {
  var FIGURES = ".md-content .jupyter-wrapper .jp-RenderedImage img, .md-content img.fg-drawn, .md-content img.fg-figure";
  var layer = null;
  var opener = null;

  function close() {
    if (!layer) return;
    layer.remove();
    layer = null;
    document.documentElement.style.removeProperty("overflow");
    if (opener && document.contains(opener)) opener.focus();
    opener = null;
  }

  function open(img) {
    close();
    opener = img;
    layer = document.createElement("div");
    layer.className = "fg-zoom";
    layer.setAttribute("role", "dialog");
    layer.setAttribute("aria-modal", "true");
    layer.setAttribute("aria-label", "Figure at full size");
    var big = document.createElement("img");
    big.src = img.currentSrc || img.src;
    big.alt = img.alt;
    if (img.closest(".jupyter-wrapper") || img.classList.contains("fg-figure")) {
      big.className = "fg-zoom__card";  // drawn on white: keep the white card in the dark palette
    }
    var button = document.createElement("button");
    button.type = "button";
    button.className = "fg-zoom__close";
    button.textContent = "Close";
    button.setAttribute("aria-label", "Close the full-size figure");
    layer.appendChild(big);
    layer.appendChild(button);
    layer.addEventListener("click", close);
    layer.addEventListener("keydown", function (event) {
      if (event.key === "Tab") {  // the button is the only stop: keep the focus inside
        event.preventDefault();
        button.focus();
      }
    });
    document.body.appendChild(layer);
    document.documentElement.style.overflow = "hidden";
    button.focus();
  }

  function prepare() {
    close();  // a layer left open by the previous page
    document.querySelectorAll(FIGURES).forEach(function (img) {
      if (img.hasAttribute("data-fg-zoom")) return;
      img.setAttribute("data-fg-zoom", "");
      img.classList.add("fg-zoomable");
      img.setAttribute("tabindex", "0");
      img.setAttribute("role", "button");
      img.setAttribute("title", "Show at full size");
      img.addEventListener("click", function () { open(img); });
      img.addEventListener("keydown", function (event) {
        if (event.key === "Enter" || event.key === " ") {
          event.preventDefault();
          open(img);
        }
      });
    });
  }

  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && layer) {
      event.stopPropagation();
      close();
    }
  }, true);
  if (typeof document$ !== "undefined") document$.subscribe(prepare);
  document.addEventListener("DOMContentLoaded", prepare);
})();
