// Progressive enhancement for the admin pages: everything works without this file.
// It adds the theme switch, auto-refresh of the page content and confirmations.
(function () {
  "use strict";
  var root = document.documentElement;
  var THEMES = ["system", "light", "dark"];

  function setupTheme() {
    var button = document.getElementById("theme-toggle");
    if (!button) return;
    button.hidden = false;
    function show() {
      var current = localStorage.getItem("awa-theme") || "system";
      button.textContent = "◐ " + current;
      button.setAttribute("aria-label", "Theme: " + current);
    }
    button.addEventListener("click", function () {
      var current = localStorage.getItem("awa-theme") || "system";
      var next = THEMES[(THEMES.indexOf(current) + 1) % THEMES.length];
      if (next === "system") { localStorage.removeItem("awa-theme"); delete root.dataset.theme; }
      else { localStorage.setItem("awa-theme", next); root.dataset.theme = next; }
      show();
    });
    show();
  }

  function confirmations(scope) {
    scope.querySelectorAll("form[data-confirm]").forEach(function (form) {
      form.addEventListener("submit", function (event) {
        if (!window.confirm(form.dataset.confirm)) event.preventDefault();
      });
    });
  }

  // Refresh #content in place; skipped while the tab is hidden, while the person is
  // typing or has rows selected, and when switched off.
  function setupRefresh() {
    var interval = parseInt(document.body.dataset.pollMs || "5000", 10);
    var button = document.getElementById("refresh-toggle");
    var on = sessionStorage.getItem("awa-refresh") !== "off";
    if (button) {
      button.hidden = false;
      var show = function () {
        button.setAttribute("aria-pressed", on ? "true" : "false");
        button.textContent = on ? "⟳ live" : "⟳ paused";
      };
      button.addEventListener("click", function () {
        on = !on;
        sessionStorage.setItem("awa-refresh", on ? "on" : "off");
        show();
      });
      show();
    }
    function busy(content) {
      var active = document.activeElement;
      if (active && content.contains(active) && /INPUT|SELECT|TEXTAREA/.test(active.tagName)) return true;
      return content.querySelector("input[type=checkbox]:checked, details[open] pre:hover") !== null;
    }
    function tick() {
      var content = document.getElementById("content");
      if (!on || document.hidden || !content || busy(content)) return schedule();
      var url = new URL(window.location.href);
      url.searchParams.delete("notice");
      url.searchParams.delete("error");
      fetch(url.toString(), { headers: { "X-Awa-Refresh": "1" }, credentials: "same-origin" })
        .then(function (response) {
          if (!response.ok || response.redirected) throw new Error("refresh " + response.status);
          return response.text();
        })
        .then(function (html) {
          var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("content");
          if (fresh && !busy(content)) {
            content.innerHTML = fresh.innerHTML;
            confirmations(content);
          }
        })
        .catch(function () { /* keep the current content; try again next tick */ })
        .finally(schedule);
    }
    function schedule() { window.setTimeout(tick, interval); }
    schedule();
  }

  document.addEventListener("DOMContentLoaded", function () {
    setupTheme();
    confirmations(document);
    setupRefresh();
  });
})();
