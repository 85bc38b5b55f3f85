// Mermaid diagrams stay legible on any screen. A diagram is drawn as wide as its column allows, so a wide one
// on a phone would shrink its labels to a few pixels: here each diagram gets a minimum width at which its
// smallest label is MIN_FONT px, and its box scrolls sideways instead. A tap opens it full size (tap or Escape
// closes it). overrides/main.html opens Material's shadow roots so the SVG inside can be read and sized.
(function () {
  "use strict";

  const MIN_FONT = 12; // px on screen for the smallest label

  // The smallest label font of a diagram, in the diagram's own units.
  function labelFont(svg) {
    const sizes = [...svg.querySelectorAll(".nodeLabel, .edgeLabel, .label, text")]
      .filter((e) => e.textContent.trim())
      .map((e) => parseFloat(getComputedStyle(e).fontSize))
      .filter((s) => s > 0);
    return sizes.length ? Math.min(...sizes) : 16;
  }

  function fit(host) {
    const svg = host.shadowRoot && host.shadowRoot.querySelector("svg");
    const box = svg && svg.viewBox && svg.viewBox.baseVal;
    if (!box || !box.width) return false;
    const width = (box.width * MIN_FONT) / labelFont(svg);
    svg.style.minWidth = `${Math.ceil(width)}px`;
    host.dataset.diagramWidth = String(Math.round(box.width));
    host.title = host.title || (document.documentElement.lang.startsWith("zh") ? "点击查看大图" : "tap to open full size");
    host.addEventListener("click", () => toggle(host, svg, box.width));
    return true;
  }

  function toggle(host, svg, width) {
    const full = host.classList.toggle("course-diagram-full");
    svg.style.maxWidth = full ? "none" : `${width}px`;
    svg.style.width = full ? `${width}px` : "";
  }

  document.addEventListener("keydown", (e) => {
    if (e.key !== "Escape") return;
    document.querySelectorAll(".course-diagram-full").forEach((host) => host.click());
  });

  // Material renders the diagrams some time after the page loads: look until each is drawn (or 20 s passed).
  function watch() {
    const start = Date.now();
    const timer = setInterval(() => {
      const todo = [...document.querySelectorAll("div.mermaid:not([data-diagram-width])")];
      todo.forEach(fit);
      if (!document.querySelector("div.mermaid:not([data-diagram-width])") || Date.now() - start > 20000) {
        clearInterval(timer);
      }
    }, 150);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", watch);
  else watch();
})();
