// spool console: keeps the counts and sparklines of the page current,
// reading /console/live at most once a second. It only sets text and
// attributes (never HTML), and the page works without it.
(function () {
  "use strict";
  var live = document.querySelectorAll("[data-live]");
  if (!live.length) { return; }
  var every = 1000;
  function apply(d) {
    for (var i = 0; i < live.length; i++) {
      var el = live[i];
      var v = d.counts[el.getAttribute("data-live")];
      if (v !== undefined && el.textContent !== String(v)) { el.textContent = String(v); }
    }
    var depth = document.getElementById("depth-spark");
    if (depth) { depth.setAttribute("points", d.depth_points); }
    var rate = document.getElementById("rate-spark");
    if (rate) { rate.setAttribute("points", d.rate_points); }
    document.documentElement.setAttribute("data-updated", String(Date.now()));
  }
  function tick() {
    if (document.hidden) { setTimeout(tick, every); return; }
    fetch("/console/live", { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (d) { if (d) { apply(d); } })
      .catch(function () {})
      .then(function () { setTimeout(tick, every); });
  }
  setTimeout(tick, every);
})();
