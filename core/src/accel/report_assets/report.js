(function () {
  "use strict";
  var box = document.getElementById("drawing"), svg = document.getElementById("graph");
  if (!box || !svg) return;
  var detail = document.getElementById("detail-view"), overview = document.getElementById("overview-view");
  var active = detail, W = +detail.getAttribute("data-width"), H = +detail.getAttribute("data-height");
  var view = {x: 0, y: 0, w: W, h: H};
  function size() { var r = svg.getBoundingClientRect(); return {w: r.width || 1, h: r.height || 1}; }
  function show() {
    svg.setAttribute("viewBox", view.x + " " + view.y + " " + view.w + " " + view.h);
  }
  var last = size();
  function fit() {
    var s = last = size(), k = Math.max(W / s.w, H / s.h);
    view.w = s.w * k; view.h = s.h * k;
    view.x = (W - view.w) / 2; view.y = (H - view.h) / 2; show();
  }
  function zoom(factor, px, py) {
    var s = size(), w = view.w / factor;
    if (w < 40 || w > 40 * Math.max(W, H, s.w)) return;
    if (px === undefined) { px = s.w / 2; py = s.h / 2; }
    var ux = view.x + px / s.w * view.w, uy = view.y + py / s.h * view.h;
    view.w = w; view.h = w * s.h / s.w;
    view.x = ux - px / s.w * view.w; view.y = uy - py / s.h * view.h; show();
  }
  function pan(dx, dy) { var s = size(); view.x -= dx * view.w / s.w; view.y -= dy * view.h / s.h; show(); }
  function centre(el) {
    var b = el.getBBox(), s = size();
    if (view.w > s.w) { view.w = s.w; view.h = s.h; }
    view.x = b.x + b.width / 2 - view.w / 2; view.y = b.y + b.height / 2 - view.h / 2; show();
  }
  svg.addEventListener("wheel", function (e) {
    e.preventDefault();
    var r = svg.getBoundingClientRect();
    zoom(Math.exp(-e.deltaY * (e.deltaMode ? 0.05 : 0.0015)), e.clientX - r.left, e.clientY - r.top);
  }, {passive: false});
  var drag = null;
  svg.addEventListener("pointerdown", function (e) {
    if (e.button !== 0) return;
    drag = {x: e.clientX, y: e.clientY, moved: false}; box.focus({preventScroll: true});
  });
  window.addEventListener("pointermove", function (e) {
    if (!drag) return;
    var dx = e.clientX - drag.x, dy = e.clientY - drag.y;
    if (!drag.moved && Math.abs(dx) + Math.abs(dy) < 3) return;
    drag.moved = true; svg.classList.add("panning");
    pan(dx, dy); drag.x = e.clientX; drag.y = e.clientY;
  });
  window.addEventListener("pointerup", function () {
    if (drag && drag.moved) svg.addEventListener("click", function (e) { e.stopPropagation(); }, {capture: true, once: true});
    drag = null; svg.classList.remove("panning");
  });
  var keys = {"+": [1.25], "=": [1.25], "-": [0.8], "_": [0.8]};
  box.addEventListener("keydown", function (e) {
    var step = 60;
    if (keys[e.key]) zoom(keys[e.key][0]);
    else if (e.key === "0") fit();
    else if (e.key === "ArrowLeft") pan(step, 0);
    else if (e.key === "ArrowRight") pan(-step, 0);
    else if (e.key === "ArrowUp") pan(0, step);
    else if (e.key === "ArrowDown") pan(0, -step);
    else return;
    e.preventDefault();
  });

  function showView(v) {  // the drawing or the overview, fitted
    if (!v || v === active) return;
    active.setAttribute("display", "none"); v.removeAttribute("display"); active = v;
    W = +v.getAttribute("data-width"); H = +v.getAttribute("data-height"); fit();
  }
  var parts = Array.prototype.slice.call(detail.querySelectorAll("g.partition"));
  function collapse(p, on) { p.classList.toggle("collapsed", on); }
  parts.forEach(function (p) {
    p.querySelectorAll(".plabel, .summary").forEach(function (el) {
      el.addEventListener("click", function () { collapse(p, !p.classList.contains("collapsed")); });
    });
  });
  document.getElementById("collapse-all").addEventListener("click", function () {
    if (overview) showView(overview); else parts.forEach(function (p) { collapse(p, true); });
  });
  document.getElementById("expand-all").addEventListener("click", function () {
    parts.forEach(function (p) { collapse(p, false); }); showView(detail);
  });
  if (overview) overview.querySelectorAll("g.obox").forEach(function (el) {
    el.addEventListener("click", function () {
      var to = document.getElementById(el.getAttribute("data-target"));
      showView(detail);
      if (!to) return;
      if (to.classList.contains("partition")) collapse(to, false);
      centre(to);
    });
  });
  document.getElementById("fit").addEventListener("click", fit);
  document.getElementById("zoom-in").addEventListener("click", function () { zoom(1.25); });
  document.getElementById("zoom-out").addEventListener("click", function () { zoom(0.8); });

  var input = document.getElementById("search"), count = document.getElementById("search-count");
  var items = Array.prototype.slice.call(detail.querySelectorAll("g.node")).map(function (el) {
    return {el: el, text: (el.getAttribute("data-nodes") + " " + el.getAttribute("data-ops") + " " +
                           (el.getAttribute("data-composite") || "")).toLowerCase()};
  }).concat(parts.map(function (p) {
    return {el: p, text: (p.getAttribute("data-partition") || "").toLowerCase()};
  }));
  var hits = [], at = -1;
  function pick(k) {
    if (!hits.length) return;
    if (at >= 0) hits[at].classList.remove("current");
    at = (k + hits.length) % hits.length;
    var el = hits[at], p = el.closest ? el.closest("g.partition") : null;
    if (p && el !== p) collapse(p, false);
    el.classList.add("current"); centre(el);
    count.textContent = (at + 1) + " of " + hits.length;
  }
  function search() {
    showView(detail);
    var q = input.value.trim().toLowerCase();
    hits.forEach(function (el) { el.classList.remove("match", "current"); });
    hits = []; at = -1;
    svg.classList.toggle("searching", q.length > 0);
    if (!q) { count.textContent = ""; return; }
    items.forEach(function (it) { if (it.text.indexOf(q) >= 0) { it.el.classList.add("match"); hits.push(it.el); } });
    parts.forEach(function (p) { p.classList.toggle("has-match", !!p.querySelector(".node.match")); });
    count.textContent = hits.length ? hits.length + " found" : "no match";
  }
  input.addEventListener("input", search);
  input.addEventListener("keydown", function (e) {
    if (e.key === "Enter") { e.preventDefault(); pick(e.shiftKey ? at - 1 : at + 1); }
    else if (e.key === "Escape") { input.value = ""; search(); box.focus(); }
  });
  document.getElementById("next").addEventListener("click", function () { pick(at + 1); });
  document.getElementById("prev").addEventListener("click", function () { pick(at - 1); });
  document.addEventListener("keydown", function (e) {
    if (e.key === "/" && document.activeElement !== input) { e.preventDefault(); input.focus(); }
  });
  svg.querySelectorAll("path.stub").forEach(function (stub) {
    stub.addEventListener("click", function () {
      var to = document.getElementById(stub.getAttribute("data-go"));
      if (!to || to.closest("g.view") !== active) return;
      var p = to.closest("g.partition");
      if (p) collapse(p, false);
      if (at >= 0 && hits[at]) hits[at].classList.remove("current");
      svg.querySelectorAll(".current").forEach(function (el) { el.classList.remove("current"); });
      to.classList.add("current"); centre(to);
    });
  });
  window.addEventListener("resize", function () {  // keep the zoom and the centre
    var s = size(), k = view.w / last.w, cx = view.x + view.w / 2, cy = view.y + view.h / 2;
    view.w = s.w * k; view.h = s.h * k; view.x = cx - view.w / 2; view.y = cy - view.h / 2;
    last = s; show();
  });
  fit();
})();
