// Typeset the math that pymdownx.arithmatex (generic mode) leaves in the page, with the
// self-hosted KaTeX (docs/assets/vendor/katex, bundled by tools/vendor_assets.py).
// Inline math arrives as <span class="arithmatex">\(...\)</span>, display math as
// <div class="arithmatex">\[...\]</div>. mkdocs-material's `document$` emits after every page
// load (including instant navigation); without it, fall back to DOMContentLoaded.
(function () {
  "use strict";

  function typeset(root) {
    if (typeof renderMathInElement !== "function") {
      console.error("katex-init: KaTeX auto-render is not loaded (run python tools/vendor_assets.py)");
      return;
    }
    root.querySelectorAll(".arithmatex").forEach(function (el) {
      renderMathInElement(el, {
        delimiters: [
          { left: "\\(", right: "\\)", display: false },
          { left: "\\[", right: "\\]", display: true },
        ],
        throwOnError: false,
      });
    });
  }

  if (typeof document$ !== "undefined" && document$ && typeof document$.subscribe === "function") {
    document$.subscribe(function (doc) {
      typeset((doc && doc.body) || document.body);
    });
  } else {
    document.addEventListener("DOMContentLoaded", function () {
      typeset(document.body);
    });
  }
})();
