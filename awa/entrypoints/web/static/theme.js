// Loaded in <head> without defer, before first paint, so a dark theme does not flash light.
// (A file rather than an inline script: the Content-Security-Policy allows only our own.)
(function () {
  var t = localStorage.getItem("awa-theme");
  if (t) document.documentElement.dataset.theme = t;
})();
